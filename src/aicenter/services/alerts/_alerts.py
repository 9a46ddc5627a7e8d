"""Reading alerts: tenant-filtered like the event log."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import AlertState
from aicenter.core.errors import ValidationFailed
from aicenter.db.models import Alert, AlertRule
from aicenter.db.pagination import Page, paginate
from aicenter.services.alerts._events import visible_to
from aicenter.services.context import Actor


@dataclass(frozen=True)
class AlertView:
    alert: Alert
    rule_name: str


async def list_alerts(
    session: AsyncSession,
    actor: Actor,
    *,
    state: str | None = None,
    workspace_id: int | None = None,
    rule_id: int | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[AlertView]:
    """Alerts, newest first: all for platform admins; for members the cluster-wide ones (nodes, accelerators)
    and their workspaces'. ``state``: pending, firing or resolved (None: any)."""
    stmt = select(Alert)
    tenant = visible_to(actor, Alert.workspace_id)
    if tenant is not None:
        stmt = stmt.where(tenant)
    if state is not None:
        try:
            stmt = stmt.where(Alert.state == AlertState(state).value)
        except ValueError:
            raise ValidationFailed("must be pending, firing or resolved", field="state") from None
    if workspace_id is not None:
        stmt = stmt.where(Alert.workspace_id == workspace_id)
    if rule_id is not None:
        stmt = stmt.where(Alert.rule_id == rule_id)
    page = await paginate(session, stmt, Alert.id, limit=limit, cursor=cursor, descending=True)
    stmt_names = select(AlertRule.id, AlertRule.name).where(AlertRule.id.in_({a.rule_id for a in page.items}))
    names: dict[int, str] = {row[0]: row[1] for row in await session.execute(stmt_names)}
    return Page([AlertView(a, names.get(a.rule_id, "")) for a in page.items], page.next_cursor)
