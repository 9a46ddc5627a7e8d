"""Billing reports on the real databases: sums equal the ledger (and so the formula), UTC bucket edges of week,
month and year, bad ranges refused, CSV, statistics for admins only, isolation between workspaces, and the copy
records that outlive a deleted job."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import select, update

from aicenter.core import billing as formula
from aicenter.core.billing_periods import Period
from aicenter.core.errors import Forbidden, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import BillingMeter, Job, LedgerEntry, Replica
from aicenter.services import billing, jobs
from aicenter.services.context import Actor
from tests.integration.services.jobs_helpers import JobWorld, job_world, spec, submit

ADMIN = Actor.system("test")
NEW_YEAR = datetime(2027, 1, 1, tzinfo=UTC)  # a Friday: 2026-12-28 (Monday) starts its week


async def run_job(db: Database, w: JobWorld, start: datetime, end: datetime, passes: list[datetime]) -> int:
    """alice's 2-replica job on cpu-4 (weight 2, price 1/h) from ``start`` to ``end``, metered at ``passes``
    (the last one after ``end`` closes it); its id."""
    view = await submit(db, w.p.alice, spec())
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.job_id == view.job.id).values(started_at=start))
    for now in passes:
        if now >= end:
            async with db.write() as session:
                await session.execute(update(Replica).where(Replica.job_id == view.job.id).values(finished_at=end))
        async with db.write() as session:
            await billing.meter(session, now, min_period=timedelta(seconds=60))
    return view.job.id


async def charged_cents(db: Database, *, year: int | None = None) -> int:
    """What the ledger charged (positive), optionally only the charges whose period ends in ``year``."""
    async with db.read() as session:
        rows = (await session.scalars(select(LedgerEntry).where(LedgerEntry.kind == "charge"))).all()
    return -sum(e.amount_cents for e in rows if year is None or (e.period_end and e.period_end.year == year))


async def a_report(db: Database, actor: Actor, period: Period, by: billing.GroupBy, **kw: object) -> billing.Report:
    async with db.read() as session:
        return await billing.report(session, actor, period=period, group_by=by, **kw)  # type: ignore[arg-type]


async def test_a_deleted_job_keeps_its_copy_records_verify_and_report(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    t0 = datetime(2026, 3, 2, 8, tzinfo=UTC)
    end = t0 + timedelta(minutes=47, seconds=13, microseconds=777)
    job_id = await run_job(db, w, t0, end, [t0 + timedelta(minutes=30), t0 + timedelta(minutes=50)])
    async with db.write() as session:
        await session.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
    async with db.write() as session:
        await jobs.delete_job(session, w.p.alice, job_id)
    async with db.read() as session:
        assert (await session.scalars(select(Replica).where(Replica.job_id == job_id))).all() == []
        copies = (await session.scalars(select(BillingMeter).where(BillingMeter.job_id == job_id))).all()
        assert await billing.verify(session, ADMIN) == []
    assert [(c.kind, c.spec_name, c.user_id, c.task, c.finished_at) for c in copies] == [
        ("train", "cpu-4", w.p.alice.user_id, "worker", end)
    ] * 2
    expected = 2 * formula.copy_cost(Decimal(2), Decimal(1), t0, end)
    assert await charged_cents(db) == formula.to_cents(expected)
    got = await a_report(db, w.p.alice, Period.MONTH, billing.GroupBy.KIND, anchor=t0.date())
    assert [(r.bucket, r.group, r.amount) for r in got.rows] == [(date(2026, 3, 1), "train", expected)]
    assert got.amount == expected
    async with db.read() as session:
        microhours = sum((await session.scalars(select(LedgerEntry.machine_microhours))).all())
    assert got.machine_hours == Decimal(microhours).scaleb(-6)


async def test_buckets_split_at_utc_week_month_and_year_edges(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    start = NEW_YEAR - timedelta(minutes=30)
    await run_job(
        db, w, start, NEW_YEAR + timedelta(minutes=40), [NEW_YEAR - timedelta(minutes=1), NEW_YEAR + timedelta(hours=1)]
    )
    old, new = await charged_cents(db, year=2026), await charged_cents(db, year=2027)
    assert old > 0
    assert new > 0
    span = {"start": date(2026, 1, 1), "end": date(2028, 1, 1)}
    by_year = await a_report(db, w.p.alice, Period.YEAR, billing.GroupBy.WORKSPACE, **span)
    assert [(r.bucket, r.amount) for r in by_year.rows] == [
        (date(2026, 1, 1), Decimal(old) / 100),
        (date(2027, 1, 1), Decimal(new) / 100),
    ]
    assert by_year.buckets == [date(2026, 1, 1), date(2027, 1, 1)]
    by_month = await a_report(db, w.p.alice, Period.MONTH, billing.GroupBy.SPEC, **span)
    assert [(r.bucket, r.group, r.amount) for r in by_month.rows] == [
        (date(2026, 12, 1), "cpu-4", Decimal(old) / 100),
        (date(2027, 1, 1), "cpu-4", Decimal(new) / 100),
    ]
    by_week = await a_report(db, w.p.alice, Period.WEEK, billing.GroupBy.USER, **span)
    assert [(r.bucket, r.group, r.amount) for r in by_week.rows] == [
        (date(2026, 12, 28), "alice", Decimal(old + new) / 100)  # one ISO week holds both days
    ]
    assert by_week.amount == Decimal(await charged_cents(db)) / 100


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"start": date(2026, 1, 1)}, "to"),
        ({"end": date(2026, 1, 1)}, "from"),
        ({"start": date(2026, 2, 1), "end": date(2026, 1, 1)}, "to"),
        ({"start": date(2026, 1, 1), "end": date(2026, 1, 1)}, "to"),
        ({"start": date(2020, 1, 1), "end": date(2026, 1, 2)}, "to"),
    ],
)
async def test_bad_ranges_are_refused(db: Database, tmp_path: Path, kw: dict[str, date], field: str) -> None:
    w = await job_world(db, tmp_path)
    with pytest.raises(ValidationFailed) as info:
        await a_report(db, w.p.alice, Period.MONTH, billing.GroupBy.KIND, **kw)
    assert info.value.details["field"] == field


async def test_isolation_csv_and_statistics_for_admins_only(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    t0 = datetime(2026, 5, 4, 10, tzinfo=UTC)
    await run_job(db, w, t0, t0 + timedelta(hours=1), [t0 + timedelta(hours=2)])
    total = Decimal(await charged_cents(db)) / 100
    assert total == Decimal(4)  # 2 copies x weight 2 x 1 h x 1/h
    mine = await a_report(db, w.p.bob, Period.MONTH, billing.GroupBy.USER, anchor=t0.date())
    assert mine.amount == total
    assert (await a_report(db, ADMIN, Period.MONTH, billing.GroupBy.USER, anchor=t0.date())).amount == total
    theirs = await a_report(db, w.p.carol, Period.MONTH, billing.GroupBy.USER, anchor=t0.date())
    assert theirs.rows == []
    with pytest.raises(NotFound):
        await a_report(db, w.p.carol, Period.MONTH, billing.GroupBy.USER, anchor=t0.date(), workspace_id=w.p.ws)
    assert billing.report_csv(mine).splitlines() == [
        "period_start,user,machine_hours,amount,entries",
        "2026-05-01,alice,4.000000,4.00,2",
    ]
    with pytest.raises(Forbidden):
        async with db.read() as session:
            await billing.stats(session, w.p.alice, period=Period.MONTH, anchor=t0.date())
    async with db.read() as session:
        s = await billing.stats(session, ADMIN, period=Period.WEEK, start=date(2026, 5, 1), end=date(2026, 6, 1))
    assert (s.jobs, s.active_workspaces, s.machine_hours, s.amount) == (1, 1, Decimal(4), total)
    assert s.users >= 3
    assert s.buckets[0] == date(2026, 4, 27)  # the week holding May 1st starts on Monday April 27th
    assert s.hours_by_gpu_type == {"": [Decimal(0), Decimal(4), Decimal(0), Decimal(0), Decimal(0)]}


async def test_a_job_deleted_before_its_closing_pass_is_closed_where_its_charges_end(
    db: Database, tmp_path: Path
) -> None:
    w = await job_world(db, tmp_path)
    t0 = datetime(2026, 3, 2, 8, tzinfo=UTC)
    job_id = await run_job(db, w, t0, t0 + timedelta(hours=2), [t0 + timedelta(minutes=30)])
    async with db.write() as session:  # it ended at 08:40; deleted before a pass closed its copies
        await session.execute(
            update(Replica).where(Replica.job_id == job_id).values(finished_at=t0 + timedelta(minutes=40))
        )
        await session.execute(update(Job).where(Job.id == job_id).values(status="succeeded"))
    async with db.write() as session:  # deleted by a path that does not meter first (jobs.delete_job does)
        await session.delete(await session.get(Job, job_id))
    async with db.write() as session:
        result = await billing.meter(session, t0 + timedelta(minutes=45), min_period=timedelta(seconds=60))
    assert (result.closed, result.entries) == (2, 0)
    async with db.read() as session:
        copies = (await session.scalars(select(BillingMeter).where(BillingMeter.job_id == job_id))).all()
        assert await billing.verify(session, ADMIN) == []
    assert [(c.closed_at is not None, c.finished_at) for c in copies] == [(True, t0 + timedelta(minutes=30))] * 2
    assert await charged_cents(db) == 200  # 2 copies x weight 2 x 0.5 h x 1/h: the 10 unmetered minutes are lost
