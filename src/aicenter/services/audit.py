"""The audit log: every mutation records who did what to which target, from where, in its own transaction."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.errors import Forbidden, ValidationFailed
from aicenter.db.models import AuditEvent
from aicenter.db.pagination import Page, paginate
from aicenter.services.access import require_workspace_admin
from aicenter.services.context import Actor


def record(
    session: AsyncSession,
    actor: Actor,
    action: str,
    target_type: str,
    target_id: object = None,
    *,
    workspace_id: int | None = None,
    details: dict[str, Any] | None = None,
) -> None:
    """Add an audit row to the caller's transaction, so the log and the change commit or fail together.

    ``details`` must never contain secrets (passwords, token secrets).
    """
    session.add(
        AuditEvent(
            at=utcnow(),
            actor_id=actor.user_id or None,
            actor_name=actor.username,
            action=action,
            target_type=target_type,
            target_id=None if target_id is None else str(target_id),
            workspace_id=workspace_id,
            client_address=actor.client_address,
            request_id=actor.request_id,
            details=details or {},
        )
    )


async def list_events(
    session: AsyncSession,
    actor: Actor,
    *,
    limit: int = 50,
    cursor: str | None = None,
    actor_name: str | None = None,
    action: str | None = None,
    target_type: str | None = None,
    target_id: str | None = None,
    workspace_id: int | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Page[AuditEvent]:
    """Audit events, newest first: every event for platform admins; a workspace's own events (``workspace_id``
    given) for that workspace's admins too, so they see what anyone, platform admins included, did in it.

    Every filter is optional. ``action`` matches exactly, or as a prefix when it ends in ``.`` (``user.``
    finds ``user.create``, ``user.freeze``, ...). ``since`` is inclusive, ``until`` exclusive; times without
    a zone are taken as UTC.

    Raises:
        Forbidden: the actor is neither a platform admin nor (with ``workspace_id``) an admin of the workspace.
        NotFound: ``workspace_id`` names a workspace the actor is not a member of.
        ValidationFailed: ``until`` is not after ``since``.
    """
    if not actor.is_platform_admin:
        if workspace_id is None:
            raise Forbidden("only platform admins can read the whole audit log; workspace admins read their own's")
        await require_workspace_admin(session, actor, workspace_id)
    since = _as_utc(since)
    until = _as_utc(until)
    if since is not None and until is not None and until <= since:
        raise ValidationFailed("must be after since", field="until")
    stmt = select(AuditEvent)
    if actor_name:
        stmt = stmt.where(AuditEvent.actor_name == actor_name)
    if action:
        stmt = stmt.where(AuditEvent.action.startswith(action) if action.endswith(".") else AuditEvent.action == action)
    if target_type:
        stmt = stmt.where(AuditEvent.target_type == target_type)
    if target_id:
        stmt = stmt.where(AuditEvent.target_id == target_id)
    if workspace_id is not None:
        stmt = stmt.where(AuditEvent.workspace_id == workspace_id)
    if since:
        stmt = stmt.where(AuditEvent.at >= since)
    if until:
        stmt = stmt.where(AuditEvent.at < until)
    return await paginate(session, stmt, AuditEvent.id, limit=limit, cursor=cursor, descending=True)


def _as_utc(value: datetime | None) -> datetime | None:
    if value is None or value.tzinfo is not None:
        return value
    return value.replace(tzinfo=UTC)
