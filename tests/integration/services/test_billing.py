"""Billing on the real databases: admin recharges (bad input writes nothing), the meter charging running copies
per period exactly once and closing ended ones to the formula's cent, and the reconciliation."""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select, update

from aicenter.core import billing as formula
from aicenter.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import BillingMeter, Job, LedgerEntry, Replica, ResourceSpec, Workspace
from aicenter.services import billing, jobs
from aicenter.services.context import Actor
from aicenter.services.jobs import next_attempt_row
from tests.integration.services.jobs_helpers import JobWorld, job_world, spec, submit

T0 = datetime(2026, 3, 1, 8, 0, tzinfo=UTC)
ADMIN = Actor.system("test")


async def entries(db: Database) -> list[LedgerEntry]:
    async with db.read() as session:
        return list((await session.scalars(select(LedgerEntry).order_by(LedgerEntry.id))).all())


async def balance(db: Database, workspace_id: int) -> Decimal:
    async with db.read() as session:
        return Decimal(await session.scalar(select(Workspace.balance).where(Workspace.id == workspace_id)))


async def test_recharge_adjust_and_retry(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        entry = await billing.recharge(session, ADMIN, w.p.ws, "100.50", reason="first top-up", idempotency_key="k1")
    assert entry.amount == Decimal("100.50")
    assert entry.kind == billing.EntryKind.RECHARGE
    async with db.write() as session:  # a retry: same entry, nothing new
        again = await billing.recharge(session, ADMIN, w.p.ws, "100.50", reason="first top-up", idempotency_key="k1")
    assert again.id == entry.id
    with pytest.raises(Conflict):
        async with db.write() as session:
            await billing.recharge(session, ADMIN, w.p.ws, "5", reason="other", idempotency_key="k1")
    async with db.write() as session:
        await billing.adjust(session, ADMIN, w.p.ws, "-0.25", reason="rounding of an old invoice")
        await billing.refund(session, ADMIN, w.p.ws, 3, reason="node lost")
    assert await balance(db, w.p.ws) == Decimal("103.25")
    async with db.read() as session:
        view = await billing.get_balance(session, w.p.bob, w.p.ws)
        page = await billing.list_ledger(session, w.p.alice, w.p.ws)
        assert await billing.verify(session, ADMIN) == []
    assert view.balance == Decimal("103.25")
    assert [e.kind.value for e in page.items] == ["refund", "adjustment", "recharge"]
    with pytest.raises(NotFound):  # carol is not a member
        async with db.read() as session:
            await billing.get_balance(session, w.p.carol, w.p.ws)


@pytest.mark.parametrize(
    ("amount", "reason", "error"),
    [
        ("-5", "x", ValidationFailed),
        ("0", "x", ValidationFailed),
        ("abc", "x", ValidationFailed),
        ("NaN", "x", ValidationFailed),
        ("Infinity", "x", ValidationFailed),
        ("1.001", "x", ValidationFailed),
        (1.5, "x", ValidationFailed),  # a float is not the amount typed
        ("1e13", "x", ValidationFailed),
        ("10", "  ", ValidationFailed),
    ],
)
async def test_bad_recharges_write_nothing(
    db: Database, tmp_path: Path, amount: Any, reason: str, error: type[Exception]
) -> None:
    w = await job_world(db, tmp_path)
    with pytest.raises(error) as info:
        async with db.write() as session:
            await billing.recharge(session, ADMIN, w.p.ws, amount, reason=reason)
    assert info.value.details["field"] in {"amount", "reason"}  # type: ignore[attr-defined]
    assert await entries(db) == []
    assert await balance(db, w.p.ws) == 0


async def test_unknown_workspace_and_non_admins_are_refused(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    with pytest.raises(NotFound):
        async with db.write() as session:
            await billing.recharge(session, ADMIN, 999_999, "10", reason="x")
    with pytest.raises(Forbidden):
        async with db.write() as session:
            await billing.recharge(session, w.p.alice, w.p.ws, "10", reason="x")
    assert await entries(db) == []


async def started_job(db: Database, w: JobWorld, *, at: datetime = T0) -> list[int]:
    """alice's 2-replica job on cpu-4 (weight 2, price 1/h), both replicas started at ``at``; their ids."""
    view = await submit(db, w.p.alice, spec())
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.job_id == view.job.id).values(started_at=at))
        return list((await session.scalars(select(Replica.id).where(Replica.job_id == view.job.id))).all())


