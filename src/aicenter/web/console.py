"""The per-request context of a console page: who is signed in, their workspaces, the current one, CSRF.

Route handlers take ``cx: Page`` (GET) or ``post: Post`` (POST, CSRF already verified) and answer with
:func:`render` or :func:`redirect`. Both dependencies send a visitor without a session to /login.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass, field
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import Depends, Request
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, RedirectResponse, Response

from aicenter.api.deps import SESSION_COOKIE, authenticate
from aicenter.context import AppContext
from aicenter.core.errors import NotFound, Unauthenticated
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import User, Workspace
from aicenter.services import auth, tenancy
from aicenter.services.access import get_visible_workspace
from aicenter.services.context import Actor
from aicenter.services.tenancy import MyWorkspace
from aicenter.web.forms import Forms, FormState, form_values
from aicenter.web.nav import visible_sections
from aicenter.web.security import (
    CSRF_FIELD,
    FLASH_COOKIE,
    WORKSPACE_COOKIE,
    FlashLevel,
    add_page_headers,
    clear_flash,
    read_flash,
    safe_next,
    set_flash,
)
from aicenter.web.templating import render_template


class LoginRequired(Exception):
    """Raised by the console dependencies when there is no valid session; answered with a redirect."""

    def __init__(self, next_path: str, *, stale_cookie: bool) -> None:
        super().__init__(next_path)
        self.next_path = next_path
        self.stale_cookie = stale_cookie


class CsrfRejected(Exception):
    """A console POST without the session's CSRF token; answered 403 and nothing is changed."""


@dataclass
class Console:
    """Everything a console page needs about the request and the signed-in user."""

    request: Request
    ctx: AppContext
    actor: Actor
    user: User
    workspaces: list[MyWorkspace]
    workspace: Workspace | None
    role: WorkspaceRole | None
    csrf: str
    extra_workspace: Workspace | None = field(default=None)  # current one of an admin who is no member of it

    @property
    def is_platform_admin(self) -> bool:
        return self.actor.is_platform_admin

    @property
    def is_workspace_admin(self) -> bool:
        """Administers the current workspace (platform admins administer every workspace)."""
        return self.is_platform_admin or self.role == WorkspaceRole.WORKSPACE_ADMIN

    def role_in(self, workspace_id: int) -> WorkspaceRole | None:
        return next((m.role for m in self.workspaces if m.workspace.id == workspace_id), None)

    def can_admin_workspace(self, workspace_id: int) -> bool:
        return self.is_platform_admin or self.role_in(workspace_id) == WorkspaceRole.WORKSPACE_ADMIN


def _ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


def _here(request: Request) -> str:
    """Where to come back after signing in: this page for a GET; for a POST the page the form was on."""
    if request.method == "GET":
        query = f"?{request.url.query}" if request.url.query else ""
        return safe_next(request.url.path + query)
    return safe_next(request.url.path)


async def _actor(request: Request, ctx: AppContext) -> Actor:
    try:
        actor = await authenticate(request, ctx)
    except Unauthenticated:  # expired, revoked, frozen or malformed: sign in again
        raise LoginRequired(_here(request), stale_cookie=True) from None
    if actor is None:
        raise LoginRequired(_here(request), stale_cookie=False)
    return actor


async def _current_workspace(
    request: Request, ctx: AppContext, actor: Actor, user: User, mine: list[MyWorkspace]
) -> tuple[Workspace | None, WorkspaceRole | None, Workspace | None]:
    """The workspace chosen in the switcher if still allowed, else the user's default, else their first one."""
    by_id = {m.workspace.id: m for m in mine}
    raw = request.cookies.get(WORKSPACE_COOKIE, "")
    chosen = int(raw) if raw.isdigit() else None
    if chosen is not None:
        if chosen in by_id:
            return by_id[chosen].workspace, by_id[chosen].role, None
        if actor.is_platform_admin:
            try:
                async with ctx.db.read() as session:
                    workspace = await get_visible_workspace(session, actor, chosen)
                return workspace, None, workspace
            except NotFound:
                pass  # deleted since it was chosen: fall back below
    if user.default_workspace_id in by_id:
        m = by_id[user.default_workspace_id]
        return m.workspace, m.role, None
    if mine:
        return mine[0].workspace, mine[0].role, None
    return None, None, None


