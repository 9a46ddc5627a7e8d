"""The cluster event log: node joined/lost/cordoned, preemptions, alerts fired and resolved.

``record_event`` only adds a row to the caller's transaction, so the event and the change it reports commit or
fail together. It imports nothing from the other services: inventory, jobs and serving call it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import Severity
from aicenter.core.clock import utcnow
from aicenter.db.models import ClusterEvent, Membership
from aicenter.db.pagination import Page, paginate
from aicenter.services.context import Actor


def record_event(
    session: AsyncSession,
    kind: str,
    message: str,
    *,
    severity: Severity = Severity.INFO,
    node_id: int | None = None,
    job_id: int | None = None,
    service_id: int | None = None,
    workspace_id: int | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add a cluster event to the caller's transaction.

    Args:
        kind: What happened, dotted: ``node.joined``, ``node.lost``, ``node.cordoned``, ``job.preempted``,
            ``alert.firing``, ``alert.resolved``, ``service.deployed``, ``service.scaled``.
        message: One readable line.
        workspace_id: Whose event it is; None for a cluster-wide one, which every member sees (nodes are
            shared); set, only that workspace's members and platform admins see it.
    """
    session.add(
        ClusterEvent(
            at=utcnow(),
            kind=kind,
            severity=severity.value,
            node_id=node_id,
            job_id=job_id,
            service_id=service_id,
            workspace_id=workspace_id,
            message=message[:4000],
            details=details or {},
        )
    )


def visible_to(actor: Actor, column: Any) -> ColumnElement[bool] | None:
    """The tenant filter on a ``workspace_id`` column: None for platform admins (everything); for members,
    cluster-wide rows (NULL) and their workspaces' rows."""
    if actor.is_platform_admin:
        return None
    mine = select(Membership.workspace_id).where(Membership.user_id == actor.user_id)
    return or_(column.is_(None), column.in_(mine))


async def list_events(
    session: AsyncSession,
    actor: Actor,
    *,
    limit: int = 50,
    cursor: str | None = None,
    kind: str | None = None,
    workspace_id: int | None = None,
    node_id: int | None = None,
    job_id: int | None = None,
    service_id: int | None = None,
    since: datetime | None = None,
) -> Page[ClusterEvent]:
    """Cluster events, newest first: all for platform admins; for members the cluster-wide ones and their
    workspaces'. ``kind`` matches exactly or, ending in ``.``, as a prefix (``node.``)."""
    stmt = select(ClusterEvent)
    tenant = visible_to(actor, ClusterEvent.workspace_id)
    if tenant is not None:
        stmt = stmt.where(tenant)
    if kind:
        stmt = stmt.where(ClusterEvent.kind.startswith(kind) if kind.endswith(".") else ClusterEvent.kind == kind)
    if workspace_id is not None:
        stmt = stmt.where(ClusterEvent.workspace_id == workspace_id)
    if node_id is not None:
        stmt = stmt.where(ClusterEvent.node_id == node_id)
    if job_id is not None:
        stmt = stmt.where(ClusterEvent.job_id == job_id)
    if service_id is not None:
        stmt = stmt.where(ClusterEvent.service_id == service_id)
    if since is not None:
        stmt = stmt.where(ClusterEvent.at >= since)
    return await paginate(session, stmt, ClusterEvent.id, limit=limit, cursor=cursor, descending=True)
