"""What jobs report becomes series: the ingest controller reads real ``metrics.jsonl`` files written by
``aicenter.runtime.report`` forward from committed cursors; retention prunes each tier."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.controllers.metrics_series import MetricsIngestController, MetricsPruneController
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job, MetricIngestCursor, MetricPoint, MetricRollup, MetricSeries
from aicenter.runtime.report import report
from aicenter.services import monitoring
from aicenter.services.monitoring import Retention, Sample
from tests.integration.services.catalog_helpers import people


async def new_job(db: Database, workspace_id: int, status: str = "running") -> int:
    async with db.write() as session:
        job = Job(workspace_id=workspace_id, name="train", status=status)
        session.add(job)
        await session.flush()
        return job.id


def reporting(monkeypatch: pytest.MonkeyPatch, jobs: Path, job_id: int, replica: str, attempt: int = 0) -> Path:
    run_dir = jobs / str(job_id) / "runs" / str(attempt) / replica
    run_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("AICENTER_RUN_DIR", str(run_dir))
    return run_dir / "metrics.jsonl"


def report_apart(**metrics: float) -> None:
    report(**metrics)  # type: ignore[arg-type]
    time.sleep(0.002)  # a millisecond apart, as a real training step is: the times below are the reported ones


async def loss_points(db: Database, job_id: int) -> list[tuple[str, float]]:
    """The raw points of the job's report.loss series, as (replica, value) in time order per replica."""
    async with db.read() as session:
        rows = await session.execute(
            select(MetricSeries.labels, MetricPoint.value)
            .join(MetricPoint, MetricPoint.series_id == MetricSeries.id)
            .where(MetricSeries.job_id == job_id, MetricSeries.name == "report.loss")
            .order_by(MetricSeries.labels_key, MetricPoint.at_ms)
        )
        return [(f"{labels['task']}-{labels['replica']}", value) for labels, value in rows]


