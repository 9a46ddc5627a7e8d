"""Who may do what to a service. Members of its workspace see it and call it; its owner and the workspace's
admins change it; platform admins see every service's metadata and status and may stop any, but never reach its
model or its requests (the gateway admits members and service keys only)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Forbidden, NotFound
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import Service
from aicenter.services.access import workspace_role
from aicenter.services.context import Actor

__all__ = ["load_service", "require_manager"]


async def load_service(session: AsyncSession, actor: Actor, service_id: int, *, for_update: bool = False) -> Service:
    """The service, if the actor is a member of its workspace or a platform admin; else NotFound."""
    stmt = select(Service).where(Service.id == service_id)
    if for_update:
        stmt = stmt.with_for_update()
    service = await session.scalar(stmt)
    if service is None or (
        not actor.is_platform_admin and await workspace_role(session, actor, service.workspace_id) is None
    ):
        raise NotFound(f"service {service_id} not found")
    return service


async def require_manager(session: AsyncSession, actor: Actor, service: Service, what: str) -> None:
    """Its owner or an admin of its workspace (a platform admin only stops: ``stop_service``)."""
    if service.user_id is not None and service.user_id == actor.user_id:
        return
    if await workspace_role(session, actor, service.workspace_id) == WorkspaceRole.WORKSPACE_ADMIN:
        return
    raise Forbidden(f"only the owner of service {service.name} and the admins of its workspace can {what} it")
