"""The audit log (platform admins)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession
from aicenter.api.params import Id
from aicenter.api.schemas.audit import AuditEventOut
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.services import audit

router = APIRouter(prefix="/api/v1", tags=["audit"], responses=ERROR_RESPONSES)


@router.get("/audit-events", openapi_extra=access(Access.ADMIN))
async def list_audit_events(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    actor_name: Annotated[
        str | None, Query(alias="actor", max_length=64, description="Name of the user who acted.")
    ] = None,
    action: Annotated[
        str | None,
        Query(max_length=64, description="Exact action (workspace.member.add), or a prefix ending in '.' (user.)."),
    ] = None,
    target_type: Annotated[str | None, Query(max_length=32, description="e.g. user, workspace, quota.")] = None,
    target_id: Annotated[str | None, Query(max_length=64)] = None,
    workspace_id: Id | None = None,
    since: Annotated[datetime | None, Query(description="Events at or after this time (ISO-8601).")] = None,
    until: Annotated[datetime | None, Query(description="Events before this time (ISO-8601).")] = None,
) -> Page[AuditEventOut]:
    """Who did what to which target, from where; newest first."""
    page = await audit.list_events(
        session,
        actor,
        limit=paging.limit,
        cursor=paging.cursor,
        actor_name=actor_name,
        action=action,
        target_type=target_type,
        target_id=target_id,
        workspace_id=workspace_id,
        since=since,
        until=until,
    )
    return Page(items=[AuditEventOut.model_validate(e) for e in page.items], next_cursor=page.next_cursor)
