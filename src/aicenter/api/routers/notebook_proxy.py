"""``/notebooks/{id}/...``: a notebook's JupyterLab (HTTP and WebSocket), for its owner only.

Who gets in is decided here, per request, from the platform's credentials: a bearer token or the console's
session cookie (never a job token: code in a job must not open anyone's notebook, its own owner's included).
Only the notebook's owner passes; members of its workspace get 403, everyone else 404, platform admins
included: they see a notebook's metadata in the API, never its inside. A cookie-authenticated request that
changes something, and every cookie-authenticated WebSocket, must come from the platform's own origin (the
browser's ``Origin``), so another site cannot drive a user's kernel (cross-site WebSocket hijacking).

Where the notebook runs and how it is reached is the gateway's (``gateway.notebooks``). Not in the OpenAPI
document: it is JupyterLab's API, not ours.
"""

from __future__ import annotations

from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Request, WebSocket
from fastapi.responses import JSONResponse, RedirectResponse, Response
from starlette.requests import HTTPConnection

from aicenter.api.deps import SESSION_COOKIE, bearer_token
from aicenter.context import AppContext
from aicenter.core.errors import AicenterError, Forbidden, NotFound, Unauthenticated
from aicenter.core.roles import TokenKind
from aicenter.gateway.notebooks import NotebookGateway
from aicenter.services import notebooks
from aicenter.services.context import Actor

router = APIRouter(include_in_schema=False)

_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def _same_origin(conn: HTTPConnection) -> bool:
    """Whether the browser says the request comes from this platform's own pages (no Origin: not a browser)."""
    origin = conn.headers.get("origin")
    if origin is None:
        return True
    return urlsplit(origin).netloc.lower() == (conn.headers.get("host") or "").lower()


def _platform_bearer(conn: HTTPConnection) -> str | None:
    """The platform token of an ``Authorization: Bearer`` header; None for no header, and for JupyterLab's own
    scheme (``Authorization: token <its token>``, which its frontend sends on every API call): that request is
    authenticated by the session cookie, and the header is replaced before it reaches JupyterLab anyway."""
    header = conn.headers.get("authorization") or ""
    if header.partition(" ")[0].lower() == "token":
        return None
    return bearer_token(conn)  # type: ignore[arg-type]


async def _actor(conn: HTTPConnection, ctx: AppContext, *, changes: bool) -> Actor:
    raw = _platform_bearer(conn)
    from_cookie = raw is None
    if raw is None:
        raw = conn.cookies.get(SESSION_COOKIE)
    if raw is None:
        raise Unauthenticated("sign in to open notebooks (the console, or 'Authorization: Bearer <token>')")
    actor, kind = await ctx.tokens.verify(ctx.db, raw)
    if kind == TokenKind.JOB:
        raise Forbidden("a job token cannot open notebooks")
    if from_cookie:
        if kind != TokenKind.SESSION:
            raise Unauthenticated("the session cookie is not a console session")
        if changes and not _same_origin(conn):
            raise Forbidden("a notebook is driven only from the platform's own pages (cross-origin request refused)")
    return actor


async def _endpoint(conn: HTTPConnection, ctx: AppContext, job_id: int, *, changes: bool) -> notebooks.Endpoint:
    """The owner's running notebook; the refusal that explains anything else."""
    actor = await _actor(conn, ctx, changes=changes)
    gateway: NotebookGateway = conn.app.state.notebook_gateway
    endpoint = await gateway.endpoint(job_id)
    if endpoint is not None and endpoint.owner_id == actor.user_id:
        return endpoint
    # The refusal path may read the database: tell the owner why, a member that it is not theirs, others nothing.
    async with ctx.db.read() as session:
        job = await notebooks.load_notebook(session, actor, job_id)  # NotFound for non-members
    notebooks.require_owner(actor, job, "open")
    raise NotFound(
        f"notebook {job_id} is {job.status}, not running: start it (aicenter notebook start), then open it again",
        details={"status": job.status},
    )


@router.api_route("/notebooks/{job_id}/{path:path}", methods=_METHODS)
async def proxy_http(job_id: int, path: str, request: Request) -> Response:
    ctx: AppContext = request.app.state.ctx
    try:
        endpoint = await _endpoint(request, ctx, job_id, changes=request.method not in _SAFE)
    except Unauthenticated as exc:
        if request.method == "GET" and "text/html" in request.headers.get("accept", ""):
            return RedirectResponse(f"/login?next={quote(request.url.path)}", status_code=303)
        # JupyterLab's API clients get JSON, not the console's sign-in page the error handler gives other paths.
        body = {"error": {"code": exc.code, "message": exc.message, "details": exc.details}}
        return JSONResponse(body, status_code=401, headers={"www-authenticate": "Bearer"})
    gateway: NotebookGateway = request.app.state.notebook_gateway
    return await gateway.forward_http(request, endpoint, path)


@router.websocket("/notebooks/{job_id}/{path:path}")
async def proxy_websocket(websocket: WebSocket, job_id: int, path: str) -> None:
    ctx: AppContext = websocket.app.state.ctx
    try:
        endpoint = await _endpoint(websocket, ctx, job_id, changes=True)
    except AicenterError as exc:
        await websocket.close(code=1008, reason=exc.message[:120])
        return
    gateway: NotebookGateway = websocket.app.state.notebook_gateway
    await gateway.forward_websocket(websocket, endpoint, path)
