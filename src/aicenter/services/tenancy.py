"""Users, workspaces, members and quotas."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict
from aicenter.core.names import check_name, check_text, check_username
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import Membership, Pool, PoolGrant, User, Workspace
from aicenter.services import audit
from aicenter.services.access import require_platform_admin
from aicenter.services.auth import hash_password
from aicenter.services.context import Actor


async def create_user(
    session: AsyncSession,
    actor: Actor,
    *,
    username: str,
    password: str | None,
    display_name: str = "",
    email: str | None = None,
    is_platform_admin: bool = False,
    with_default_workspace: bool = True,
) -> User:
    """Create a user and, unless told otherwise, a personal default workspace named after them."""
    require_platform_admin(actor, "user creation")
    check_username(username)
    check_text(display_name, "display_name", 128)
    if await session.scalar(select(User.id).where(User.username == username)) is not None:
        raise Conflict(f'a user named "{username}" already exists', details={"field": "username"})
    user = User(
        username=username,
        display_name=display_name or username,
        email=email,
        password_hash=hash_password(password) if password else None,
        is_platform_admin=is_platform_admin,
    )
    session.add(user)
    await session.flush()
    audit.record(session, actor, "user.create", "user", user.id, details={"username": username})
    if with_default_workspace:
        name = await _free_workspace_name(session, username.lower().replace("_", "-"))
        workspace = await create_workspace(session, actor, name=name, admin=user)
        user.default_workspace_id = workspace.id
    return user


async def _free_workspace_name(session: AsyncSession, base: str) -> str:
    base = base.strip(".-_")[:56] or "user"
    name, n = base, 1
    while await session.scalar(select(Workspace.id).where(Workspace.name == name)) is not None:
        n += 1
        name = f"{base}-{n}"
    return name


async def create_workspace(
    session: AsyncSession, actor: Actor, *, name: str, description: str = "", admin: User | None = None
) -> Workspace:
    """Create a workspace with ``admin`` (default: the actor) as its workspace admin, allowed in the default pool."""
    require_platform_admin(actor, "workspace creation")
    check_name(name)
    check_text(description, "description", 1024)
    if await session.scalar(select(Workspace.id).where(Workspace.name == name)) is not None:
        raise Conflict(f'a workspace named "{name}" already exists', details={"field": "name"})
    workspace = Workspace(name=name, description=description, created_by_id=actor.user_id or None)
    session.add(workspace)
    await session.flush()
    admin_id = admin.id if admin is not None else actor.user_id
    if admin_id:
        session.add(Membership(workspace_id=workspace.id, user_id=admin_id, role=WorkspaceRole.WORKSPACE_ADMIN.value))
    default_pool_id = await session.scalar(select(Pool.id).where(Pool.is_default.is_(True)))
    if default_pool_id is not None:
        session.add(PoolGrant(pool_id=default_pool_id, workspace_id=workspace.id))
    audit.record(
        session, actor, "workspace.create", "workspace", workspace.id, workspace_id=workspace.id, details={"name": name}
    )
    await session.flush()
    return workspace
