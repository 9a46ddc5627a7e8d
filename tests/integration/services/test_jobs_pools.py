"""The pool of a job at submit: named by ``pool:``, else the pool of its resource specs, else the default pool; a
pool the workspace is not granted, one with no node, or one whose nodes are all too small is refused at once."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select

from aicenter.core.errors import ValidationFailed
from aicenter.core.roles import NodeSchedule
from aicenter.db.engine import Database
from aicenter.db.models import Node
from aicenter.services import inventory
from tests.factories import ADMIN
from tests.integration.services.jobs_helpers import GiB, JobWorld, counts, job_world, spec, submit


def explicit(**changes: object) -> dict[str, object]:
    return spec(tasks=[{"resources": {"cpu": 2, "memory": "1Gi"}, "command": "x"}], **changes)


async def _grant_gpu_pool(db: Database, w: JobWorld, *, with_node: bool) -> None:
    async with db.write() as session:
        if with_node:
            session.add(Node(name="g1", cpu_milli=8000, memory_bytes=32 * GiB, labels={"kind": "gpu"}))
        await inventory.grant_pool(session, ADMIN, w.gpu_pool, w.p.ws)


async def test_a_job_runs_in_the_pool_it_names(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    await _grant_gpu_pool(db, w, with_node=True)
    assert (await submit(db, w.p.alice, explicit(pool="gpu"))).pool_name == "gpu"
    assert (await submit(db, w.p.alice, explicit())).pool_name == "default"
    # A resource spec bound to a pool takes the job there when the spec names no pool.
    on_spec = spec(tasks=[{"resources": {"spec": "gpu-a"}, "command": "x"}])
    assert (await submit(db, w.p.alice, on_spec)).pool_name == "gpu"


async def test_a_named_pool_must_agree_with_the_pool_of_a_resource_spec(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    await _grant_gpu_pool(db, w, with_node=True)
    with pytest.raises(ValidationFailed) as caught:
        await submit(db, w.p.alice, spec(pool="default", tasks=[{"resources": {"spec": "gpu-a"}, "command": "x"}]))
    assert caught.value.details["field"] == "tasks[0].resources.spec"
    assert 'spec "gpu-a" is only usable in pool gpu, but the job runs in pool default' in caught.value.message


@pytest.mark.parametrize("name", ["gpu", "nope"])
async def test_a_pool_not_granted_or_unknown_is_refused_alike(db: Database, tmp_path: Path, name: str) -> None:
    w = await job_world(db, tmp_path)
    with pytest.raises(ValidationFailed) as caught:
        await submit(db, w.p.alice, explicit(pool=name))
    assert caught.value.details == {"field": "pool", "pool": name}
    assert f'workspace alice may not use pool "{name}"; pools it may use: default' in caught.value.message
    assert await counts(db) == (0, 0, 0)


async def test_a_pool_with_no_node_is_refused_at_submit(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    await _grant_gpu_pool(db, w, with_node=False)
    with pytest.raises(ValidationFailed) as caught:
        await submit(db, w.p.alice, explicit(pool="gpu"))
    assert "pool gpu has no node" in caught.value.message
    assert caught.value.details["pool"] == "gpu"
    assert await counts(db) == (0, 0, 0)


async def test_a_replica_larger_than_every_node_of_the_named_pool_is_refused(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    await _grant_gpu_pool(db, w, with_node=True)
    # 12 CPUs fit n1 (16, in default only) but not g1 (8), the one node of pool gpu.
    big = spec(pool="gpu", tasks=[{"resources": {"cpu": 12, "memory": "1Gi"}, "command": "x"}])
    with pytest.raises(ValidationFailed) as caught:
        await submit(db, w.p.alice, big)
    assert "needs 12 CPU; the largest node of pool gpu has 8" in caught.value.message
    assert caught.value.details == {
        "field": "tasks[0].resources",
        "pool": "gpu",
        "resource": "cpu",
        "requested": 12_000,
        "largest": 8000,
    }
    await submit(db, w.p.alice, {**big, "pool": "default"})


async def test_a_cordoned_node_still_counts_it_comes_back(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        node_id = await session.scalar(select(Node.id).where(Node.name == "n1"))
        assert node_id is not None
        await inventory.set_node_schedule(session, ADMIN, node_id, NodeSchedule.CORDONED)
    view = await submit(db, w.p.alice, explicit())
    assert (view.job.status, view.pool_name) == ("queued", "default")


async def test_memory_is_compared_in_the_schedulers_whole_mib(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        # meminfo counts KiB: a node of 8 GiB and 512 KiB offers the scheduler 8192 MiB.
        session.add(Node(name="g1", cpu_milli=8000, memory_bytes=8 * GiB + 512 * 1024, labels={"kind": "gpu"}))
        await inventory.grant_pool(session, ADMIN, w.gpu_pool, w.p.ws)
    odd = spec(pool="gpu", tasks=[{"resources": {"cpu": 1, "memory": f"{8 * 2**20 + 1}Ki"}, "command": "x"}])
    with pytest.raises(ValidationFailed) as caught:
        await submit(db, w.p.alice, odd)  # 8 GiB and 1 KiB: 8193 MiB once rounded up, as the scheduler counts it
    assert caught.value.details["resource"] == "memory"
    await submit(db, w.p.alice, {**odd, "tasks": [{"resources": {"cpu": 1, "memory": "8Gi"}, "command": "x"}]})
