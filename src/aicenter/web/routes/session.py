"""Signing in and out of the console, and switching the current workspace."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from aicenter.api.deps import authenticate, client_address
from aicenter.context import AppContext
from aicenter.core.errors import AicenterError, NotFound, Unauthenticated
from aicenter.core.roles import TokenKind
from aicenter.services import auth, tenancy
from aicenter.web.console import Post, redirect
from aicenter.web.security import (
    FLASH_COOKIE,
    LOGIN_CSRF_COOKIE,
    WORKSPACE_COOKIE,
    add_page_headers,
    check_login_csrf,
    clear_flash,
    clear_session_cookie,
    login_csrf_pair,
    read_flash,
    safe_next,
    set_flash,
    set_login_csrf_cookie,
    set_session_cookie,
)
from aicenter.web.templating import render_template

router = APIRouter()

SESSION_TOKEN_NAME = "console"  # noqa: S105 - the name the session's token is listed under, not a secret
_WORKSPACE_COOKIE_MAX_AGE = 365 * 24 * 3600


def _ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def _login_form(
    request: Request, *, next_path: str, username: str = "", error: str | None = None, status: int = 200
) -> HTMLResponse:
    ctx = _ctx(request)
    nonce, token = login_csrf_pair(request, ctx.secret_key)
    flash = read_flash(request, ctx.secret_key)
    html = render_template(
        "login.html",
        {"next": next_path, "username": username, "error": error, "csrf": token, "flash": flash},
    )
    response = HTMLResponse(html, status_code=status, headers={"Cache-Control": "no-store"})
    set_login_csrf_cookie(response, ctx.settings, nonce)
    if FLASH_COOKIE in request.cookies:
        clear_flash(response, ctx.settings)
    return add_page_headers(response)


@router.get("/login")
async def login_page(request: Request, next_path: Annotated[str | None, Query(alias="next")] = None) -> Response:
    """The sign-in form; someone already signed in goes straight on."""
    target = safe_next(next_path)
    try:
        actor = await authenticate(request, _ctx(request))
    except Unauthenticated:
        actor = None
    if actor is not None:
        return RedirectResponse(target, status_code=303)
    return _login_form(request, next_path=target)


@router.post("/login")
async def login_submit(request: Request) -> Response:
    """Check the password and start a console session (a SESSION token in an HttpOnly cookie)."""
    ctx = _ctx(request)
    data = await request.form()
    username = str(data.get("username") or "").strip()
    password = str(data.get("password") or "")
    next_path = safe_next(str(data.get("next") or ""))
    if not check_login_csrf(request, ctx.secret_key, str(data.get("csrf_token") or "")):
        return _login_form(
            request,
            next_path=next_path,
            username=username,
            error="The sign-in form expired. Please try again.",
            status=403,
        )
    if not username or not password:
        return _login_form(
            request, next_path=next_path, username=username, error="Enter your user name and password.", status=422
        )
    try:
        async with ctx.db.write() as session:  # committed even when the password is wrong: the failure counts
            result = await auth.login(
                session,
                username=username[:64],
                password=password[:256],
                address=client_address(request),
                max_failures=ctx.settings.login_max_failures,
                window_s=ctx.settings.login_window_s,
                kind=TokenKind.SESSION,
                ttl_s=ctx.settings.session_ttl_s,
                token_name=SESSION_TOKEN_NAME,
            )
    except AicenterError as exc:  # rate limited, frozen
        result = exc
    if isinstance(result, AicenterError):
        return _login_form(request, next_path=next_path, username=username, error=result.message, status=result.status)
    _, issued = result
    response = RedirectResponse(next_path, status_code=303)
    set_session_cookie(response, ctx.settings, issued.secret)
    response.delete_cookie(LOGIN_CSRF_COOKIE, path="/")
    # A previous user's workspace choice on this browser must not carry over.
    response.delete_cookie(WORKSPACE_COOKIE, path="/")
    return response


@router.post("/logout")
async def logout(post: Post) -> Response:
    """Revoke this console session and clear its cookie."""
    cx = post.cx
    async with cx.ctx.db.write() as session:
        await auth.logout(session, cx.actor)
    cx.ctx.tokens.forget(cx.actor.token_id)
    response = RedirectResponse("/login", status_code=303)
    clear_session_cookie(response, cx.ctx.settings)
    response.delete_cookie(WORKSPACE_COOKIE, path="/")
    set_flash(response, cx.ctx.settings, cx.ctx.secret_key, "info", "You are signed out.")
    return response


@router.post("/workspace")
async def switch_workspace(post: Post) -> Response:
    """Make another workspace current: one the user is a member of (platform admins: any)."""
    cx = post.cx
    back = safe_next(post.get("next"))
    raw = post.get("workspace_id")
    try:
        if not raw.isdigit():
            raise NotFound("choose a workspace")
        async with cx.ctx.db.read() as session:
            workspace = await tenancy.get_workspace(session, cx.actor, int(raw))
    except NotFound:
        return redirect(cx, back, "That workspace does not exist or you are not a member of it.", "error")
    response = redirect(cx, back, f"Now working in {workspace.name}.", "info")
    response.set_cookie(
        WORKSPACE_COOKIE,
        str(workspace.id),
        max_age=_WORKSPACE_COOKIE_MAX_AGE,
        httponly=True,
        samesite="lax",
        secure=cx.ctx.settings.secure_cookies,
        path="/",
    )
    return response
