"""Members of a workspace and their roles; a workspace always keeps at least one workspace admin."""

from __future__ import annotations

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import joinedload

from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import Membership, User, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_workspace_admin
from aicenter.services.context import Actor


async def list_members(
    session: AsyncSession, actor: Actor, workspace_id: int, *, limit: int = 50, cursor: str | None = None
) -> Page[Membership]:
    """Members of a workspace the actor can see, by user id; each row carries its ``user``."""
    await get_visible_workspace(session, actor, workspace_id)
    stmt = select(Membership).where(Membership.workspace_id == workspace_id).options(joinedload(Membership.user))
    return await paginate(session, stmt, Membership.user_id, limit=limit, cursor=cursor)


async def _lock_workspace(session: AsyncSession, actor: Actor, workspace_id: int) -> Workspace:
    """Check the actor administers the workspace, then lock its row for the rest of the transaction.

    The lock serializes membership changes per workspace on PostgreSQL, so that two admins demoting each
    other at once cannot leave it without an admin (SQLite serializes all writers already).
    """
    await require_workspace_admin(session, actor, workspace_id)
    workspace = await session.get(Workspace, workspace_id, with_for_update=True, populate_existing=True)
    if workspace is None:  # deleted since the check
        raise NotFound(f"workspace {workspace_id} not found")
    return workspace


async def _membership(session: AsyncSession, workspace: Workspace, user_id: int) -> Membership:
    membership = await session.scalar(
        select(Membership)
        .where(Membership.workspace_id == workspace.id, Membership.user_id == user_id)
        .options(joinedload(Membership.user))
    )
    if membership is None:
        raise NotFound(f"user {user_id} is not a member of workspace {workspace.name}")
    return membership


async def _ensure_another_workspace_admin(session: AsyncSession, membership: Membership, doing: str) -> None:
    others = await session.scalar(
        select(func.count())
        .select_from(Membership)
        .where(
            Membership.workspace_id == membership.workspace_id,
            Membership.role == WorkspaceRole.WORKSPACE_ADMIN.value,
            Membership.user_id != membership.user_id,
        )
    )
    if not others:
        raise Conflict(
            f"cannot {doing} {membership.user.username}: they are the last admin of the workspace; "
            "make another member workspace_admin first",
            details={"user_id": membership.user_id},
        )


async def add_member(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    *,
    user_id: int | None = None,
    username: str | None = None,
    role: WorkspaceRole = WorkspaceRole.MEMBER,
) -> Membership:
    """Add a user, named by id or by user name (exactly one), to a workspace (workspace admins).

    Raises:
        ValidationFailed: neither or both of ``user_id`` and ``username``, or no such user.
        Conflict: the user is already a member (``details.field == "user_id"``).
    """
    if (user_id is None) == (username is None):
        raise ValidationFailed("give exactly one of user_id and username", field="user_id")
    workspace = await _lock_workspace(session, actor, workspace_id)
    if user_id is not None:
        user = await session.get(User, user_id)
        if user is None:
            raise ValidationFailed(f"no user has id {user_id}", field="user_id")
    else:
        user = await session.scalar(select(User).where(User.username == username))
        if user is None:
            raise ValidationFailed(f'no user is named "{username}"', field="username")
    existing = await session.scalar(
        select(Membership.role).where(Membership.workspace_id == workspace.id, Membership.user_id == user.id)
    )
    if existing is not None:
        raise Conflict(
            f"{user.username} is already a member of {workspace.name} (as {existing})",
            details={"field": "user_id" if user_id is not None else "username", "role": existing},
        )
    membership = Membership(workspace_id=workspace.id, user_id=user.id, role=WorkspaceRole(role).value)
    membership.user = user
    session.add(membership)
    if user.default_workspace_id is None:  # e.g. after their default workspace was deleted
        user.default_workspace_id = workspace.id
    await session.flush()
    audit.record(
        session,
        actor,
        "workspace.member.add",
        "user",
        user.id,
        workspace_id=workspace.id,
        details={"username": user.username, "role": membership.role},
    )
    return membership


async def update_member(
    session: AsyncSession, actor: Actor, workspace_id: int, user_id: int, *, role: WorkspaceRole
) -> Membership:
    """Change a member's role (workspace admins).

    Raises:
        Conflict: the member is the workspace's last admin and would be demoted.
    """
    workspace = await _lock_workspace(session, actor, workspace_id)
    membership = await _membership(session, workspace, user_id)
    role = WorkspaceRole(role)
    if membership.role == role.value:
        return membership
    if membership.role == WorkspaceRole.WORKSPACE_ADMIN.value:
        await _ensure_another_workspace_admin(session, membership, "demote")
    audit.record(
        session,
        actor,
        "workspace.member.update",
        "user",
        user_id,
        workspace_id=workspace.id,
        details={"username": membership.user.username, "role": {"from": membership.role, "to": role.value}},
    )
    membership.role = role.value
    await session.flush()
    return membership


async def remove_member(session: AsyncSession, actor: Actor, workspace_id: int, user_id: int) -> None:
    """Remove a member (workspace admins); if it was their default workspace, they are left without one.

    Raises:
        Conflict: the member is the workspace's last admin.
    """
    workspace = await _lock_workspace(session, actor, workspace_id)
    membership = await _membership(session, workspace, user_id)
    if membership.role == WorkspaceRole.WORKSPACE_ADMIN.value:
        await _ensure_another_workspace_admin(session, membership, "remove")
    if membership.user.default_workspace_id == workspace.id:
        membership.user.default_workspace_id = None
    audit.record(
        session,
        actor,
        "workspace.member.remove",
        "user",
        user_id,
        workspace_id=workspace.id,
        details={"username": membership.user.username, "role": membership.role},
    )
    await session.delete(membership)
    await session.flush()
