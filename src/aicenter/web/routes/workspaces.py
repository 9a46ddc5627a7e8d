"""Workspaces: the list, a workspace's settings, its members and their roles, and its quotas per pool."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

import aicenter.web.pickers as pickers
from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.core.roles import WorkspaceRole
from aicenter.services import members, quotas, tenancy
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form

router = APIRouter()

CREATE_FIELDS = ("name", "description", "admin_username")
EDIT_FIELDS = ("name", "description")
MEMBER_FIELDS = ("username", "role")
ROLES = [(r.value, r.value.replace("_", " ")) for r in WorkspaceRole]


def _role(raw: str) -> WorkspaceRole:
    try:
        return WorkspaceRole(raw)
    except ValueError:
        raise ValidationFailed(f'"{raw}" is not a role', field="role") from None


# --- list and create ---------------------------------------------------------------------------------------


async def _list(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    request = cx.request
    cursor = request.query_params.get("cursor") or None
    name = request.query_params.get("name", "").strip() or None
    async with cx.ctx.db.read() as session:
        page = await tenancy.list_workspaces(session, cx.actor, limit=50, cursor=cursor, name=name)
    return render(
        cx,
        "workspaces/list.html",
        active="workspaces",
        title="Workspaces",
        forms=forms,
        status=status,
        workspaces=page.items,
        name_filter=name or "",
        next_url=page_url(request, page.next_cursor),
        first_url=first_page_url(request),
    )


@router.get("/workspaces")
async def list_workspaces(cx: Page) -> Response:
    return await _list(cx)


@router.post("/workspaces")
async def create_workspace(post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            admin_user_id = None
            if post.get("admin_username"):
                admin_user_id = (await pickers.user_by_name(session, cx.actor, post.get("admin_username"))).id
            workspace = await tenancy.create_workspace(
                session,
                cx.actor,
                name=post.get("name"),
                description=post.get("description"),
                admin_user_id=admin_user_id,
            )
    except AicenterError as exc:
        state = failed_form(
            "workspace-create", post.values, exc, CREATE_FIELDS, aliases={"admin_user_id": "admin_username"}
        )
        return await _list(cx, forms=[state], status=exc.status)
    return redirect(cx, f"/workspaces/{workspace.id}", f"Workspace {workspace.name} was created.")


# --- one workspace -----------------------------------------------------------------------------------------


async def _detail(
    cx: Console, workspace_id: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    async with cx.ctx.db.read() as session:
        workspace = await tenancy.get_workspace(session, cx.actor, workspace_id)
        member_page = await members.list_members(session, cx.actor, workspace_id, limit=500)
        quota_views = await quotas.list_quotas(session, cx.actor, workspace_id)
        pools = await pickers.pools(session, cx.actor) if cx.is_platform_admin else []
        resource_names = await pickers.quota_resources(session, cx.actor)
    return render(
        cx,
        "workspaces/detail.html",
        active="workspaces",
        title=workspace.name,
        forms=forms,
        status=status,
        workspace=workspace,
        members=member_page.items,
        more_members=member_page.next_cursor is not None,
        quotas=quota_views,
        pools=pools,
        resource_names=resource_names,
        can_admin=cx.can_admin_workspace(workspace.id),
        roles=ROLES,
    )


@router.get("/workspaces/{workspace_id:int}")
async def workspace_detail(workspace_id: Id, cx: Page) -> Response:
    return await _detail(cx, workspace_id)


@router.post("/workspaces/{workspace_id:int}")
async def update_workspace(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            workspace = await tenancy.update_workspace(
                session,
                cx.actor,
                workspace_id,
                name=post.get("name"),
                description=post.get("description"),
                # A checkbox sends nothing when unticked: the hidden field tells "unticked" from "not shown".
                admins_read_logs=bool(post.get("admins_read_logs")) if post.get("admins_read_logs_shown") else None,
            )
    except AicenterError as exc:
        state = failed_form("workspace-edit", post.values, exc, EDIT_FIELDS)
        return await _detail(cx, workspace_id, forms=[state], status=exc.status)
    return redirect(cx, f"/workspaces/{workspace_id}", f"Workspace {workspace.name} was saved.")


@router.post("/workspaces/{workspace_id:int}/delete")
async def delete_workspace(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        workspace = await tenancy.get_workspace(session, cx.actor, workspace_id)
        name = workspace.name
        await tenancy.delete_workspace(session, cx.actor, workspace_id)
    return redirect(cx, "/workspaces", f"Workspace {name} was deleted.")


# --- members -----------------------------------------------------------------------------------------------


@router.post("/workspaces/{workspace_id:int}/members")
async def add_member(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        role = _role(post.get("role") or WorkspaceRole.MEMBER.value)
        username = post.get("username")
        if not username:
            raise ValidationFailed("enter the user name of the person to add", field="username")
        async with cx.ctx.db.write() as session:
            membership = await members.add_member(session, cx.actor, workspace_id, username=username, role=role)
            added = membership.user.username
    except AicenterError as exc:
        state = failed_form("member-add", post.values, exc, MEMBER_FIELDS, aliases={"user_id": "username"})
        return await _detail(cx, workspace_id, forms=[state], status=exc.status)
    return redirect(cx, f"/workspaces/{workspace_id}#members", f"{added} was added as {role.value.replace('_', ' ')}.")


@router.post("/workspaces/{workspace_id:int}/members/{user_id:int}")
async def update_member(workspace_id: Id, user_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        role = _role(post.get("role"))
        async with cx.ctx.db.write() as session:
            membership = await members.update_member(session, cx.actor, workspace_id, user_id, role=role)
            name = membership.user.username
    except AicenterError as exc:
        state = message_form(f"member-{user_id}", exc)
        return await _detail(cx, workspace_id, forms=[state], status=exc.status)
    return redirect(cx, f"/workspaces/{workspace_id}#members", f"{name} is now {role.value.replace('_', ' ')}.")


@router.post("/workspaces/{workspace_id:int}/members/{user_id:int}/remove")
async def remove_member(workspace_id: Id, user_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            await members.remove_member(session, cx.actor, workspace_id, user_id)
    except AicenterError as exc:
        state = message_form(f"member-{user_id}", exc)
        return await _detail(cx, workspace_id, forms=[state], status=exc.status)
    if user_id == cx.actor.user_id and not cx.is_platform_admin:
        return redirect(cx, "/workspaces", "You left the workspace.")
    return redirect(cx, f"/workspaces/{workspace_id}#members", "The member was removed.")


# --- quotas ------------------------------------------------------------------------------------------------


def _resources(values: dict[str, str], prefix: str) -> dict[str, str]:
    """``guaranteed.cpu=4`` ... -> ``{"cpu": "4"}``; empty fields are left out (no limit / nothing guaranteed)."""
    start = f"{prefix}."
    return {k[len(start) :]: v for k, v in values.items() if k.startswith(start) and v}


@router.post("/workspaces/{workspace_id:int}/quotas")
async def set_quota(workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    raw_pool = post.get("pool_id")
    try:
        if not raw_pool.isdigit():
            raise ValidationFailed("choose a pool", field="pool_id")
        async with cx.ctx.db.write() as session:
            view = await quotas.set_quota(
                session,
                cx.actor,
                workspace_id,
                int(raw_pool),
                guaranteed=_resources(post.values, "guaranteed"),
                maximum=_resources(post.values, "maximum"),
            )
    except AicenterError as exc:
        fields = ["pool_id", *(k for k in post.values if k.startswith(("guaranteed.", "maximum.")))]
        state = failed_form("quota", post.values, exc, fields)
        return await _detail(cx, workspace_id, forms=[state], status=exc.status)
    return redirect(cx, f"/workspaces/{workspace_id}#quotas", f"The quota in pool {view.pool_name} was saved.")


@router.post("/workspaces/{workspace_id:int}/quotas/{pool_id:int}/delete")
async def delete_quota(workspace_id: Id, pool_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        await quotas.delete_quota(session, cx.actor, workspace_id, pool_id)
    return redirect(cx, f"/workspaces/{workspace_id}#quotas", "The quota was removed.")
