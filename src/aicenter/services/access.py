"""Authorization checks shared by every service. What an actor may not see reads as missing (404)."""

from __future__ import annotations

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Forbidden, NotFound
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import Membership, Workspace
from aicenter.services.context import Actor


def require_platform_admin(actor: Actor, what: str = "this") -> None:
    if not actor.is_platform_admin:
        raise Forbidden(f"only platform admins can do {what}")


async def workspace_role(session: AsyncSession, actor: Actor, workspace_id: int) -> WorkspaceRole | None:
    role = await session.scalar(
        select(Membership.role).where(Membership.workspace_id == workspace_id, Membership.user_id == actor.user_id)
    )
    return WorkspaceRole(role) if role else None


async def get_visible_workspace(session: AsyncSession, actor: Actor, workspace_id: int) -> Workspace:
    """The workspace, if the actor is a member or a platform admin; otherwise NotFound (no existence leak)."""
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None or (
        not actor.is_platform_admin and await workspace_role(session, actor, workspace_id) is None
    ):
        raise NotFound(f"workspace {workspace_id} not found")
    return workspace


async def require_workspace_admin(session: AsyncSession, actor: Actor, workspace_id: int) -> Workspace:
    """The workspace, if the actor administers it (or is a platform admin). Members get Forbidden."""
    workspace = await get_visible_workspace(session, actor, workspace_id)
    if (
        not actor.is_platform_admin
        and await workspace_role(session, actor, workspace_id) != WorkspaceRole.WORKSPACE_ADMIN
    ):
        raise Forbidden(f"only admins of workspace {workspace.name} can do this")
    return workspace


async def may_read_user_data(session: AsyncSession, actor: Actor, workspace_id: int) -> bool:
    """Whether ``require_user_data_access`` lets the actor through (for pages that hide what it would refuse)."""
    try:
        await require_user_data_access(session, actor, workspace_id, "user data")
    except Forbidden:
        return False
    return True


async def require_user_data_access(session: AsyncSession, actor: Actor, workspace_id: int, what: str) -> None:
    """Let a platform admin who is not a member of the workspace read its users' data (``what``: job logs)
    only when the workspace granted it (``Workspace.admins_read_logs``); members always may.

    Platform admins see every job's status, events, replicas, metrics and failure reasons without this: they
    run the platform. What a job printed is its user's data.

    Raises:
        Forbidden: A platform admin outside the workspace, which has not granted admins this access.
    """
    if not actor.is_platform_admin or await workspace_role(session, actor, workspace_id) is not None:
        return
    workspace = await session.get(Workspace, workspace_id)
    if workspace is not None and not workspace.admins_read_logs:
        raise Forbidden(
            f"platform admins read {what} of workspace {workspace.name} only when its admins allow it "
            f"(`aicenter workspace admins-read-logs {workspace.name} allow`)",
            details={"workspace_id": workspace_id},
        )


def member_workspace_ids(actor: Actor) -> Select[int]:
    """The ids of the workspaces the actor is a member of, as a subquery for ``column.in_(...)``."""
    return select(Membership.workspace_id).where(Membership.user_id == actor.user_id)
