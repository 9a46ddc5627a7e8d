"""Series storage on SQLite and PostgreSQL: rollups written with the points, downsampling by tier, errors, the
tenant filter, latest values and names."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import delete, select

from aicenter.core.clock import utcnow
from aicenter.core.errors import RangeTooWide, UnknownSeries, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import Job, MetricPoint, MetricRollup, MetricSeries
from aicenter.services import monitoring
from aicenter.services.monitoring import Sample
from tests.integration.services.catalog_helpers import People, people


def hour_start(moment: datetime) -> datetime:
    return moment.replace(minute=0, second=0, microsecond=0)


async def write(db: Database, samples: list[Sample]) -> int:
    async with db.write() as session:
        return await monitoring.record_samples(session, samples)


async def new_job(db: Database, workspace_id: int, name: str = "train") -> int:
    async with db.write() as session:
        job = Job(workspace_id=workspace_id, name=name)
        session.add(job)
        await session.flush()
        return job.id


def cpu(at: datetime, value: float, node: str = "n1") -> Sample:
    return Sample("node.cpu_utilization", at, value, {"node": node}, node_id=1 if node == "n1" else 2)


async def test_points_and_rollups_are_written_once(db: Database) -> None:
    base = hour_start(utcnow() - timedelta(hours=3))
    samples = [cpu(base + timedelta(seconds=15 * i), i / 100) for i in range(40)]  # 10 minutes
    assert await write(db, samples) == 40
    # The same batch again (a retried write) stores nothing and leaves the rollups as they were.
    assert await write(db, samples) == 0
    async with db.read() as session:
        assert len((await session.scalars(select(MetricSeries))).all()) == 1
        assert len((await session.scalars(select(MetricPoint))).all()) == 40
        rollups = {
            (r.step_s, r.bucket_ms): (r.count, round(r.sum, 6), r.min, r.max)
            for r in await session.scalars(select(MetricRollup))
        }
    start_ms = int(base.timestamp() * 1000)
    assert rollups == {
        (300, start_ms): (20, round(sum(range(20)) / 100, 6), 0.0, 0.19),
        (300, start_ms + 300_000): (20, round(sum(range(20, 40)) / 100, 6), 0.2, 0.39),
        (3600, start_ms): (40, round(sum(range(40)) / 100, 6), 0.0, 0.39),
    }
    # A later batch merges into the same buckets (min/max/sum/count add up).
    assert await write(db, [cpu(base + timedelta(seconds=1), -1.0), cpu(base + timedelta(seconds=2), 9.0)]) == 2
    async with db.read() as session:
        row = (await session.scalars(select(MetricRollup).where(MetricRollup.step_s == 3600))).one()
    assert (row.count, row.min, row.max) == (42, -1.0, 9.0)


async def test_raw_query_downsamples_to_the_step(db: Database) -> None:
    base = hour_start(utcnow() - timedelta(hours=2))
    await write(db, [cpu(base + timedelta(seconds=15 * i), float(i)) for i in range(8)])  # two minutes
    async with db.read() as session:
        result = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=base, end=base + timedelta(minutes=2), step_s=60
        )
    assert (result.step_s, result.resolution) == (60, "raw")
    [series] = result.series
    assert series.labels == {"node": "n1"}
    assert [(p.at, p.value, p.min, p.max) for p in series.points] == [
        (base, 1.5, 0.0, 3.0),
        (base + timedelta(minutes=1), 5.5, 4.0, 7.0),
    ]


async def test_long_ranges_read_the_rollups(db: Database) -> None:
    now = utcnow()
    # On a 6-hour boundary of the epoch, where the 90-day chart's steps start.
    base = datetime.fromtimestamp((now - timedelta(days=20)).timestamp() // 21600 * 21600, UTC)
    # Two points an hour for 10 days: old enough that only rollups cover the range's start.
    await write(db, [cpu(base + timedelta(minutes=30 * i), float(i % 2)) for i in range(480)])
    async with db.read() as session:
        week = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=base, end=base + timedelta(days=10)
        )
        quarter = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=now - timedelta(days=90), end=now
        )
        fine = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=base, end=base + timedelta(hours=2), step_s=300
        )
        odd = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=base, end=base + timedelta(hours=2), step_s=60
        )
    # 10 days / 500 points -> a 30-minute step, which the 5-minute tier divides: one point per step.
    assert (week.resolution, week.step_s) == ("5m", 1800)
    assert [p.value for p in week.series[0].points] == [float(i % 2) for i in range(480)]
    # 90 days / 500 -> 6 hours, from the hourly tier: 40 steps of data, each holding twelve 0s and twelve 1s.
    assert (quarter.resolution, quarter.step_s) == ("1h", 21600)
    points = quarter.series[0].points
    assert len(points) == 40
    assert {(p.value, p.min, p.max) for p in points} == {(0.5, 0.0, 1.0)}
    assert (fine.resolution, fine.step_s) == ("5m", 300)
    assert [p.value for p in fine.series[0].points] == [0.0, 1.0, 0.0, 1.0]
    # Raw points of 20 days ago are past retention: the step is rounded up to the 5-minute tier's.
    assert (odd.resolution, odd.step_s) == ("5m", 300)


async def test_bad_ranges_and_unknown_series(db: Database) -> None:
    now = utcnow()
    await write(db, [cpu(now - timedelta(minutes=1), 0.5)])
    async with db.read() as session:
        with pytest.raises(RangeTooWide) as wide:
            await monitoring.query_series(
                session, None, name="node.cpu_utilization", start=now - timedelta(days=2), end=now, step_s=1
            )
        assert wide.value.details["min_step_s"] == 18  # 172,800 s / 10,000 points
        assert (wide.value.code, wide.value.status) == ("range_too_wide", 400)
        with pytest.raises(UnknownSeries) as unknown:
            await monitoring.query_series(session, None, name="node.nothing", start=now - timedelta(hours=1), end=now)
        assert unknown.value.status == 404
        with pytest.raises(UnknownSeries):  # a label filter that matches nothing
            await monitoring.query_series(
                session,
                None,
                name="node.cpu_utilization",
                start=now - timedelta(hours=1),
                end=now,
                labels={"node": "n9"},
            )
        with pytest.raises(ValidationFailed):
            await monitoring.query_series(session, None, name="node.cpu_utilization", start=now, end=now)


async def test_members_see_cluster_series_and_their_workspaces_only(db: Database) -> None:
    p: People = await people(db)
    now = utcnow()
    alice_job = await new_job(db, p.ws)
    carol_job = await new_job(db, p.carol_ws)
    labels = {"task": "worker", "replica": "0"}
    await write(
        db,
        [
            cpu(now - timedelta(seconds=30), 0.25),
            Sample("report.loss", now - timedelta(seconds=20), 0.9, labels, workspace_id=p.ws, job_id=alice_job),
            Sample("report.loss", now - timedelta(seconds=10), 0.7, labels, workspace_id=p.ws, job_id=alice_job),
            Sample("report.acc", now - timedelta(seconds=10), 0.3, labels, workspace_id=p.carol_ws, job_id=carol_job),
        ],
    )
    async with db.read() as session:
        assert await monitoring.series_names(session, p.bob) == ["node.cpu_utilization", "report.loss"]
        assert await monitoring.series_names(session, p.carol) == ["node.cpu_utilization", "report.acc"]
        assert await monitoring.series_names(session, p.root) == [
            "node.cpu_utilization",
            "report.acc",
            "report.loss",
        ]
        assert await monitoring.series_names(session, None, prefix="report.") == ["report.acc", "report.loss"]
        assert await monitoring.series_names(session, p.root, job_id=carol_job) == ["report.acc"]
        with pytest.raises(UnknownSeries):
            await monitoring.query_series(
                session, p.carol, name="report.loss", start=now - timedelta(hours=1), end=now, job_id=alice_job
            )
        mine = await monitoring.query_series(
            session, p.bob, name="report.loss", start=now - timedelta(hours=1), end=now + timedelta(seconds=1)
        )
        assert [(s.job_id, s.workspace_id, s.labels) for s in mine.series] == [(alice_job, p.ws, labels)]
        latest = await monitoring.latest_values(session, p.alice)
        assert [(v.name, v.value) for v in latest] == [("node.cpu_utilization", 0.25), ("report.loss", 0.7)]
        assert [v.value for v in await monitoring.latest_values(session, None, names=["report.acc"])] == [0.3]
        assert await monitoring.latest_values(session, None, prefix="node.", max_age_s=5) == []
        [node] = await monitoring.latest_values(session, None, node_id=1, max_age_s=600)
        assert node.labels == {"node": "n1"}
        assert node.at.tzinfo is UTC


async def test_non_finite_values_are_dropped_and_names_are_checked(db: Database) -> None:
    now = utcnow()
    assert await write(db, [cpu(now, float("nan")), cpu(now, float("inf"))]) == 0
    with pytest.raises(ValidationFailed):
        await write(db, [Sample("x" * 201, now, 1.0)])
    with pytest.raises(ValidationFailed):
        await write(db, [Sample("naive", datetime(2026, 1, 1), 1.0)])


async def test_a_deleted_series_is_created_again_despite_the_id_cache(db: Database) -> None:
    """Another server's prune (or a job's deletion) removes a series this process has cached: the cached id then
    fails the points' foreign key, and the batch resolves the series afresh instead of writing into another."""
    p: People = await people(db)
    now = utcnow()
    await write(db, [cpu(now - timedelta(seconds=3), 1.0)])
    async with db.write() as session:
        [old_id] = await session.scalars(select(MetricSeries.id))
        await session.execute(delete(MetricSeries))  # not through this process: its id cache still holds old_id
    job_id = await new_job(db, p.ws)
    job_sample = Sample("report.loss", now, 0.5, {"task": "worker", "replica": "0"}, p.ws, job_id)
    assert await write(db, [job_sample, cpu(now - timedelta(seconds=2), 2.0)]) == 2
    async with db.read() as session:
        rows = dict((await session.execute(select(MetricSeries.name, MetricSeries.id))).all())
        values = dict((await session.execute(select(MetricPoint.series_id, MetricPoint.value))).all())
    assert old_id not in rows.values()  # ids are never reused
    assert values == {rows["node.cpu_utilization"]: 2.0, rows["report.loss"]: 0.5}
    # A job's series go with the job.
    async with db.write() as session:
        await session.delete(await session.get(Job, job_id))
    async with db.read() as session:
        assert list(await session.scalars(select(MetricSeries.name))) == ["node.cpu_utilization"]


async def test_equal_names_and_labels_of_two_workspaces_stay_two_series(db: Database) -> None:
    p: People = await people(db)
    now = utcnow()
    await write(
        db,
        [
            Sample("workspace.used", now, 1.0, workspace_id=p.ws),
            Sample("workspace.used", now, 2.0, workspace_id=p.carol_ws),
        ],
    )
    async with db.read() as session:
        bob = await monitoring.latest_values(session, p.bob, names=["workspace.used"])
        everyone = await monitoring.latest_values(session, None, names=["workspace.used"])
    assert [(v.workspace_id, v.value) for v in bob] == [(p.ws, 1.0)]
    assert sorted(v.value for v in everyone) == [1.0, 2.0]
