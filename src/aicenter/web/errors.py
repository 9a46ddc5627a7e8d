"""Errors on console pages become HTML (a friendly 404, a 403, a redirect to /login); the API keeps its JSON.

The app factory installs the API's handlers first; :func:`install_console_error_handlers` wraps each one, so
that requests under the API's prefixes still get exactly the API's answer.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import HTMLResponse, RedirectResponse, Response

from aicenter.core.errors import AicenterError, Unauthenticated
from aicenter.web.console import CsrfRejected, LoginRequired
from aicenter.web.security import add_page_headers, clear_session_cookie
from aicenter.web.templating import render_template

log = logging.getLogger(__name__)

# Paths that belong to machines (REST API, inference, metrics), never to the console.
NON_CONSOLE_PREFIXES = ("/api", "/serve", "/metrics", "/static")
# A notebook's JupyterLab under the platform's proxy: its clients read JSON errors, not the console's pages
# (the console's own notebook pages are /notebooks and /notebooks/<id>, without anything after).
_NOTEBOOK_PROXY = re.compile(r"/notebooks/[0-9]+/")

Handler = Callable[[Request, Exception], Awaitable[Response]]

_TITLES = {
    400: "Bad request",
    401: "Sign in required",
    403: "Not allowed",
    404: "Page not found",
    405: "Not allowed",
    409: "Conflict",
    422: "Invalid input",
    429: "Too many attempts",
    500: "Something went wrong",
    503: "Unavailable",
}


# ``/notebooks/<id>/...``: a notebook's JupyterLab through the proxy (api/routers/notebook_proxy.py). Its fetches
# must get the API's answers, and a refusal must not clear the console's session cookie (which a console page's
# "sign in again" does), or one bad request from JupyterLab signs its user out of every tab.
_NOTEBOOK_PROXY = re.compile(r"^/notebooks/\d+/")


def is_console_path(path: str) -> bool:
    if _NOTEBOOK_PROXY.match(path):
        return False
    return not any(path == p or path.startswith(p + "/") for p in NON_CONSOLE_PREFIXES)


def error_page(request: Request, status: int, message: str, *, title: str | None = None) -> HTMLResponse:
    """A standalone error page (it needs no session, so it works for anyone and for any failure)."""
    html = render_template(
        "error.html",
        {
            "status": status,
            "title": title or _TITLES.get(status, "Error"),
            "message": message,
            "request_id": getattr(request.state, "request_id", None),
        },
    )
    response = HTMLResponse(html, status_code=status)
    add_page_headers(response)
    return response


def login_redirect(request: Request, next_path: str, *, stale_cookie: bool) -> Response:
    target = "/login" if next_path in ("", "/") else f"/login?{urlencode({'next': next_path})}"
    response = RedirectResponse(target, status_code=303)
    if stale_cookie:
        clear_session_cookie(response, request.app.state.ctx.settings)
    return response


def install_console_error_handlers(app: FastAPI) -> None:
    previous: dict[type[Exception], Handler] = {
        cls: app.exception_handlers[cls]  # type: ignore[misc]
        for cls in (StarletteHTTPException, AicenterError, RequestValidationError, Exception)
        if cls in app.exception_handlers
    }

    async def _delegate(cls: type[Exception], request: Request, exc: Exception) -> Response:
        handler = previous.get(cls)
        if handler is None:
            raise exc
        return await handler(request, exc)

    async def on_login_required(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, LoginRequired)
        return login_redirect(request, exc.next_path, stale_cookie=exc.stale_cookie)

    async def on_csrf(request: Request, exc: Exception) -> Response:
        return error_page(
            request,
            403,
            "The form was missing its security token or it had expired. Go back, reload the page and try again.",
            title="Form expired",
        )

    async def on_http(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, StarletteHTTPException)
        if not is_console_path(request.url.path):
            return await _delegate(StarletteHTTPException, request, exc)
        if exc.status_code == 404:
            message = "There is no page at this address. It may have moved, or the link may be wrong."
        else:
            message = exc.detail if isinstance(exc.detail, str) else _TITLES.get(exc.status_code, "Error")
        return error_page(request, exc.status_code, message)

    async def on_domain(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, AicenterError)
        if not is_console_path(request.url.path):
            return await _delegate(AicenterError, request, exc)
        if isinstance(exc, Unauthenticated):
            return login_redirect(request, request.url.path, stale_cookie=True)
        return error_page(request, exc.status, exc.message)

    async def on_validation(request: Request, exc: Exception) -> Response:
        if not is_console_path(request.url.path):
            return await _delegate(RequestValidationError, request, exc)
        return error_page(request, 400, "The address or form had a value this page cannot read.")

    async def on_unexpected(request: Request, exc: Exception) -> Response:
        if not is_console_path(request.url.path):
            return await _delegate(Exception, request, exc)
        log.exception("unhandled error in console %s %s", request.method, request.url.path)
        return error_page(
            request, 500, "The server failed to show this page. The request id below identifies it in the log."
        )

    app.add_exception_handler(LoginRequired, on_login_required)
    app.add_exception_handler(CsrfRejected, on_csrf)
    app.add_exception_handler(StarletteHTTPException, on_http)
    app.add_exception_handler(AicenterError, on_domain)
    app.add_exception_handler(RequestValidationError, on_validation)
    app.add_exception_handler(Exception, on_unexpected)