async def run_meter(db: Database, now: datetime) -> billing.MeterResult:
    async with db.write() as session:
        return await billing.meter(session, now, min_period=timedelta(seconds=60))


async def finish(db: Database, replica_id: int, at: datetime) -> None:
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.id == replica_id).values(finished_at=at))


async def test_meter_charges_periods_once_and_closes_copies_to_the_formula(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    a, b = await started_job(db, w)
    async with db.write() as session:  # a later price change rewrites nothing: the price was snapshotted
        await session.execute(update(ResourceSpec).where(ResourceSpec.name == "cpu-4").values(price_per_hour=99))

    first = await run_meter(db, T0 + timedelta(minutes=30))
    assert (first.entries, first.closed, first.cents) == (2, 0, 200)  # 2 copies x 2 x 0.5 h x 1/h
    assert (await run_meter(db, T0 + timedelta(minutes=30))).entries == 0  # the same instant: nothing twice
    assert (await run_meter(db, T0 + timedelta(minutes=30, seconds=59))).entries == 0  # under one period

    end_a = T0 + timedelta(minutes=47, seconds=13, microseconds=777)
    await finish(db, a, end_a)
    second = await run_meter(db, T0 + timedelta(minutes=50))
    assert (second.entries, second.closed) == (2, 1)
    assert (await run_meter(db, T0 + timedelta(hours=3))).closed == 0  # a closed copy is never charged again

    rows = await entries(db)
    charged = {r: sum(e.amount_cents for e in rows if e.replica_id == r) for r in (a, b)}
    assert -charged[a] == formula.to_cents(formula.copy_cost(Decimal(2), Decimal(1), T0, end_a))
    assert -charged[b] == formula.to_cents(formula.copy_cost(Decimal(2), Decimal(1), T0, T0 + timedelta(hours=3)))
    assert len({e.idempotency_key for e in rows}) == len(rows)
    assert await balance(db, w.p.ws) == Decimal(sum(charged.values())).scaleb(-2)
    async with db.read() as session:
        assert await billing.verify(session, ADMIN) == []


async def test_an_end_recorded_before_the_last_charge_is_given_back(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    a, _ = await started_job(db, w)
    await run_meter(db, T0 + timedelta(hours=1))
    await finish(db, a, T0 + timedelta(minutes=20))  # the end observed late, recorded as it happened
    await run_meter(db, T0 + timedelta(hours=1, minutes=5))
    total = sum(e.amount_cents for e in await entries(db) if e.replica_id == a)
    assert total == -formula.to_cents(formula.copy_cost(Decimal(2), Decimal(1), T0, T0 + timedelta(minutes=20)))
    async with db.read() as session:
        assert await billing.verify(session, ADMIN) == []


async def test_concurrent_meters_charge_once(db: Database, tmp_path: Path) -> None:
    """Two passes over the same period at once (two server processes): one set of charges, whoever wins."""
    w = await job_world(db, tmp_path)
    await started_job(db, w)
    for minutes in (10, 20, 30):
        now = T0 + timedelta(minutes=minutes)

        async def one(now: datetime = now) -> None:
            with contextlib.suppress(billing.MeterRaced):
                await run_meter(db, now)

        await asyncio.gather(one(), one())
    rows = await entries(db)
    assert len(rows) == 6
    async with db.read() as session:
        assert await billing.verify(session, ADMIN) == []
        assert int(await session.scalar(select(func.count()).select_from(LedgerEntry)) or 0) == 6
    assert await balance(db, w.p.ws) == Decimal("-2.00")  # 2 copies x weight 2 x 0.5 h x 1/h


async def test_meter_batches_by_replica_id(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    ids = await started_job(db, w)
    async with db.write() as session:
        first = await billing.meter(session, T0 + timedelta(hours=1), limit=1)
        assert first.more
        assert first.last_replica_id == min(ids)
        second = await billing.meter(session, T0 + timedelta(hours=1), after_replica_id=min(ids), limit=1)
    assert first.entries + second.entries == 2


def test_a_restart_keeps_the_price_snapshot() -> None:
    row = Replica(job_id=1, task="w", index=0, attempt=0, billing_weight=1.5, price_per_hour=Decimal("2.5"))
    after = next_attempt_row(row, 1)
    assert (after.billing_weight, after.price_per_hour, after.attempt) == (1.5, Decimal("2.5"), 1)


async def test_submit_snapshots_the_specs_price(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    async with db.read() as session:
        prices = (await session.scalars(select(Replica.price_per_hour).where(Replica.job_id == view.job.id))).all()
    assert [Decimal(p) for p in prices] == [Decimal(1), Decimal(1)]


async def test_deleting_a_finished_job_charges_its_last_minutes_first(db: Database, tmp_path: Path) -> None:
    """Its copies ended after the last pass; deleting the job charges them to their ends in its transaction, so
    the next pass finds nothing and the charges are the formula's (not the last pass's) to the cent."""
    w = await job_world(db, tmp_path)
    a, b = await started_job(db, w)
    await run_meter(db, T0 + timedelta(minutes=30))
    end = T0 + timedelta(minutes=40, seconds=30, microseconds=5)
    await finish(db, a, end)
    await finish(db, b, end)
    async with db.write() as session:
        job_id = await session.scalar(select(Replica.job_id).where(Replica.id == a))
        await session.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
    async with db.write() as session:
        await jobs.delete_job(session, w.p.alice, int(job_id or 0))

    later = await run_meter(db, T0 + timedelta(minutes=45))
    assert (later.entries, later.closed) == (0, 0)
    rows = await entries(db)
    full = formula.to_cents(formula.copy_cost(Decimal(2), Decimal(1), T0, end))
    assert [-sum(e.amount_cents for e in rows if e.replica_id == r) for r in (a, b)] == [full, full]
    assert await balance(db, w.p.ws) == Decimal(-2 * full).scaleb(-2)
    async with db.read() as session:
        meters = (await session.scalars(select(BillingMeter).where(BillingMeter.job_id == job_id))).all()
        assert await billing.verify(session, ADMIN) == []
    assert [(m.closed_at is not None, m.charged_until, m.finished_at) for m in meters] == [(True, end, end)] * 2


async def test_month_spend_counts_this_months_charges_only(db: Database, tmp_path: Path) -> None:
    """The month's spend (admission's limit, the policy pages) is the charges of periods ending this month (UTC),
    whatever was charged before the 1st; recharges and adjustments are no spend."""
    w = await job_world(db, tmp_path)
    await started_job(db, w, at=T0 - timedelta(hours=10))  # Feb 28th, 22:00 (T0: the 1st of March, 08:00 UTC)
    await run_meter(db, T0 - timedelta(hours=8, minutes=30))  # 23:30: 2 copies x weight 2 x 1.5 h x 1/h = 6.00
    async with db.write() as session:
        assert await billing.month_spend(session, [w.p.ws], T0) == {}
        await billing.recharge(session, ADMIN, w.p.ws, "50", reason="top-up")
    await run_meter(db, T0)  # March 1st, 08:00: 8.5 h more of 2 copies x weight 2 = 34.00
    async with db.read() as session:
        assert await billing.month_spend(session, [w.p.ws], T0) == {w.p.ws: 3400}
        since_february = await billing.month_spend(session, [w.p.ws], T0 - timedelta(days=1))
        assert since_february == {w.p.ws: 4000}  # both
        assert await billing.month_spend(session, [w.p.ws], T0 + timedelta(days=31)) == {}  # April
