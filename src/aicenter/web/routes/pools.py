"""Pools: platform admins create, edit and delete them and grant them to workspaces; members see theirs."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.db.models import Workspace
from aicenter.services import inventory, tenancy
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, format_key_values, message_form, parse_key_values

router = APIRouter()

POOL_FIELDS = ("name", "description", "selector")


async def _list(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    # Members see the pools their current workspace may use; admins see every pool.
    workspace_id = None if cx.is_platform_admin or cx.workspace is None else cx.workspace.id
    async with cx.ctx.db.read() as session:
        page = await inventory.list_pools(
            session, cx.actor, limit=100, cursor=params.get("cursor") or None, workspace_id=workspace_id
        )
    return render(
        cx,
        "inventory/pools.html",
        active="pools",
        title="Pools",
        forms=forms,
        status=status,
        pools=page.items,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/pools")
async def list_pools(cx: Page) -> Response:
    return await _list(cx)


@router.post("/pools")
async def create_pool(post: Post) -> Response:
    cx = post.cx
    try:
        selector = parse_key_values(post.get("selector"), "selector")
        async with cx.ctx.db.write() as session:
            view = await inventory.create_pool(
                session, cx.actor, name=post.get("name"), description=post.get("description"), selector=selector
            )
    except AicenterError as exc:
        return await _list(cx, forms=[failed_form("pool-create", post.values, exc, POOL_FIELDS)], status=exc.status)
    return redirect(cx, f"/pools/{view.pool.id}", f"Pool {view.pool.name} was created.")


async def _detail(cx: Console, pool_id: int, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        view = await inventory.get_pool(session, cx.actor, pool_id)
        granted: list[Workspace] = []
        if cx.is_platform_admin:
            granted = await inventory.list_pool_workspaces(session, cx.actor, pool_id)
    return render(
        cx,
        "inventory/pool.html",
        active="pools",
        title=view.pool.name,
        forms=forms,
        status=status,
        view=view,
        pool=view.pool,
        granted=granted,
        selector_text=format_key_values(view.pool.selector),
    )


@router.get("/pools/{pool_id:int}")
async def pool_detail(pool_id: Id, cx: Page) -> Response:
    return await _detail(cx, pool_id)


@router.post("/pools/{pool_id:int}")
async def update_pool(pool_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        selector = parse_key_values(post.get("selector"), "selector")
        async with cx.ctx.db.write() as session:
            view = await inventory.update_pool(
                session,
                cx.actor,
                pool_id,
                name=post.get("name"),
                description=post.get("description"),
                selector=selector,
            )
    except AicenterError as exc:
        return await _detail(
            cx, pool_id, forms=[failed_form("pool-edit", post.values, exc, POOL_FIELDS)], status=exc.status
        )
    return redirect(cx, f"/pools/{pool_id}", f"Pool {view.pool.name} was saved.")


@router.post("/pools/{pool_id:int}/delete")
async def delete_pool(pool_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            name = (await inventory.get_pool(session, cx.actor, pool_id)).pool.name
            await inventory.delete_pool(session, cx.actor, pool_id)
    except AicenterError as exc:
        return await _detail(cx, pool_id, forms=[message_form("pool-delete", exc)], status=exc.status)
    return redirect(cx, "/pools", f"Pool {name} was deleted.")


@router.post("/pools/{pool_id:int}/workspaces")
async def grant(pool_id: Id, post: Post) -> Response:
    """Let a workspace, named in the form, use this pool."""
    cx = post.cx
    name = post.get("workspace")
    try:
        if not name:
            raise ValidationFailed("enter the name of a workspace", field="workspace")
        async with cx.ctx.db.write() as session:
            page = await tenancy.list_workspaces(session, cx.actor, name=name, limit=1)
            if not page.items:
                raise ValidationFailed(f'no workspace is named "{name}"', field="workspace")
            await inventory.grant_pool(session, cx.actor, pool_id, page.items[0].id)
    except AicenterError as exc:
        state = failed_form("pool-grant", post.values, exc, ("workspace",), aliases={"workspace_id": "workspace"})
        return await _detail(cx, pool_id, forms=[state], status=exc.status)
    return redirect(cx, f"/pools/{pool_id}#workspaces", f"Workspace {name} may now use this pool.")


@router.post("/pools/{pool_id:int}/workspaces/{workspace_id:int}/revoke")
async def revoke(pool_id: Id, workspace_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            await inventory.revoke_pool(session, cx.actor, pool_id, workspace_id)
    except AicenterError as exc:
        return await _detail(cx, pool_id, forms=[message_form("pool-grant", exc)], status=exc.status)
    return redirect(cx, f"/pools/{pool_id}#workspaces", "The workspace may no longer use this pool.")
