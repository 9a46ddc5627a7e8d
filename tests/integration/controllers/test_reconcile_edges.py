"""The reconciler's loop (load, observe, decide, apply, act) on the real database with an in-memory executor:
the edges a real engine makes hard to time. Lease lost in the middle of a start, a person's stop racing a
preemption, a lost node, a launch that fails from starting."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import update

from aicenter.config import Settings
from aicenter.controllers.jobs import JobReconciler
from aicenter.controllers.scheduling import SchedulingController
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job
from aicenter.executors.base import ReplicaHandle, ReplicaPlan
from aicenter.services import jobs
from aicenter.services.context import Actor
from tests.factories import make_user
from tests.integration.controllers.fake_executor import FakeExecutor
from tests.integration.controllers.jobs_helpers import (
    job_row,
    job_spec,
    register_node,
    replicas,
    status_is,
    statuses,
    submit,
    tick_until,
)


@pytest.fixture
async def alice(db: Database, client: httpx.AsyncClient) -> Actor:
    login = await make_user(db, client, "alice")
    await register_node(db)
    return Actor(login.user_id, "alice")


def loop(
    app: FastAPI, db: Database, settings: Settings, tmp_path: Path, fake: FakeExecutor, owner: str = "test"
) -> tuple[SchedulingController, JobReconciler]:
    settings = settings.model_copy(update={"jobs_dir": tmp_path / "jobs", "stop_grace_s": 0.1})
    scheduler = SchedulingController(db, settings, owner=owner)
    reconciler = JobReconciler(db, app.state.ctx.store, settings, executors={"local": fake}, owner=owner)
    return scheduler, reconciler


async def test_a_lease_lost_mid_start_is_finished_by_the_next_holder_without_a_second_process(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("two", "train", replicas=2))
    fake = FakeExecutor()

    async def taken_over(plan: ReplicaPlan) -> None:  # another reconciler claims the job while this one launches
        async with db.write() as session:
            await session.execute(update(Job).where(Job.id == job_id).values(lock_token="other", lock_owner="other"))

    fake.on_launch = taken_over
    scheduler, reconciler = loop(app, db, settings, tmp_path, fake)
    await scheduler.tick()
    await reconciler.tick()
    # The launches happened, but their handles were not written by a pass that no longer held the job.
    rows = await replicas(db, job_id)
    assert [(r.status, (r.handle or {}).get("pid")) for r in rows] == [("starting", 0), ("starting", 0)]
    assert len(fake.started) == 2

    # The other holder's lease ends; the next pass launches the intents again, which adopts them.
    fake.on_launch = None
    async with db.write() as session:
        await session.execute(
            update(Job).where(Job.id == job_id).values(lock_token=None, lock_owner=None, lock_expires_at=None)
        )
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    assert len(fake.started) == 2  # no second process for either replica
    assert fake.launches == 4
    assert {r.handle["pid"] for r in await replicas(db, job_id) if r.handle} == {h.pid for h in fake.started.values()}


async def test_a_persons_stop_during_a_preemption_is_not_lost_to_the_requeue(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("victim", "train"))
    fake = FakeExecutor()
    scheduler, reconciler = loop(app, db, settings, tmp_path, fake)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    async with db.write() as session:  # the scheduler's preemption marker
        await session.execute(
            update(Job).where(Job.id == job_id).values(stop_requested_at=utcnow(), failure_reason="preempted")
        )

    async def user_stops(handle: ReplicaHandle) -> None:  # while the preempted replica is being stopped
        async with db.write() as session:
            await jobs.stop_job(session, alice, job_id)

    fake.on_stop = user_stops
    await tick_until(scheduler, reconciler, status_is(db, job_id, "stopped", "queued", "failed"), "the job to end")
    job = await job_row(db, job_id)
    assert (job.status, job.failure_reason) == ("stopped", "stopped")
    assert await statuses(db, job_id) == [
        "pending",
        "queued",
        "scheduled",
        "starting",
        "running",
        "preempted",
        "stopped",
    ]
    [row] = await replicas(db, job_id)
    assert (row.status, row.reason) == ("stopped", "preempted")


async def test_a_lost_node_restarts_the_gang_when_its_policy_says_so(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    spec = job_spec("lost", "train", replicas=2, retry={"max_restarts": 1, "on": ["node_lost"]})
    job_id = await submit(db, alice, spec)
    fake = FakeExecutor()
    scheduler, reconciler = loop(app, db, settings, tmp_path, fake)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    [_, second] = await replicas(db, job_id)
    assert second.handle is not None
    fake.lose(second.handle["run_dir"])

    async def second_attempt_runs() -> bool:
        job = await job_row(db, job_id)
        return job.status == "running" and job.restart_count == 1

    await tick_until(scheduler, reconciler, second_attempt_runs, "the second attempt to run")
    job = await job_row(db, job_id)
    assert job.counted_restarts == 1
    rows = await replicas(db, job_id)
    assert [(r.attempt, r.index, r.status, r.reason) for r in rows] == [
        (0, 0, "stopped", "stopped"),
        (0, 1, "lost", "node_lost"),
        (1, 0, "running", None),
        (1, 1, "running", None),
    ]
    history = await statuses(db, job_id)
    assert history[-5:] == ["restarting", "queued", "scheduled", "starting", "running"]


async def test_a_launch_that_fails_stops_the_launched_peer_before_the_job_fails(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("half", "train", replicas=2))
    fake = FakeExecutor(fail_launch={"worker-1"})
    scheduler, reconciler = loop(app, db, settings, tmp_path, fake)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "failed"), "the job to fail")
    job = await job_row(db, job_id)
    assert (job.failure_reason, job.message) == ("launch_failed", "worker/1 failed: launch_failed")
    first, second = await replicas(db, job_id)
    assert (first.status, second.status, second.reason) == ("stopped", "failed", "launch_failed")
    assert first.handle is not None
    assert fake.stopped == [first.handle["run_dir"]]
