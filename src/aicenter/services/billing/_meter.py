"""The meter: charges every started copy that is not closed (package docstring: exactly once).

A pass reads only copies not yet closed (``Replica.billing_closed``, a partial index of their ids), not every
replica that ever started. With a copy's first charge it writes billing's own copy record (``BillingMeter``: who, what,
weight, price, start) and with its last the end; with every charge it adds to the day rollups the reports read.
All in the caller's transaction, behind the same two guards, so the rollups are exactly once as the ledger is.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import false, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.db.ledger_writes import (
    add_to_rollups,
    advance_meters,
    close_copies,
    insert_entries_if_absent,
    insert_meters_if_absent,
)
from aicenter.db.models import BillingMeter, Job, Replica, ResourceSpec
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

    def add(self, batch: MeterResult) -> None:
        """Count a batch's charges into this pass's totals."""
        self.entries += batch.entries
        self.closed += batch.closed
        self.cents += batch.cents


async def meter(
    session: AsyncSession,
    now: datetime,
    *,
    min_period: timedelta = timedelta(seconds=60),
    after_replica_id: int = 0,
    limit: int = 2000,
    job_ids: Collection[int] | None = None,
) -> MeterResult:
    """Charge every started copy that is not closed, up to ``now`` (running) or its end (finished), in the
    caller's write transaction: ledger entries, meter rows and balances together.

    Copies are taken in replica id order after ``after_replica_id``, at most ``limit`` of them; ``more`` says
    whether to call again with ``after_replica_id=result.last_replica_id``. ``job_ids``: only these jobs'
    copies (``meter_jobs``).

    Raises:
        MeterRaced: another meter wrote one of these copies meanwhile; roll back and run again.
    """
    # One query in replica id order from the partial index of open copies, each joined by primary key, so
    # the LIMIT stops it after the batch: ``= false``, not ``IS false``, which the index's predicate does not
    # cover (PostgreSQL then walked every closed replica).
    stmt = (
        select(
            Replica.id,
            Replica.job_id,
            Job.workspace_id,
            Job.user_id,
            Job.kind,
            Replica.task,
            Replica.spec_id,
            ResourceSpec.name.label("spec_name"),
            Replica.gpu_type,
            Replica.gpu,
            Replica.billing_weight,
            Replica.price_per_hour,
            Replica.started_at,
            Replica.finished_at,
            BillingMeter.charged_until,
            BillingMeter.microhours,
            BillingMeter.cents,
            BillingMeter.closed_at.is_not(None).label("meter_closed"),
        )
        .join(Job, Job.id == Replica.job_id)
        .outerjoin(ResourceSpec, ResourceSpec.id == Replica.spec_id)
        .outerjoin(BillingMeter, BillingMeter.replica_id == Replica.id)
        .where(Replica.billing_closed == false(), Replica.started_at.is_not(None), Replica.id > after_replica_id)
        .order_by(Replica.id)
        .limit(limit)
    )
    if job_ids is not None:
        stmt = stmt.where(Replica.job_id.in_(list(job_ids)))
    # On the session's connection, not ``session.execute``: plain rows without the ORM's result machinery (a
    # tenth of a pass over 10,000 copies), after the flush ``session.execute`` would have done.
    await session.flush()
    rows = (await (await session.connection()).execute(stmt)).all()
    result = MeterResult(last_replica_id=rows[-1].id if rows else None, more=len(rows) == limit)
    pending: list[tuple[billing.Charge, str, billing.Metered, Any, bool]] = []
    weights: dict[float, Decimal] = {}  # a float's decimal, once per distinct weight of the batch
    for r in rows:
        if r.meter_closed:  # the flag is written with the close; the meter row is what decides
            continue
        weight = weights.get(r.billing_weight)
        if weight is None:
            weight = weights[r.billing_weight] = billing.weight_decimal(r.billing_weight)
        copy = billing.Copy(r.id, weight, r.price_per_hour, r.started_at, r.finished_at)
        known = r.charged_until is not None
        metered = billing.Metered(r.charged_until, r.microhours, r.cents) if known else billing.Metered()
        charge = billing.next_charge(copy, metered, now, min_period=min_period)
        if charge is not None:
            pending.append((charge, charge.key, metered, r, known))
    charge_kind = EntryKind.CHARGE.value  # an enum member's value is a descriptor lookup: once, not per row
    entries = [
        {
            "workspace_id": r.workspace_id,
            "kind": charge_kind,
            "amount_cents": -charge.cents,
            "machine_microhours": charge.microhours,
            "idempotency_key": key,
            "job_id": r.job_id,
            "replica_id": charge.copy_id,
            "period_start": charge.period_start,
            "period_end": charge.period_end,
            "reason": "",
            "actor_id": None,
            "actor_name": "system",
            "created_at": now,
        }
        for charge, key, _, r, _ in pending
        if charge.microhours or charge.cents
    ]
    inserted = await insert_entries_if_absent(session, entries)
    wanted = {e["idempotency_key"] for e in entries}
    new_meters: list[dict[str, object]] = []
    moved: list[dict[str, object]] = []
    deltas: dict[int, int] = {}
    finished: dict[int, datetime] = {}
    rollups: dict[tuple[object, ...], list[int]] = {}
    for charge, key, metered, r, known in pending:
        if key in wanted and key not in inserted:
            continue  # another meter charged this very period (and moved the copy's meter row with it)
        after = charge.after(metered)
        values = {
            "charged_until": after.until,
            "microhours": after.microhours,
            "cents": after.cents,
            "closed_at": now if charge.closes else None,
        }
        if known:
            moved.append({"replica_id": charge.copy_id, "old": metered.until, **values})
        else:
            new_meters.append(_copy_record(r, values, charge.closes))
        if charge.closes:
            finished[charge.copy_id] = r.finished_at
        if key in inserted:
            deltas[r.workspace_id] = deltas.get(r.workspace_id, 0) - charge.cents
            result.entries += 1
            result.cents += charge.cents
            sums = rollups.setdefault(_rollup_key(r, charge), [0, 0, 0])
            sums[0] += charge.microhours
            sums[1] += charge.cents
            sums[2] += 1
        result.closed += charge.closes
    if after_replica_id == 0 and job_ids is None:  # once per pass: its first batch
        for orphan in await _orphans(session, now):
            moved.append(orphan)
            finished[orphan["replica_id"]] = orphan["charged_until"]
            result.closed += 1
    if await advance_meters(session, moved) != len(moved):
        raise MeterRaced("a copy was metered by another pass")
    if len(await insert_meters_if_absent(session, new_meters)) != len(new_meters):
        raise MeterRaced("a copy's first charge was written by another pass")
    await close_copies(session, finished)
    await add_to_rollups(
        session, [dict(zip(_ROLLUP_COLUMNS, key, strict=True)) | _sums(v) for key, v in rollups.items()]
    )
    await move_balances(session, deltas)
    return result


async def meter_jobs(session: AsyncSession, job_ids: Collection[int], now: datetime) -> MeterResult:
    """Charge the open copies of these jobs up to their ends (or ``now``), in the caller's transaction: what
    deleting a job runs before its replicas go, so the time since the last pass (up to an interval of each
    copy) is charged rather than lost with the replicas. No minimum period: the charges close the copies.

    Raises:
        MeterRaced: a pass charged one of these copies meanwhile; roll back and try again.
    """
    total, after = MeterResult(), 0
    while True:
        result = await meter(session, now, min_period=timedelta(0), after_replica_id=after, job_ids=job_ids)
        total.add(result)
        if not result.more or result.last_replica_id is None:
            return total
        after = result.last_replica_id


async def _orphans(session: AsyncSession, now: datetime) -> list[dict[str, Any]]:
    """Open meter rows whose replica is gone (its job was deleted after the copy ended but before the pass
    that would have closed it): closed where their charges end, since the end died with the replica. Their
    charges are the formula from the start to there, so ``verify`` still holds; at most one interval of
    machine time goes unbilled."""
    m = BillingMeter
    rows = await session.execute(
        select(m.replica_id, m.charged_until, m.microhours, m.cents).where(
            m.closed_at.is_(None), ~select(Replica.id).where(Replica.id == m.replica_id).exists()
        )
    )
    return [
        {
            "replica_id": r.replica_id,
            "old": r.charged_until,
            "charged_until": r.charged_until,
            "microhours": r.microhours,
            "cents": r.cents,
            "closed_at": now,
        }
        for r in rows
    ]


_ROLLUP_COLUMNS = ("day", "workspace_id", "user_id", "kind", "spec_name", "gpu_type")


def _rollup_key(r: Any, charge: billing.Charge) -> tuple[object, ...]:
    """The day rollup a charge adds to: the UTC day its period ends (``BillingRollup``)."""
    return (
        charge.period_end.astimezone(UTC).date(),
        r.workspace_id,
        r.user_id or 0,
        r.kind,
        r.spec_name or "",
        r.gpu_type or "",
    )


def _sums(v: list[int]) -> dict[str, int]:
    return {"microhours": v[0], "cents": v[1], "entries": v[2]}


def _copy_record(r: Any, values: dict[str, Any], closes: bool) -> dict[str, Any]:
    """A new meter row: the charge state and the copy's facts, which outlive its replica row."""
    return {
        "replica_id": r.id,
        "workspace_id": r.workspace_id,
        "job_id": r.job_id,
        **values,
        "user_id": r.user_id,
        "task": r.task,
        "kind": r.kind,
        "spec_id": r.spec_id,
        "spec_name": r.spec_name or "",
        "gpu_type": r.gpu_type or "",
        "gpu": r.gpu,
        "billing_weight": r.billing_weight,
        "price_per_hour": r.price_per_hour,
        "started_at": r.started_at,
        "finished_at": r.finished_at if closes else None,
    }
