"""Login/logout, the signed-in user, and the user's own API tokens."""

from __future__ import annotations

from fastapi import APIRouter, Request, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, ReadSession, WriteSession, client_address
from aicenter.api.params import Id
from aicenter.api.schemas.auth import LoginRequest, LoginResponse, TokenCreate, TokenCreated, TokenOut, UserOut
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.core.errors import AicenterError
from aicenter.core.roles import TokenKind
from aicenter.services import auth, tenancy

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


@router.post("/auth/login", tags=["auth"], openapi_extra=access(Access.PUBLIC))
async def login(body: LoginRequest, request: Request, ctx: Ctx) -> LoginResponse:
    """Exchange a user name and password for a bearer token (what `aicenter login` does)."""
    async with ctx.db.write() as session:  # committed even when the password is wrong: the failure counts
        result = await auth.login(
            session,
            username=body.username,
            password=body.password,
            address=client_address(request),
            max_failures=ctx.settings.login_max_failures,
            window_s=ctx.settings.login_window_s,
            kind=TokenKind.LOGIN,
            ttl_s=ctx.settings.login_token_ttl_s,
            token_name=body.token_name,
        )
    if isinstance(result, AicenterError):
        raise result
    user, issued = result
    return LoginResponse(token=issued.secret, expires_at=issued.token.expires_at, user=UserOut.model_validate(user))


@router.post("/auth/logout", status_code=status.HTTP_204_NO_CONTENT, tags=["auth"], openapi_extra=access(Access.USER))
async def logout(actor: CurrentActor, ctx: Ctx, session: WriteSession) -> None:
    """Revoke the token this request was made with."""
    await auth.logout(session, actor)
    ctx.tokens.forget(actor.token_id)


@router.get("/users/me", tags=["users"], openapi_extra=access(Access.USER))
async def me(actor: CurrentActor, session: ReadSession) -> UserOut:
    return UserOut.model_validate(await tenancy.get_me(session, actor))


@router.get("/tokens", tags=["tokens"], openapi_extra=access(Access.USER))
async def list_tokens(actor: CurrentActor, session: ReadSession, include_revoked: bool = False) -> list[TokenOut]:
    """The caller's own tokens, without their secrets."""
    return [TokenOut.model_validate(t) for t in await auth.list_tokens(session, actor, include_revoked=include_revoked)]


@router.post("/tokens", status_code=status.HTTP_201_CREATED, tags=["tokens"], openapi_extra=access(Access.USER))
async def create_token(body: TokenCreate, actor: CurrentActor, session: WriteSession) -> TokenCreated:
    """Create a named API token. The response holds its secret, which is never shown again."""
    issued = await auth.create_api_token(session, actor, name=body.name, expires_at=body.expires_at)
    return TokenCreated.model_validate({**TokenOut.model_validate(issued.token).model_dump(), "token": issued.secret})


@router.delete(
    "/tokens/{token_id}", status_code=status.HTTP_204_NO_CONTENT, tags=["tokens"], openapi_extra=access(Access.USER)
)
async def revoke_token(token_id: Id, actor: CurrentActor, ctx: Ctx, session: WriteSession) -> None:
    await auth.revoke_token(session, actor, token_id)
    ctx.tokens.forget(token_id)