async def load_console(request: Request, ctx: AppContext, actor: Actor) -> Console:
    async with ctx.db.read() as session:
        # The signed-in user themselves; the verified token proves they existed a moment ago.
        user = await session.get(User, actor.user_id)
        mine = await tenancy.my_workspaces(session, actor)
    if user is None:
        raise LoginRequired(_here(request), stale_cookie=True)
    workspace, role, extra = await _current_workspace(request, ctx, actor, user, mine)
    return Console(
        request=request,
        ctx=ctx,
        actor=actor,
        user=user,
        workspaces=mine,
        workspace=workspace,
        role=role,
        csrf=auth.csrf_token(ctx.secret_key, actor.token_id or 0),
        extra_workspace=extra,
    )


async def console_page(request: Request) -> Console:
    """Dependency of GET pages: the signed-in user's console context, or a redirect to /login."""
    ctx = _ctx(request)
    return await load_console(request, ctx, await _actor(request, ctx))


@dataclass
class Posted:
    """A verified console form POST: the console context, the raw form, and its plain (non-secret) values."""

    cx: Console
    data: FormData
    values: dict[str, str]

    def get(self, key: str, default: str = "") -> str:
        """A field's value, stripped; secrets (passwords) too, which ``values`` leaves out."""
        value = self.data.get(key)
        return value.strip() if isinstance(value, str) else default

    def secret(self, key: str) -> str:
        """A password field, exactly as typed (spaces are part of a password)."""
        value = self.data.get(key)
        return value if isinstance(value, str) else ""


async def console_post(request: Request) -> Posted:
    """Dependency of POST handlers: the session, then the CSRF token (403 without it), then the form."""
    ctx = _ctx(request)
    actor = await _actor(request, ctx)
    data = await request.form()
    sent = data.get(CSRF_FIELD)
    expected = auth.csrf_token(ctx.secret_key, actor.token_id or 0)
    if not isinstance(sent, str) or not hmac.compare_digest(sent, expected):
        raise CsrfRejected
    return Posted(await load_console(request, ctx, actor), data, form_values(data))


Page = Annotated[Console, Depends(console_page)]
Post = Annotated[Posted, Depends(console_post)]


def render(
    cx: Console,
    template: str,
    *,
    active: str,
    title: str,
    status: int = 200,
    forms: list[FormState] | None = None,
    **context: Any,
) -> HTMLResponse:
    """Render a page inside the console layout; shows (and clears) a queued flash message.

    Args:
        active: the nav entry key to highlight.
        title: the page heading and window title.
        forms: states of forms that failed validation (shown with their errors) on this render.
    """
    flash = read_flash(cx.request, cx.ctx.secret_key)
    page_forms = Forms()
    for state in forms or []:
        page_forms[state.name] = state
    html = render_template(
        template,
        {
            "cx": cx,
            "request": cx.request,
            "nav": visible_sections(cx),
            "active": active,
            "title": title,
            "flash": flash,
            "forms": page_forms,
            "csrf": cx.csrf,
            **context,
        },
    )
    response = HTMLResponse(html, status_code=status)
    if FLASH_COOKIE in cx.request.cookies:
        clear_flash(response, cx.ctx.settings)
    return add_page_headers(response)


def redirect(cx: Console, url: str, message: str | None = None, level: FlashLevel = "success") -> Response:
    """303 See Other to ``url`` (post/redirect/get), queuing ``message`` for the page it lands on."""
    response = RedirectResponse(url, status_code=303)
    if message:
        set_flash(response, cx.ctx.settings, cx.ctx.secret_key, level, message)
    return response


def session_cookie_present(request: Request) -> bool:
    return SESSION_COOKIE in request.cookies


def page_url(request: Request, cursor: str | None) -> str | None:
    """This page's address with ``cursor`` set (the next page), keeping the filters; None without a cursor."""
    if not cursor:
        return None
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    params.append(("cursor", cursor))
    return f"{request.url.path}?{urlencode(params)}"


def first_page_url(request: Request) -> str | None:
    """This page without its cursor, when it has one (a way back to the first page)."""
    if "cursor" not in request.query_params:
        return None
    params = [(k, v) for k, v in request.query_params.multi_items() if k != "cursor"]
    return f"{request.url.path}?{urlencode(params)}" if params else request.url.path
