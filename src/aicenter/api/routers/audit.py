"""The audit log: all of it for platform admins, a workspace's own events for its admins too."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, PageParams, Paging, ReadSession
from aicenter.api.params import Id
from aicenter.api.schemas.audit import AuditEventOut
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.services import audit
from aicenter.services.context import Actor

router = APIRouter(prefix="/api/v1", tags=["audit"], responses=ERROR_RESPONSES)

_ActorName = Annotated[str | None, Query(alias="actor", max_length=64, description="Name of the user who acted.")]
_Action = Annotated[
    str | None,
    Query(max_length=64, description="Exact action (workspace.member.add), or a prefix ending in '.' (user.)."),
]
_TargetType = Annotated[str | None, Query(max_length=32, description="e.g. user, workspace, quota.")]
_TargetId = Annotated[str | None, Query(max_length=64)]
_Since = Annotated[datetime | None, Query(description="Events at or after this time (ISO-8601).")]
_Until = Annotated[datetime | None, Query(description="Events before this time (ISO-8601).")]


@router.get("/audit-events", openapi_extra=access(Access.ADMIN))
async def list_audit_events(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    actor_name: _ActorName = None,
    action: _Action = None,
    target_type: _TargetType = None,
    target_id: _TargetId = None,
    workspace_id: Id | None = None,
    since: _Since = None,
    until: _Until = None,
) -> Page[AuditEventOut]:
    """Who did what to which target, from where; newest first."""
    return await _page(
        session,
        actor,
        paging,
        actor_name=actor_name,
        action=action,
        target_type=target_type,
        target_id=target_id,
        workspace_id=workspace_id,
        since=since,
        until=until,
    )


@router.get("/workspaces/{workspace_id}/audit-events", openapi_extra=access(Access.WORKSPACE_ADMIN))
async def list_workspace_audit_events(
    workspace_id: Id,
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    actor_name: _ActorName = None,
    action: _Action = None,
    target_type: _TargetType = None,
    target_id: _TargetId = None,
    since: _Since = None,
    until: _Until = None,
) -> Page[AuditEventOut]:
    """What was done in the workspace, by anyone: a platform admin who adds themselves to it or changes it
    shows here. Newest first; the workspace's admins and platform admins."""
    return await _page(
        session,
        actor,
        paging,
        actor_name=actor_name,
        action=action,
        target_type=target_type,
        target_id=target_id,
        workspace_id=workspace_id,
        since=since,
        until=until,
    )


async def _page(session: AsyncSession, actor: Actor, paging: PageParams, **filters: Any) -> Page[AuditEventOut]:
    """One page of audit events for both lists (the whole platform's, one workspace's)."""
    page = await audit.list_events(session, actor, limit=paging.limit, cursor=paging.cursor, **filters)
    return Page(items=[AuditEventOut.model_validate(e) for e in page.items], next_cursor=page.next_cursor)
