"""Shared set-up of the jobs service and API tests: people (from the catalog helpers), nodes, specs, pools,
catalog versions to refer to, and a minimal spec."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from aicenter.core.catalog import ItemKind
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, JobEvent, Node, Pool, Replica, ResourceSpec
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.integration.services.catalog_helpers import People, entries, make_store, new_item, new_version, people

GiB = 2**30


@dataclass
class JobWorld:
    p: People
    default_pool: int
    gpu_pool: int  # not granted to anyone
    dataset_ref: str  # alice's dataset version, "cifar:1"
    algorithm_ref: str
    carol_dataset_id: int  # carol's private dataset item


async def job_world(db: Database, tmp_path: Path) -> JobWorld:
    """alice and bob in workspace ws (default pool: one 16-CPU 64 GiB node); spec cpu-4 usable everywhere;
    spec gpu-a in pool gpu, which no workspace may use."""
    p = await people(db)
    async with db.write() as session:
        default = await ensure_default_pool(session)
        gpu = Pool(name="gpu", selector={"kind": "gpu"})
        session.add_all([gpu, Node(name="n1", cpu_milli=16_000, memory_bytes=64 * GiB, labels={})])
        await session.flush()
        session.add_all(
            [
                ResourceSpec(
                    name="cpu-4", cpu_milli=4000, memory_bytes=8 * GiB, billing_weight=2.0, price_per_hour=Decimal(1)
                ),
                ResourceSpec(
                    name="gpu-a", cpu_milli=4000, memory_bytes=8 * GiB, pool_id=gpu.id, price_per_hour=Decimal(5)
                ),
            ]
        )
        ids = default.id, gpu.id
    store = make_store(tmp_path)
    dataset = await new_item(db, p.alice, "cifar")
    await new_version(db, p.alice, dataset.id, entries(store, {"a.txt": b"a"}))
    algorithm = await new_item(db, p.alice, "resnet", kind=ItemKind.ALGORITHM)
    await new_version(db, p.alice, algorithm.id, entries(store, {"train.py": b"print(1)"}), kind=ItemKind.ALGORITHM)
    secret = await new_item(db, p.carol, "secret")
    await new_version(db, p.carol, secret.id, entries(store, {"s.txt": b"s"}))
    return JobWorld(p, ids[0], ids[1], "cifar:1", "resnet:1", secret.id)


def spec(**changes: Any) -> dict[str, Any]:
    """A one-task job of alice's workspace on spec cpu-4; ``changes`` replace top-level fields."""
    base: dict[str, Any] = {
        "name": "train-1",
        "tasks": [{"name": "worker", "replicas": 2, "resources": {"spec": "cpu-4"}, "command": "echo hi"}],
    }
    return {**base, **changes}


async def submit(db: Database, actor: Actor, source: Any, **kwargs: Any) -> jobs.JobView:
    async with db.write() as session:
        return await jobs.submit_job(session, actor, source, **kwargs)


async def move(db: Database, job_id: int, *path: JobStatus, **kwargs: Any) -> Job:
    """Walk a job along ``path`` through the one transition function, as a controller would."""
    async with db.write() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        for status in path:
            await jobs.transition(session, job, status, actor=None, **kwargs)
        return job


async def counts(db: Database) -> tuple[int, int, int]:
    """Rows of jobs, replicas and events."""
    async with db.read() as session:
        return (
            int(await session.scalar(select(func.count()).select_from(Job)) or 0),
            int(await session.scalar(select(func.count()).select_from(Replica)) or 0),
            int(await session.scalar(select(func.count()).select_from(JobEvent)) or 0),
        )
