"""Helpers of the job controller tests: a local node, jobs submitted through the service, ticks until done."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aicenter.config import Settings
from aicenter.controllers.jobs import JobReconciler
from aicenter.controllers.scheduling import SchedulingController
from aicenter.db.engine import Database
from aicenter.db.models import Job, JobEvent, Replica
from aicenter.executors import HostInfo
from aicenter.executors.local import LocalExecutor
from aicenter.services import inventory, jobs
from aicenter.services.context import Actor
from aicenter.storage import BlobStore

GIB = 2**30
NODE = "jobs-test-node"
DEADLINE_S = 120.0  # a busy 2-core machine; the loops below poll and return as soon as the state is reached


async def register_node(db: Database, name: str = NODE, *, cpus: int = 8, memory_gib: int = 16) -> None:
    async with db.write() as session:
        await inventory.register_host(
            session,
            HostInfo(
                name=name, address="127.0.0.1", executor="local", cpu_milli=cpus * 1000, memory_bytes=memory_gib * GIB
            ),
        )


async def submit(db: Database, actor: Actor, spec: dict[str, Any]) -> int:
    async with db.write() as session:
        view = await jobs.submit_job(session, actor, spec)
        return view.job.id


def job_spec(name: str, command: str | list[str], *, replicas: int = 1, cpu: str = "1", **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [
            {"name": "worker", "replicas": replicas, "resources": {"cpu": cpu, "memory": "256Mi"}, "command": command}
        ],
        **extra,
    }


def controllers(
    db: Database, store: BlobStore, settings: Settings, jobs_dir: Path, *, node: str = NODE, owner: str = "test"
) -> tuple[SchedulingController, JobReconciler]:
    settings = settings.model_copy(update={"jobs_dir": jobs_dir, "stop_grace_s": 5.0})
    scheduler = SchedulingController(db, settings, owner=owner)
    reconciler = JobReconciler(
        db, store, settings, executors={"local": LocalExecutor(jobs_dir, node_name=node)}, owner=owner
    )
    return scheduler, reconciler


async def tick_until(
    scheduler: SchedulingController,
    reconciler: JobReconciler,
    done: Callable[[], Awaitable[bool]],
    what: str,
    *,
    deadline_s: float = DEADLINE_S,
) -> None:
    """Tick both controllers until ``done()``; fails with ``what`` past the deadline."""
    deadline = time.monotonic() + deadline_s
    while not await done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await scheduler.tick()
        await reconciler.tick()
        await asyncio.sleep(0.05)


async def job_row(db: Database, job_id: int) -> Job:
    async with db.read() as session:
        job = await session.get(Job, job_id)
    assert job is not None
    return job


async def replicas(db: Database, job_id: int) -> list[Replica]:
    async with db.read() as session:
        rows = await session.scalars(
            select(Replica).where(Replica.job_id == job_id).order_by(Replica.attempt, Replica.task, Replica.index)
        )
        return list(rows.all())


async def statuses(db: Database, job_id: int) -> list[str]:
    async with db.read() as session:
        rows = await session.scalars(select(JobEvent.to_status).where(JobEvent.job_id == job_id).order_by(JobEvent.id))
        return list(rows.all())


def status_is(db: Database, job_id: int, *wanted: str) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return (await job_row(db, job_id)).status in wanted

    return check


def handle(replica: Replica) -> dict[str, Any]:
    """The replica's stored handle (it must have one)."""
    assert replica.handle is not None
    return replica.handle
