"""Reconciliation: the ledger against the formula over every closed copy (billing's copy records, which outlive
deleted jobs), and balances against entries."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.db.models import BillingMeter, LedgerEntry, Workspace
from aicenter.services.access import require_platform_admin
from aicenter.services.billing._ledger import EntryKind
from aicenter.services.context import Actor


@dataclass(frozen=True)
class Mismatch:
    """A closed copy whose charges differ from the formula, or a workspace whose balance is not its ledger's sum."""

    what: str  # "replica" or "workspace"
    id: int
    expected: Decimal
    recorded: Decimal


async def verify(session: AsyncSession, actor: Actor) -> list[Mismatch]:
    """Recompute the formula over every closed copy and compare with its charges in the ledger, and every
    workspace's balance with the sum of its entries (platform admins). Empty: the ledger is the formula."""
    require_platform_admin(actor, "billing verification")
    charged = await session.execute(
        select(LedgerEntry.replica_id, func.sum(LedgerEntry.amount_cents))
        .where(LedgerEntry.kind == EntryKind.CHARGE.value)
        .group_by(LedgerEntry.replica_id)
    )
    sums: dict[int | None, int] = dict(charged.all())
    out: list[Mismatch] = []
    # Billing's own copy records, not the replicas: a deleted job's copies are still checked.
    m = BillingMeter
    closed = await session.execute(
        select(m.replica_id.label("id"), m.billing_weight, m.price_per_hour, m.started_at, m.finished_at)
        .where(m.closed_at.is_not(None))
        .order_by(m.replica_id)
    )
    for r in closed:
        if r.started_at is None or r.finished_at is None:  # a row from before copy records: nothing to check on
            continue
        expected = billing.copy_cost(
            billing.weight_decimal(r.billing_weight), Decimal(r.price_per_hour), r.started_at, r.finished_at
        )
        recorded = -Decimal(sums.get(r.id) or 0).scaleb(-billing.MINOR_PLACES)
        if recorded != expected:
            out.append(Mismatch("replica", r.id, expected, recorded))
    per_workspace = await session.execute(
        select(LedgerEntry.workspace_id, func.sum(LedgerEntry.amount_cents)).group_by(LedgerEntry.workspace_id)
    )
    totals: dict[int, int] = dict(per_workspace.all())
    for workspace_id, balance in (await session.execute(select(Workspace.id, Workspace.balance))).all():
        expected = Decimal(totals.get(workspace_id) or 0).scaleb(-billing.MINOR_PLACES)
        if Decimal(balance).quantize(billing.MINOR_UNIT) != expected:
            out.append(Mismatch("workspace", workspace_id, expected, Decimal(balance)))
    return out
