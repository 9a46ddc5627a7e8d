"""The sampler controller on the real local executor (SQLite and PostgreSQL): a running job's replica and its node
become node.* and replica.* series that ``query_series`` returns; one server replica samples at a time."""

from __future__ import annotations

import asyncio
import shlex
import sys
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from aicenter.config import Settings
from aicenter.controllers.sampler import SamplerController
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.executors.local import LocalExecutor
from aicenter.services import inventory, jobs
from aicenter.services.context import Actor
from aicenter.services.monitoring import query_series, series_names
from tests.factories import make_user
from tests.integration.controllers.jobs_helpers import (
    NODE,
    controllers,
    job_spec,
    register_node,
    replicas,
    status_is,
    submit,
    tick_until,
)

# ~0.3 s of CPU, 48 MiB touched, then idle until stopped.
BURN = "sum(range(3 * 10**6)); x = b'x' * (48 << 20); print('ready', flush=True); import time; time.sleep(300)"


@pytest.fixture
async def alice(db: Database, client: httpx.AsyncClient) -> Actor:
    login = await make_user(db, client, "alice")
    await register_node(db)
    return Actor(login.user_id, "alice")


async def _values(db: Database, name: str, **where: object) -> list[float]:
    now = utcnow()
    async with db.read() as session:
        result = await query_series(
            session, None, name=name, start=now - timedelta(minutes=5), end=now + timedelta(minutes=1), **where
        )
    return [p.value for s in result.series for p in s.points]


async def test_a_running_jobs_replica_and_node_become_series(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("burn", f"{shlex.quote(sys.executable)} -c {shlex.quote(BURN)}"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    [row] = await replicas(db, job_id)
    assert row.handle is not None
    output = Path(row.handle["run_dir"]) / "output.log"
    for _ in range(600):  # the command's memory is touched once it printed
        if output.exists() and b"ready" in output.read_bytes():
            break
        await asyncio.sleep(0.1)

    executor = LocalExecutor(tmp_path / "jobs", node_name=NODE)
    sampler = SamplerController(db, settings, {"local": executor}, owner="s1")
    other = SamplerController(db, settings, {"local": executor}, owner="s2")
    await sampler.tick()
    await other.tick()  # the lease is s1's: s2 reads and writes nothing
    assert other.last is None
    await asyncio.sleep(1.0)
    await sampler.tick()  # the second read gives the rates
    assert sampler.last is not None
    assert sampler.last.nodes == 1

    async with db.read() as session:
        node_id = (await inventory.node_ids(session))[NODE]
        names = await series_names(session, None, node_id=node_id)
    for name in ("node.cpu_utilization", "node.memory_used_bytes", "node.memory_total_bytes", "node.disk_used_bytes"):
        assert name in names
    [cpu] = await _values(db, "node.cpu_utilization", node_id=node_id)
    assert 0.0 <= cpu <= 1.0
    assert await _values(db, "node.accelerator_telemetry", node_id=node_id) == [0.0, 0.0]  # no NVML here
    assert not [n for n in names if n.startswith("accelerator.")]

    labels = {"task": "worker", "replica": "0"}
    memory = await _values(db, "replica.memory_bytes", job_id=job_id, labels=labels)
    assert len(memory) == 2
    assert min(memory) >= 48 << 20
    [cores] = await _values(db, "replica.cpu_cores", job_id=job_id, labels=labels)
    assert 0.0 <= cores < 4.0
    async with db.read() as session:
        mine = await series_names(session, alice, job_id=job_id)
    assert {"replica.memory_bytes", "replica.cpu_cores"} <= set(mine)

    async with db.write() as session:
        await jobs.stop_job(session, alice, job_id)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "stopped"), "the job to stop")
    await sampler.tick()  # an ended replica is sampled no more
    assert len(await _values(db, "replica.memory_bytes", job_id=job_id, labels=labels)) == 2


class BrokenEngine:
    """An executor whose engine cannot be reached."""

    name = "slurm"

    async def sample(self, handles: object) -> list[object]:
        raise ConnectionError("slurmctld is not answering")


async def test_an_engine_that_fails_hides_no_other_node(db: Database, settings: Settings, tmp_path: Path) -> None:
    await register_node(db)
    executors = {"slurm": BrokenEngine(), "local": LocalExecutor(tmp_path, node_name=NODE)}
    sampler = SamplerController(db, settings, executors, owner="s1")  # type: ignore[arg-type]
    await sampler.tick()
    assert sampler.last is not None
    assert sampler.last.nodes == 1
    async with db.read() as session:
        node_id = (await inventory.node_ids(session))[NODE]
    assert len(await _values(db, "node.memory_used_bytes", node_id=node_id)) == 1
