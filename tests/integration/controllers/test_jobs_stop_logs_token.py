"""Service behaviour found by the training end-to-end test, on the real controllers and local executor (SQLite and
PostgreSQL): a user's stop overrides a pending preemption; a followed log waits for a replica being launched and
goes on across restarts; the job's token reads its job while the job runs and is revoked when it ends."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from aicenter.config import Settings
from aicenter.core.clock import utcnow
from aicenter.core.errors import Unauthenticated
from aicenter.core.jobs import FailureReason, JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, Replica
from aicenter.executors.base import ReplicaHandle
from aicenter.services import jobs
from aicenter.services.auth import TokenVerifier, list_tokens
from aicenter.services.context import Actor
from aicenter.services.jobs import Content, job_dirs
from aicenter.services.jobs._runtime import materialize_sync
from tests.factories import make_user
from tests.integration.controllers.jobs_helpers import (
    DEADLINE_S,
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


@pytest.fixture
async def alice(db: Database, client: httpx.AsyncClient) -> Actor:
    login = await make_user(db, client, "alice")
    await register_node(db)
    return Actor(login.user_id, "alice")


async def _follow(db: Database, actor: Actor, job_id: int) -> asyncio.Task[bytes]:
    """Start following the latest attempt of replica worker-0 (as the logs route does), collecting its bytes."""
    async with db.read() as session:
        target = await jobs.log_target(session, actor, job_id)

    async def collect() -> bytes:
        return b"".join([chunk async for chunk in jobs.read_logs(target, follow=not target.finished)])

    return asyncio.create_task(collect())


def _texts(output: bytes) -> list[str]:
    return [line.split(" ", 1)[1] for line in output.decode().splitlines()]


async def test_a_users_stop_overrides_a_pending_preemption(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("long", "sleep 60", retry={"on": ["preempted"]}))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    async with db.write() as session:  # the scheduling controller's preemption marker, written as it does
        await session.execute(
            update(Job)
            .where(Job.id == job_id)
            .values(stop_requested_at=utcnow(), failure_reason=FailureReason.PREEMPTED.value, message="preempted")
        )
    async with db.write() as session:
        await jobs.stop_job(session, alice, job_id)
    job = await job_row(db, job_id)
    assert (job.stop_requested_by, job.failure_reason) == (alice.user_id, "stopped")

    await tick_until(scheduler, reconciler, status_is(db, job_id, "stopped", "queued", "failed"), "the job to stop")
    job = await job_row(db, job_id)
    assert (job.status, job.failure_reason, job.restart_count) == ("stopped", "stopped", 0)
    assert "preempted" not in await statuses(db, job_id)


async def test_a_followed_log_waits_for_a_replica_being_launched(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("late", "echo one; sleep 1; echo two"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    placed = status_is(db, job_id, "scheduled")
    deadline = time.monotonic() + DEADLINE_S
    while not await placed():  # the scheduler only: the reconciler would launch it at once
        assert time.monotonic() < deadline, "the job was not placed"
        await scheduler.tick()
    # The reconciler's intent, committed before its launch: the handle is stored with pid 0, no run dir yet.
    dirs = job_dirs(tmp_path / "jobs", job_id)
    materialize_sync(app.state.ctx.store, dirs, Content([], {}))
    async with db.write() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        row = await session.scalar(select(Replica).where(Replica.job_id == job_id))
        assert row is not None
        row.status = "starting"
        row.handle = ReplicaHandle("local", NODE, str(dirs.run_dir(0, "worker", 0)), 0, 0.0).to_dict()
        await jobs.transition(session, job, JobStatus.STARTING, actor=None)

    following = await _follow(db, alice, job_id)
    await asyncio.sleep(0)  # let the follower take its first look: nothing is launched
    assert not following.done()
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")
    output = await asyncio.wait_for(following, DEADLINE_S)
    assert _texts(output) == ["one", "two"]


async def test_a_followed_log_goes_on_across_restarts(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    command = 'echo "attempt $AICENTER_RESTART_COUNT"; test "$AICENTER_RESTART_COUNT" = 1'
    job_id = await submit(db, alice, job_spec("flaky", command, retry={"max_restarts": 1, "on": ["error"]}))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")

    async def launched() -> bool:
        return any(r.handle and r.handle["pid"] for r in await replicas(db, job_id))

    await tick_until(scheduler, reconciler, launched, "the first attempt to launch")
    following = await _follow(db, alice, job_id)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")
    assert (await job_row(db, job_id)).status == "succeeded"
    output = await asyncio.wait_for(following, DEADLINE_S)
    assert _texts(output) == ["attempt 0", "attempt 1"]


def _environ(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return dict(v.decode().split("=", 1) for v in f.read().split(b"\0") if b"=" in v)


async def test_the_jobs_token_reads_its_job_until_the_job_ends(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("api", "sleep 60"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    [row] = await replicas(db, job_id)
    assert row.handle is not None
    run_dir = Path(row.handle["run_dir"])
    # The launcher drops the token from the plan once read: the replica's environment is the one place left.
    assert "AICENTER_TOKEN" not in json.loads((run_dir / "plan.json").read_text())["env"]
    child_pid = json.loads((run_dir / "status.json").read_text())["child_pid"]
    token = _environ(child_pid)["AICENTER_TOKEN"]
    verifier = TokenVerifier(cache_s=0)
    actor, kind = await verifier.verify(db, token)
    assert (actor.user_id, actor.username, kind, actor.job_id) == (alice.user_id, "alice", "job", job_id)
    async with db.read() as session:
        listed = await list_tokens(session, alice)
    assert [t.name for t in listed if t.name.startswith("aicenter job")] == [jobs.job_token_name(job_id)]

    async with db.write() as session:
        await jobs.stop_job(session, alice, job_id)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "stopped"), "the job to stop")
    with pytest.raises(Unauthenticated, match="revoked"):
        await verifier.verify(db, token)
    async with db.write() as session:  # a finished job gets no new token
        job = await session.get(Job, job_id)
        assert job is not None
        assert await jobs.issue_job_token(session, job) == ""
