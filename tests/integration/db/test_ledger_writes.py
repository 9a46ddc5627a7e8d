"""Billing's batch writes (aicenter.db.ledger_writes) on SQLite and PostgreSQL: insert-if-absent reports exactly
the rows it wrote, over more rows than one statement's page, and the values read back as they were given."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import func, select

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.ledger_writes import advance_meters, insert_entries_if_absent, insert_meters_if_absent
from aicenter.db.models import BillingMeter, LedgerEntry

NOW = utcnow().replace(microsecond=123456)
# More than one page of SQLite's multi-row insert (32,766 parameters: 2,520 rows of 13 columns).
ROWS = 3000


def entry(i: int) -> dict[str, Any]:
    return {
        "workspace_id": 7,
        "kind": "charge",
        "amount_cents": -i,
        "machine_microhours": 1000 * i,
        "idempotency_key": f"test-writes:{i}",
        "job_id": i // 10,
        "replica_id": 900_000 + i,
        "period_start": NOW - timedelta(minutes=1, microseconds=i),
        "period_end": NOW,
        "reason": "",
        "actor_id": None,
        "actor_name": "system",
        "created_at": NOW,
    }


def meter(i: int) -> dict[str, Any]:
    return {
        "replica_id": 900_000 + i,
        "workspace_id": 7,
        "job_id": i // 10,
        "charged_until": NOW,
        "microhours": i,
        "cents": i,
        "closed_at": None,
        "user_id": None,
        "task": "worker",
        "kind": "train",
        "spec_id": None,
        "spec_name": "",
        "gpu_type": "",
        "gpu": 0,
        "billing_weight": 1.5,
        "price_per_hour": Decimal("2.35"),
        "started_at": NOW - timedelta(hours=1),
        "finished_at": None,
    }


async def test_entries_already_written_are_skipped_and_not_reported(db: Database) -> None:
    rows = [entry(i) for i in range(ROWS)]
    async with db.write() as session:
        first = await insert_entries_if_absent(session, rows[:1000])
    assert first == {r["idempotency_key"] for r in rows[:1000]}
    async with db.write() as session:
        second = await insert_entries_if_absent(session, rows)  # the first 1,000 again, then 2,000 new
    assert second == {r["idempotency_key"] for r in rows[1000:]}
    async with db.read() as session:
        written = (await session.scalars(select(LedgerEntry).where(LedgerEntry.workspace_id == 7))).all()
    assert len(written) == ROWS
    last = max(written, key=lambda e: e.replica_id or 0)
    assert (last.amount_cents, last.machine_microhours, last.job_id) == (-(ROWS - 1), 1000 * (ROWS - 1), 299)
    assert last.period_start == NOW - timedelta(minutes=1, microseconds=ROWS - 1)  # aware UTC, to the microsecond
    assert (last.period_end, last.created_at, last.actor_id, last.actor_name) == (NOW, NOW, None, "system")


async def test_meter_rows_are_written_once_and_moved_only_from_where_they_were(db: Database) -> None:
    rows = [meter(i) for i in range(ROWS)]
    async with db.write() as session:
        assert await insert_meters_if_absent(session, rows[:10]) == {r["replica_id"] for r in rows[:10]}
    async with db.write() as session:
        assert await insert_meters_if_absent(session, rows) == {r["replica_id"] for r in rows[10:]}
    later = NOW + timedelta(minutes=1)
    moves = [
        {"replica_id": 900_000 + i, "old": NOW, "charged_until": later, "microhours": 5, "cents": 6, "closed_at": None}
        for i in range(3)
    ]
    moves.append({**moves[0], "replica_id": 900_003, "old": later})  # computed on a state it is no longer in
    async with db.write() as session:
        assert await advance_meters(session, moves) == 3
    async with db.read() as session:
        first = await session.get(BillingMeter, 900_000)
        untouched = await session.get(BillingMeter, 900_003)
        count = await session.scalar(
            select(func.count()).select_from(BillingMeter).where(BillingMeter.workspace_id == 7)
        )
    assert count == ROWS
    assert first is not None
    assert (first.charged_until, first.microhours, first.cents) == (later, 5, 6)
    assert (first.price_per_hour, first.billing_weight, first.finished_at) == (Decimal("2.35"), 1.5, None)
    assert untouched is not None
    assert (untouched.charged_until, untouched.cents) == (NOW, 3)
