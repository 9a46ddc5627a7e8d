"""The meter: charges every started copy that is not closed (package docstring: exactly once)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.db.ledger_writes import advance_meters, insert_entries_if_absent, insert_meters_if_absent
from aicenter.db.models import BillingMeter, Job, Replica
from aicenter.services.billing._ledger import EntryKind, move_balances


class MeterRaced(RuntimeError):
    """Another meter charged a copy between this pass's read and its write: the pass must roll back."""


@dataclass
class MeterResult:
    """What one pass did: entries written, copies closed, cents charged, and where the next batch starts."""

    entries: int = 0
    closed: int = 0
    cents: int = 0
    last_replica_id: int | None = None
    more: bool = False
    workspaces: set[int] = field(default_factory=set)


async def meter(
    session: AsyncSession,
    now: datetime,
    *,
    min_period: timedelta = timedelta(seconds=60),
    after_replica_id: int = 0,
    limit: int = 2000,
) -> MeterResult:
    """Charge every started copy that is not closed, up to ``now`` (running) or its end (finished), in the
    caller's write transaction: ledger entries, meter rows and balances together.

    Copies are taken in replica id order after ``after_replica_id``, at most ``limit`` of them; ``more`` says
    whether to call again with ``after_replica_id=result.last_replica_id``.

    Raises:
        MeterRaced: another meter wrote one of these copies meanwhile; roll back and run again.
    """
    stmt = (
        select(
            Replica.id,
            Replica.job_id,
            Job.workspace_id,
            Replica.billing_weight,
            Replica.price_per_hour,
            Replica.started_at,
            Replica.finished_at,
            BillingMeter.charged_until,
            BillingMeter.microhours,
            BillingMeter.cents,
        )
        .join(Job, Job.id == Replica.job_id)
        .outerjoin(BillingMeter, BillingMeter.replica_id == Replica.id)
        .where(Replica.started_at.is_not(None), BillingMeter.closed_at.is_(None), Replica.id > after_replica_id)
        .order_by(Replica.id)
        .limit(limit)
    )
    rows = (await session.execute(stmt)).all()
    result = MeterResult(last_replica_id=rows[-1].id if rows else None, more=len(rows) == limit)
    pending: list[tuple[billing.Charge, billing.Metered, int, int, bool]] = []
    for r in rows:
        copy = billing.Copy(
            r.id, billing.weight_decimal(r.billing_weight), Decimal(r.price_per_hour), r.started_at, r.finished_at
        )
        known = r.charged_until is not None
        metered = (
            billing.Metered(
                r.charged_until,
                Decimal(r.microhours).scaleb(-billing.HOURS_PLACES),
                Decimal(r.cents).scaleb(-billing.MINOR_PLACES),
            )
            if known
            else billing.Metered()
        )
        charge = billing.next_charge(copy, metered, now, min_period=min_period)
        if charge is not None:
            pending.append((charge, metered, r.workspace_id, r.job_id, known))
    entries = [
        {
            "workspace_id": workspace_id,
            "kind": EntryKind.CHARGE.value,
            "amount_cents": -billing.to_cents(charge.amount),
            "machine_microhours": int(charge.hours.scaleb(billing.HOURS_PLACES)),
            "idempotency_key": charge.key,
            "job_id": job_id,
            "replica_id": charge.copy_id,
            "period_start": charge.period_start,
            "period_end": charge.period_end,
            "reason": "",
            "actor_id": None,
            "actor_name": "system",
            "created_at": now,
        }
        for charge, _, workspace_id, job_id, _ in pending
        if charge.hours or charge.amount
    ]
    inserted = await insert_entries_if_absent(session, entries)
    wanted = {e["idempotency_key"] for e in entries}
    new_meters: list[dict[str, object]] = []
    moved: list[dict[str, object]] = []
    deltas: dict[int, int] = {}
    for charge, metered, workspace_id, job_id, known in pending:
        if charge.key in wanted and charge.key not in inserted:
            continue  # another meter charged this very period (and moved the copy's meter row with it)
        after = charge.after(metered)
        values = {
            "charged_until": after.until,
            "microhours": int(after.hours.scaleb(billing.HOURS_PLACES)),
            "cents": billing.to_cents(after.amount),
            "closed_at": now if charge.closes else None,
        }
        if known:
            moved.append({"replica_id": charge.copy_id, "old": metered.until, **values})
        else:
            new_meters.append({"replica_id": charge.copy_id, "workspace_id": workspace_id, "job_id": job_id, **values})
        if charge.key in inserted:
            cents = billing.to_cents(charge.amount)
            deltas[workspace_id] = deltas.get(workspace_id, 0) - cents
            result.entries += 1
            result.cents += cents
            result.workspaces.add(workspace_id)
        result.closed += charge.closes
    if await advance_meters(session, moved) != len(moved):
        raise MeterRaced("a copy was metered by another pass")
    if len(await insert_meters_if_absent(session, new_meters)) != len(new_meters):
        raise MeterRaced("a copy's first charge was written by another pass")
    await move_balances(session, deltas)
    return result
