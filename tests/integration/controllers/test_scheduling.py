"""The scheduling controller against the database, on SQLite and PostgreSQL: placements through
``transition``, pending reasons written only when they change, preemption as a graceful stop request carried out
by the reconciler, and one scheduler at a time (named lease): one that lost the lease while it computed writes
nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from aicenter.config import Settings
from aicenter.controllers.scheduling import LEASE_NAME, SchedulingController, TickStats
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.leases import NamedLease
from aicenter.scheduler import CycleResult
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.monitoring import ProcessTelemetry
from tests.factories import make_user
from tests.integration.controllers.jobs_helpers import (
    NODE,
    controllers,
    job_row,
    job_spec,
    register_node,
    replicas,
    status_is,
    statuses,
    submit,
    tick_until,
)


def telemetry_value(telemetry: ProcessTelemetry, name: str, **labels: str) -> float:
    """A sample of the controller's telemetry as /metrics would expose it (0 when absent)."""
    registry = CollectorRegistry()
    for collector in telemetry.collectors():
        registry.register(collector)
    return registry.get_sample_value(name, labels) or 0.0


@pytest.fixture
async def alice(db: Database, client: httpx.AsyncClient) -> Actor:
    login = await make_user(db, client, "alice")
    await register_node(db, cpus=8)
    return Actor(login.user_id, "alice")


async def test_places_what_fits_and_explains_the_rest_once(db: Database, settings: Settings, alice: Actor) -> None:
    first = await submit(db, alice, job_spec("big-1", "sleep 30", cpu="6"))
    second = await submit(db, alice, job_spec("big-2", "sleep 30", cpu="6"))
    scheduler = SchedulingController(db, settings, owner="a")
    await scheduler.tick()
    assert scheduler.last.placed == [first]
    job = await job_row(db, first)
    assert (job.status, job.pending_reason) == ("scheduled", "")
    assert await statuses(db, first) == ["pending", "queued", "scheduled"]
    [replica] = await replicas(db, first)
    assert (replica.node_name, replica.devices, replica.status) == (NODE, [], "pending")
    waiting = await job_row(db, second)
    assert waiting.status == "queued"
    assert "cpu" in waiting.pending_reason.lower()
    assert scheduler.last.reasons_written == 1

    # Nothing changed: no placement, no write of the same reason again.
    await scheduler.tick()
    assert (scheduler.last.placed, scheduler.last.reasons_written) == ([], 0)
    assert (await job_row(db, second)).pending_reason == waiting.pending_reason
    # Both cycles timed, the one start counted under the job's pool (the Prometheus families of /metrics).
    telemetry = scheduler.telemetry
    assert telemetry_value(telemetry, "aicenter_scheduler_cycle_duration_seconds_count") == 2
    assert telemetry_value(telemetry, "aicenter_scheduler_decisions_total", pool="default", kind="started") == 1


async def test_one_scheduler_at_a_time(db: Database, settings: Settings, alice: Actor) -> None:
    holder = SchedulingController(db, settings, owner="a")
    other = SchedulingController(db, settings, owner="b")
    await holder.tick()
    job_id = await submit(db, alice, job_spec("one", "true"))
    await other.tick()
    assert other.last.placed == []
    assert (await job_row(db, job_id)).status == "queued"
    # Only the lease holder's cycles are timed.
    assert telemetry_value(other.telemetry, "aicenter_scheduler_cycle_duration_seconds_count") == 0
    await holder.tick()
    assert holder.last.placed == [job_id]
    await holder.release_lease()
    await other.tick()  # takes over once the lease is given back
    assert other._lease is not None


async def test_preemption_stops_the_victim_gracefully_and_requeues_it(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    settings = settings.model_copy(update={"scheduler_policy": "priority"})
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    # The victim traps SIGTERM, "checkpoints" and exits: the grace period is used, not the SIGKILL.
    victim_cmd = f"trap 'echo checkpoint > {tmp_path}/ckpt; exit 0' TERM; while true; do sleep 0.1; done"
    victim = await submit(db, alice, job_spec("low", victim_cmd, cpu="6", priority="low"))
    await tick_until(scheduler, reconciler, status_is(db, victim, "running"), "the victim to run")
    urgent = await submit(db, alice, job_spec("urgent", "true", cpu="6", priority="urgent"))
    await tick_until(scheduler, reconciler, status_is(db, urgent, "succeeded"), "the urgent job to run")
    history = await statuses(db, victim)
    assert history[:7] == ["pending", "queued", "scheduled", "starting", "running", "preempted", "queued"]
    assert (tmp_path / "ckpt").read_text() == "checkpoint\n"
    preempted = telemetry_value(
        scheduler.telemetry, "aicenter_scheduler_decisions_total", pool="default", kind="preempted"
    )
    assert preempted == 1
    job = await job_row(db, victim)
    assert (job.restart_count, job.counted_restarts, job.stop_requested_at) == (1, 0, None)
    first = [r for r in await replicas(db, victim) if r.attempt == 0]
    assert [(r.status, r.reason) for r in first] == [("stopped", "preempted")]
    # It comes back once the urgent job is done, as attempt 1.
    await tick_until(scheduler, reconciler, status_is(db, victim, "running"), "the victim to run again")
    async with db.write() as session:
        await jobs.stop_job(session, alice, victim)
    await tick_until(scheduler, reconciler, status_is(db, victim, "stopped"), "the victim to stop")


async def test_a_scheduler_that_loses_its_lease_while_it_computes_writes_nothing(
    db: Database, settings: Settings, alice: Actor
) -> None:
    short_ttl_s = 0.3

    class LosesItMidTick(SchedulingController):
        """Another replica takes the lease after this one read and decided, before it writes."""

        async def _apply(self, lease: NamedLease, result: CycleResult, stats: TickStats) -> None:
            await asyncio.sleep(short_ttl_s + 0.2)
            assert await leases.acquire(db, LEASE_NAME, "other", ttl_s=30) is not None
            await super()._apply(lease, result, stats)

    holder = LosesItMidTick(db, settings, owner="a")
    holder.lease_ttl_s = short_ttl_s
    first = await submit(db, alice, job_spec("fits", "true", cpu="6"))
    second = await submit(db, alice, job_spec("waits", "true", cpu="6"))
    await holder.tick()
    assert holder.last.placed == []
    assert holder._lease is None
    for job_id in (first, second):
        job = await job_row(db, job_id)
        assert (job.status, job.pending_reason) == ("queued", "")
        assert await statuses(db, job_id) == ["pending", "queued"]
