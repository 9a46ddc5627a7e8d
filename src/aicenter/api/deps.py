"""Request dependencies: the shared context, database sessions and the acting user."""

from __future__ import annotations

import hmac
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from typing import Annotated

from fastapi import Depends, Query, Request
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.api.access import JOB_TOKEN_EXTENSION
from aicenter.context import AppContext
from aicenter.core.errors import Forbidden, Unauthenticated
from aicenter.core.roles import TokenKind
from aicenter.services.auth import csrf_token
from aicenter.services.context import Actor

SESSION_COOKIE = "aicenter_session"
CSRF_HEADER = "x-csrf-token"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


async def get_ctx(request: Request) -> AppContext:
    ctx: AppContext = request.app.state.ctx
    return ctx


Ctx = Annotated[AppContext, Depends(get_ctx)]


async def _read_session(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    async with ctx.db.read() as session:
        yield session


async def _write_session(ctx: Ctx) -> AsyncIterator[AsyncSession]:
    async with ctx.db.write() as session:
        yield session


ReadSession = Annotated[AsyncSession, Depends(_read_session, scope="function")]
# scope="function": the transaction commits when the route function returns, before the response is sent,
# so a client never sees success for a change that then fails to commit.
WriteSession = Annotated[AsyncSession, Depends(_write_session, scope="function")]


def client_address(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def bearer_token(request: Request) -> str | None:
    header = request.headers.get("authorization")
    if not header:
        return None
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        raise Unauthenticated("the Authorization header must be 'Bearer <token>'")
    return value.strip()


async def authenticate(request: Request, ctx: AppContext) -> Actor | None:
    """The actor behind a bearer token or a console session cookie; None if the request carries neither.

    Cookie-authenticated unsafe requests must carry the session's CSRF token (header or form field checked
    by the console); bearer requests cannot be forged cross-site, so they need none. A job token is refused
    here, in this one place, on every operation but the reads of its own job (``_check_job_token``).
    """
    raw = bearer_token(request)
    from_cookie = False
    if raw is None:
        raw = request.cookies.get(SESSION_COOKIE)
        from_cookie = raw is not None
    if raw is None:
        return None
    actor, kind = await ctx.tokens.verify(ctx.db, raw)
    if kind == TokenKind.JOB:
        _check_job_token(request, actor)
    if from_cookie:
        if kind != TokenKind.SESSION:
            raise Unauthenticated("the session cookie is not a console session")
        if request.method not in _SAFE_METHODS and request.url.path.startswith("/api/"):
            sent = request.headers.get(CSRF_HEADER, "")
            expected = csrf_token(ctx.secret_key, actor.token_id or 0)
            if not hmac.compare_digest(sent, expected):
                raise Forbidden("missing or wrong CSRF token (send the X-CSRF-Token header)")
    return replace(actor, client_address=client_address(request), request_id=getattr(request.state, "request_id", None))


def _check_job_token(request: Request, actor: Actor) -> None:
    """Let a job token through only to operations declared ``access(..., job_token=True)`` on its own job.

    The route is known here: FastAPI resolves dependencies after routing. Console pages have no such
    declaration, so a job token cannot use them either.
    """
    route = request.scope.get("route")
    extra = getattr(route, "openapi_extra", None) or {}
    if extra.get(JOB_TOKEN_EXTENSION) and request.path_params.get("job_id") == str(actor.job_id):
        return
    raise Forbidden(
        f"a job token may only read its own job (job {actor.job_id}): sign in as the user for anything else",
        details={"job_id": actor.job_id},
    )


async def current_actor(request: Request, ctx: Ctx) -> Actor:
    actor = await authenticate(request, ctx)
    if actor is None:
        raise Unauthenticated("sign in: send 'Authorization: Bearer <token>' (get one with `aicenter login`)")
    return actor


CurrentActor = Annotated[Actor, Depends(current_actor)]


@dataclass(frozen=True, slots=True)
class PageParams:
    """``?limit=&cursor=`` on every list operation."""

    limit: int
    cursor: str | None


async def _page_params(
    limit: Annotated[int, Query(ge=1, le=500, description="Items per page.")] = 50,
    cursor: Annotated[str | None, Query(description="The next_cursor of the previous page.")] = None,
) -> PageParams:
    return PageParams(limit, cursor)


# Dependencies are `async def` throughout: FastAPI runs a plain `def` dependency in a worker thread,
# one thread hop per request.
Paging = Annotated[PageParams, Depends(_page_params)]
