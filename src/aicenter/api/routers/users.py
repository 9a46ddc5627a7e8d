"""Users (platform admins) and the signed-in user's own profile, password and workspaces.

``GET /users/me`` lives in routers/auth.py. The ``/users/me/...`` routes are declared before
``/users/{user_id}`` so that ``me`` is never read as an id.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.tenancy import (
    MeUpdate,
    MyWorkspaceOut,
    PasswordChange,
    UserCreate,
    UserOut,
    UserUpdate,
    WorkspaceOut,
)
from aicenter.core.errors import AicenterError
from aicenter.core.roles import UserState
from aicenter.services import tenancy

router = APIRouter(prefix="/api/v1", tags=["users"], responses=ERROR_RESPONSES)


@router.patch("/users/me", openapi_extra=access(Access.USER))
async def update_me(body: MeUpdate, actor: CurrentActor, session: WriteSession) -> UserOut:
    """Change your display name, e-mail address or default workspace."""
    user = await tenancy.update_me(
        session,
        actor,
        display_name=body.display_name,
        email=body.email,
        default_workspace_id=body.default_workspace_id,
    )
    return UserOut.model_validate(user)


@router.post("/users/me/password", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def change_password(body: PasswordChange, actor: CurrentActor, ctx: Ctx) -> None:
    """Change your password. Your other sessions and CLI logins are signed out; this one stays."""
    async with ctx.db.write() as session:  # committed even when the password is wrong: the failure counts
        refused = await tenancy.change_password(
            session,
            actor,
            current_password=body.current_password,
            new_password=body.new_password,
            max_failures=ctx.settings.login_max_failures,
            window_s=ctx.settings.login_window_s,
        )
    if isinstance(refused, AicenterError):
        raise refused
    ctx.tokens.forget()


@router.get("/users/me/workspaces", openapi_extra=access(Access.USER))
async def my_workspaces(actor: CurrentActor, session: ReadSession) -> list[MyWorkspaceOut]:
    """The workspaces you are a member of, with your role in each."""
    return [
        MyWorkspaceOut(workspace=WorkspaceOut.model_validate(m.workspace), role=m.role)
        for m in await tenancy.my_workspaces(session, actor)
    ]


@router.get("/users", openapi_extra=access(Access.ADMIN))
async def list_users(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    username: Annotated[str | None, Query(max_length=64, description="Exact user name.")] = None,
    state: UserState | None = None,
    q: Annotated[str | None, Query(max_length=64, description="Prefix of the user or display name.")] = None,
) -> Page[UserOut]:
    page = await tenancy.list_users(
        session, actor, limit=paging.limit, cursor=paging.cursor, username=username, state=state, q=q
    )
    return Page(items=[UserOut.model_validate(u) for u in page.items], next_cursor=page.next_cursor)


@router.post("/users", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_user(body: UserCreate, actor: CurrentActor, session: WriteSession, ctx: Ctx) -> UserOut:
    """Create a user with a personal default workspace (409 ``single_user_mode`` on a server without a sandbox,
    once its first user exists)."""
    user = await tenancy.create_user(
        session,
        actor,
        username=body.username,
        password=body.password,
        display_name=body.display_name,
        email=body.email,
        is_platform_admin=body.is_platform_admin,
        single_user=ctx.single_user,
    )
    return UserOut.model_validate(user)


@router.get("/users/{user_id}", openapi_extra=access(Access.ADMIN))
async def get_user(user_id: Id, actor: CurrentActor, session: ReadSession) -> UserOut:
    return UserOut.model_validate(await tenancy.get_user(session, actor, user_id))


@router.patch("/users/{user_id}", openapi_extra=access(Access.ADMIN))
async def update_user(user_id: Id, body: UserUpdate, actor: CurrentActor, ctx: Ctx, session: WriteSession) -> UserOut:
    """Change a user. A new password signs out their sessions and CLI logins."""
    user = await tenancy.update_user(
        session,
        actor,
        user_id,
        display_name=body.display_name,
        email=body.email,
        is_platform_admin=body.is_platform_admin,
        password=body.password,
    )
    if body.password is not None or body.is_platform_admin is not None:
        ctx.tokens.forget()  # cached entries carry the old admin flag and the revoked sign-ins
    return UserOut.model_validate(user)


@router.post("/users/{user_id}/freeze", openapi_extra=access(Access.ADMIN))
async def freeze_user(user_id: Id, actor: CurrentActor, ctx: Ctx, session: WriteSession) -> UserOut:
    """Freeze a user: they cannot sign in or use tokens until thawed; their sessions are revoked."""
    user = await tenancy.freeze_user(session, actor, user_id)
    ctx.tokens.forget()
    return UserOut.model_validate(user)


@router.post("/users/{user_id}/thaw", openapi_extra=access(Access.ADMIN))
async def thaw_user(user_id: Id, actor: CurrentActor, session: WriteSession) -> UserOut:
    """Let a frozen user sign in and use their API tokens again."""
    return UserOut.model_validate(await tenancy.thaw_user(session, actor, user_id))