async def test_reported_metrics_are_ingested_once_across_restarts(
    db: Database, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = await people(db)
    job_id = await new_job(db, p.ws)
    finished_long_ago = await new_job(db, p.ws, status="succeeded")
    jobs = tmp_path / "jobs"
    config = settings.model_copy(update={"jobs_dir": jobs})
    metrics = reporting(monkeypatch, jobs, job_id, "worker-0")
    report_apart(step=1, loss=0.5)
    report_apart(step=2, loss=0.25, accuracy=0.75)
    reporting(monkeypatch, jobs, job_id, "worker-1")
    report_apart(loss=0.125)  # no step: no report.step point
    reporting(monkeypatch, jobs, finished_long_ago, "worker-0")
    report_apart(loss=9.0)  # a job that is not running: never read
    # A line being written (no newline yet) is left for a later round.
    with metrics.open("ab") as f:
        f.write(b'{"at": "2026-01-01T00:00:00Z", "loss": 1')

    first = MetricsIngestController(db, config, owner="first")
    await first.tick()
    assert first.points == 6  # worker-0: step, loss twice + accuracy; worker-1: loss
    assert await loss_points(db, job_id) == [("worker-0", 0.5), ("worker-0", 0.25), ("worker-1", 0.125)]
    async with db.read() as session:
        names = await monitoring.series_names(session, p.alice, job_id=job_id)
        cursor = await session.scalar(
            select(MetricIngestCursor.offset).where(MetricIngestCursor.path.like("%worker-0%"))
        )
        workspaces = set(await session.scalars(select(MetricSeries.workspace_id)))
    assert names == ["report.accuracy", "report.loss", "report.step"]
    assert cursor == metrics.stat().st_size - len(b'{"at": "2026-01-01T00:00:00Z", "loss": 1')
    assert workspaces == {p.ws}
    await first.tick()
    assert first.points == 6

    # A restart: a new process starts from the committed cursors and reads only what came since.
    await first.stop()
    with metrics.open("ab") as f:
        f.write(b"}\n")
    second = MetricsIngestController(db, config, owner="second")
    await second.tick()
    assert second.points == 1
    # The file's order is the truth: a line stamped before the line above it follows it by a millisecond.
    assert await loss_points(db, job_id) == [
        ("worker-0", 0.5),
        ("worker-0", 0.25),
        ("worker-0", 1.0),
        ("worker-1", 0.125),
    ]
    async with db.read() as session:
        total = await session.scalar(select(func.count()).select_from(MetricPoint))
    assert total == 7
    # Another live replica does nothing while the lease is held.
    third = MetricsIngestController(db, config, owner="third")
    reporting(monkeypatch, jobs, job_id, "worker-0")
    report_apart(loss=0.0625)
    await third.tick()
    assert third.points == 0
    await second.tick()
    assert second.points == 2
    assert (await loss_points(db, job_id))[-2] == ("worker-0", 0.0625)
    await second.stop()


async def test_steps_reported_within_one_millisecond_are_all_kept_in_order(
    db: Database, settings: Settings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A point is kept per series and millisecond, and a tight loop reports many steps in one: each is moved to
    the next free millisecond, also across two rounds of the ingest."""
    p = await people(db)
    job_id = await new_job(db, p.ws)
    jobs = tmp_path / "jobs"
    config = settings.model_copy(update={"jobs_dir": jobs})
    reporting(monkeypatch, jobs, job_id, "worker-0")
    for step in range(1, 51):
        report(step=step, loss=1.0 / step)
    ingest = MetricsIngestController(db, config, owner="tight")
    await ingest.tick()
    for step in range(51, 101):
        report(step=step, loss=1.0 / step)
    await ingest.tick()
    await ingest.stop()
    assert [value for _, value in await loss_points(db, job_id)] == [1.0 / step for step in range(1, 101)]


async def test_retention_prunes_each_tier(db: Database, settings: Settings) -> None:
    now = utcnow().replace(minute=0, second=0, microsecond=0)
    old = now - timedelta(days=2)
    async with db.write() as session:
        await monitoring.record_samples(
            session,
            [Sample("node.cpu_utilization", old + timedelta(minutes=i), 0.5, {"node": "n1"}) for i in range(10)]
            + [Sample("node.cpu_utilization", now, 0.5, {"node": "n1"})],
        )
    retention = Retention(raw_s=86400, five_min_s=10 * 86400, hour_s=100 * 86400)

    async def prune(at_offset: timedelta) -> monitoring.PruneResult:
        async with db.write() as session:
            return await monitoring.prune_series(session, retention, now=now + at_offset)

    async def rows() -> tuple[int, int, int]:
        async with db.read() as session:
            return (
                int(await session.scalar(select(func.count()).select_from(MetricPoint)) or 0),
                int(
                    await session.scalar(
                        select(func.count()).select_from(MetricRollup).where(MetricRollup.step_s == 300)
                    )
                    or 0
                ),
                int(
                    await session.scalar(
                        select(func.count()).select_from(MetricRollup).where(MetricRollup.step_s == 3600)
                    )
                    or 0
                ),
            )

    assert await rows() == (11, 3, 2)
    assert await prune(timedelta(0)) == monitoring.PruneResult(points=10, rollups=0, series=0)
    assert await rows() == (1, 3, 2)
    # Raw points are gone, but the 5-minute tier still answers for two days ago.
    async with db.read() as session:
        result = await monitoring.query_series(
            session, None, name="node.cpu_utilization", start=old, end=old + timedelta(minutes=10)
        )
    assert result.resolution == "5m"
    assert [p.value for p in result.series[0].points] == [0.5, 0.5]
    assert await prune(timedelta(days=9)) == monitoring.PruneResult(points=1, rollups=2, series=0)
    assert await prune(timedelta(days=99)) == monitoring.PruneResult(points=0, rollups=2, series=0)
    assert await prune(timedelta(days=101)) == monitoring.PruneResult(points=0, rollups=1, series=1)
    assert await rows() == (0, 0, 0)
    # The prune controller applies the settings' retention under its lease (nothing is old enough here).
    controller = MetricsPruneController(db, settings, owner="pruner")
    await controller.tick()
    assert controller.last == monitoring.PruneResult(points=0, rollups=0, series=0)
