"""Users (platform admins): the list with filters, creation, editing, freeze and thaw."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.core.roles import UserState
from aicenter.services import tenancy
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form

router = APIRouter()

CREATE_FIELDS = ("username", "password", "display_name", "email", "is_platform_admin")
EDIT_FIELDS = ("display_name", "email", "is_platform_admin", "password")
STATES = [(s.value, s.value) for s in UserState]


async def _list(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    q = params.get("q", "").strip()
    raw_state = params.get("state", "")
    state = UserState(raw_state) if raw_state in {s.value for s in UserState} else None
    async with cx.ctx.db.read() as session:
        page = await tenancy.list_users(
            session, cx.actor, limit=50, cursor=params.get("cursor") or None, q=q or None, state=state
        )
    return render(
        cx,
        "users/list.html",
        active="users",
        title="Users",
        forms=forms,
        status=status,
        users=page.items,
        q=q,
        state=state.value if state else "",
        states=STATES,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/users")
async def list_users(cx: Page) -> Response:
    return await _list(cx)


@router.post("/users")
async def create_user(post: Post) -> Response:
    cx = post.cx
    try:
        password = post.secret("password")
        if not password:
            raise ValidationFailed("enter an initial password", field="password")
        async with cx.ctx.db.write() as session:
            user = await tenancy.create_user(
                session,
                cx.actor,
                username=post.get("username"),
                password=password,
                display_name=post.get("display_name"),
                email=post.get("email") or None,
                is_platform_admin=post.get("is_platform_admin") == "on",
                single_user=cx.ctx.single_user,
            )
    except AicenterError as exc:
        return await _list(cx, forms=[failed_form("user-create", post.values, exc, CREATE_FIELDS)], status=exc.status)
    return redirect(cx, f"/users/{user.id}", f"User {user.username} was created with a workspace of their own.")


async def _detail(cx: Console, user_id: int, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        user = await tenancy.get_user(session, cx.actor, user_id)
    return render(
        cx,
        "users/detail.html",
        active="users",
        title=user.username,
        forms=forms,
        status=status,
        user=user,
    )


@router.get("/users/{user_id:int}")
async def user_detail(user_id: Id, cx: Page) -> Response:
    return await _detail(cx, user_id)


@router.post("/users/{user_id:int}")
async def update_user(user_id: Id, post: Post) -> Response:
    cx = post.cx
    password = post.secret("password")
    try:
        async with cx.ctx.db.write() as session:
            user = await tenancy.update_user(
                session,
                cx.actor,
                user_id,
                display_name=post.get("display_name"),
                email=post.get("email"),
                is_platform_admin=post.get("is_platform_admin") == "on",
                password=password or None,
            )
    except AicenterError as exc:
        return await _detail(
            cx, user_id, forms=[failed_form("user-edit", post.values, exc, EDIT_FIELDS)], status=exc.status
        )
    if password:
        cx.ctx.tokens.forget()  # their sessions were revoked; make it immediate on this replica
    return redirect(cx, f"/users/{user_id}", f"User {user.username} was saved.")


@router.post("/users/{user_id:int}/freeze")
async def freeze_user(user_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            user = await tenancy.freeze_user(session, cx.actor, user_id)
    except AicenterError as exc:
        return await _detail(cx, user_id, forms=[message_form("user-state", exc)], status=exc.status)
    cx.ctx.tokens.forget()  # the freeze acts at once on this replica; others follow within their cache time
    return redirect(cx, _back(post, user_id), f"User {user.username} is frozen: they cannot sign in or use tokens.")


@router.post("/users/{user_id:int}/thaw")
async def thaw_user(user_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        user = await tenancy.thaw_user(session, cx.actor, user_id)
    return redirect(cx, _back(post, user_id), f"User {user.username} is active again.")


def _back(post: Post, user_id: int) -> str:
    """Back to the list when the button was pressed there, else to the user's page."""
    return "/users" if post.get("next") == "/users" else f"/users/{user_id}"
