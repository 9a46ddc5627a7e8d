"""Submitting jobs: references resolved, rows created in one transaction, and every kind of bad input refused
with the field named and nothing created. Also the usage and version-users hooks."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from aicenter.core.catalog import ItemKind
from aicenter.core.errors import AicenterError, Conflict, Forbidden, InUse, NotFound, QuotaExceeded, ValidationFailed
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, Job, JobEvent, Replica
from aicenter.services import catalog, jobs, quotas
from tests.factories import ADMIN
from tests.integration.services.jobs_helpers import GiB, JobWorld, counts, job_world, move, spec, submit


async def test_submit_resolves_references_and_creates_the_rows(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(
        db,
        w.p.alice,
        spec(datasets=[w.dataset_ref], algorithm=w.algorithm_ref, priority="high"),
        overrides=["tasks[0].replicas=3"],
    )
    job = view.job
    assert (job.status, view.workspace_name, view.username, view.pool_name) == ("queued", "alice", "alice", "default")
    assert job.image_version_id is None  # "host"
    assert job.algorithm_version_id is not None
    assert len(job.dataset_version_ids) == 1
    assert job.priority == 30
    assert job.spec["tasks"][0]["replicas"] == 3
    async with db.read() as session:
        replicas = (
            await session.scalars(select(Replica).where(Replica.job_id == job.id).order_by(Replica.index))
        ).all()
        events = (await session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))).all()
    assert [(r.task, r.index, r.attempt, r.status) for r in replicas] == [("worker", i, 0, "pending") for i in range(3)]
    assert {(r.cpu_milli, r.memory_bytes, r.gpu, r.billing_weight) for r in replicas} == {(4000, 8 * GiB, 0, 2.0)}
    assert [(e.from_status, e.to_status, e.actor_name, e.actor_id) for e in events] == [
        (None, "pending", "alice", w.p.alice.user_id),
        ("pending", "queued", "alice", w.p.alice.user_id),
    ]


async def test_submit_accepts_yaml_text_and_explicit_resources(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    text = "name: y\ntasks:\n  - resources: {cpu: 500m, memory: 1Gi}\n    command: [python, -c, 'print(1)']\n"
    view = await submit(db, w.p.alice, text, overrides=["name=from-yaml"])
    assert view.job.name == "from-yaml"
    async with db.read() as session:
        replica = await session.scalar(select(Replica).where(Replica.job_id == view.job.id))
    assert replica is not None
    assert (replica.cpu_milli, replica.memory_bytes, replica.spec_id) == (500, GiB, None)


def _dataset(refs: list[str]) -> Callable[[JobWorld], dict[str, Any]]:
    return lambda w: spec(datasets=[r.format(w=w) for r in refs])


# (id, spec builder, overrides, error type, field, words the message must contain)
BAD: list[tuple[str, Callable[[JobWorld], Any], list[str], type[AicenterError], str, str]] = [
    ("unknown image", lambda w: spec(image="pytorch:1"), [], NotFound, "image", "image: image pytorch:1 not found"),
    ("unknown algorithm", lambda w: spec(algorithm="nope"), [], NotFound, "algorithm", "algorithm nope not found"),
    (
        "unknown dataset version",
        _dataset(["cifar:1", "mnist:9"]),
        [],
        NotFound,
        "datasets[1]",
        "datasets[1]: dataset mnist:9 not found",
    ),
    ("dataset the user cannot see", _dataset(["carol/secret:1"]), [], NotFound, "datasets[0]", "not found"),
    (
        "spec outside the workspace's pools",
        lambda w: spec(tasks=[{"resources": {"spec": "gpu-a"}, "command": "x"}]),
        [],
        ValidationFailed,
        "tasks[0].resources.spec",
        "may not use",
    ),
    (
        "unknown spec",
        lambda w: spec(tasks=[{"resources": {"spec": "huge"}, "command": "x"}]),
        [],
        ValidationFailed,
        "tasks[0].resources.spec",
        'spec "huge" not found',
    ),
    (
        "larger than any node",
        lambda w: spec(tasks=[{"resources": {"cpu": 64, "memory": "1Gi"}, "command": "x"}]),
        [],
        ValidationFailed,
        "tasks[0].resources",
        "needs 64 CPU; the largest node of pool default has 16",
    ),
    (
        "more memory than any node",
        lambda w: spec(tasks=[{"resources": {"cpu": 1, "memory": "1Ti"}, "command": "x"}]),
        [],
        ValidationFailed,
        "tasks[0].resources",
        "needs 1Ti memory",
    ),
    (
        "gpus no node has",
        lambda w: spec(tasks=[{"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1}, "command": "x"}]),
        [],
        ValidationFailed,
        "tasks[0].resources",
        "needs 1 accelerator",
    ),
    (
        "unknown gpu type",
        lambda w: spec(
            tasks=[{"resources": {"cpu": 1, "memory": "1Gi", "gpu": 1, "gpu_type": "tpu-x"}, "command": "x"}]
        ),
        [],
        ValidationFailed,
        "tasks[0].resources.gpu_type",
        'accelerator type "tpu-x" does not exist',
    ),
    (
        "empty command",
        lambda w: spec(tasks=[{"resources": {"spec": "cpu-4"}, "command": "  "}]),
        [],
        ValidationFailed,
        "tasks[0].command",
        "",
    ),
    (
        "bad override",
        lambda w: spec(),
        ["tasks[9].replicas=2"],
        ValidationFailed,
        "--set tasks[9].replicas",
        "index 9 is past the end",
    ),
    ("override with a bad value", lambda w: spec(), ["tasks[0].replicas=0"], ValidationFailed, "tasks[0].replicas", ""),
    ("workspace of others", lambda w: spec(workspace="carol"), [], NotFound, "workspace", "not found"),
]


@pytest.mark.parametrize(
    ("build", "overrides", "error", "field", "words"), [b[1:] for b in BAD], ids=[b[0] for b in BAD]
)
async def test_bad_input_is_refused_naming_the_field_and_creates_nothing(
    db: Database,
    tmp_path: Path,
    build: Callable[[JobWorld], Any],
    overrides: list[str],
    error: type[AicenterError],
    field: str,
    words: str,
) -> None:
    w = await job_world(db, tmp_path)
    before = await counts(db)
    with pytest.raises(error) as caught:
        await submit(db, w.p.alice, build(w), overrides=overrides)
    assert caught.value.details.get("field") == field, caught.value.message
    assert words in caught.value.message
    assert 400 <= caught.value.status < 500
    assert await counts(db) == before


async def test_a_job_larger_than_the_quota_maximum_is_refused(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        await quotas.set_quota(session, ADMIN, w.p.ws, w.default_pool, guaranteed={}, maximum={"cpu": 8})
    await submit(db, w.p.alice, spec())  # 2 x 4 CPU: exactly the maximum
    with pytest.raises(QuotaExceeded) as caught:
        await submit(db, w.p.alice, spec(), overrides=["tasks[0].replicas=3"])
    assert "needs 12 CPU in total; the maximum of workspace alice in pool default is 8" in caught.value.message
    assert caught.value.details["field"] == "tasks"
    assert (await counts(db))[0] == 1


async def test_a_platform_admin_cannot_run_a_users_private_data(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    with pytest.raises(Forbidden) as caught:
        await submit(db, w.p.root, spec(datasets=["alice/cifar:1"]))
    assert caught.value.details["field"] == "datasets[0]"
    assert await counts(db) == (0, 0, 0)


async def test_a_version_used_by_an_unfinished_job_cannot_be_deleted(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec(datasets=[w.dataset_ref]))
    item_id = await _item_id(db, "cifar")
    with pytest.raises(InUse) as caught:
        async with db.write() as session:
            await catalog.delete_version(session, w.p.alice, ItemKind.DATASET, item_id, 1)
    assert f"job {view.job.id} (queued)" in caught.value.message
    await move(db, view.job.id, JobStatus.STOPPED)
    async with db.write() as session:
        await catalog.delete_version(session, w.p.alice, ItemKind.DATASET, item_id, 1)


async def _item_id(db: Database, name: str) -> int:
    async with db.read() as session:
        item_id = await session.scalar(select(CatalogItem.id).where(CatalogItem.name == name))
    assert item_id is not None
    return item_id


async def test_quota_usage_counts_placed_unfinished_replicas(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    async with db.read() as session:
        assert (await quotas.quota_usage(session, w.p.ws, w.default_pool))["cpu"] == 0  # queued: holds nothing
    await move(db, view.job.id, JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    async with db.write() as session:
        for replica in (await session.scalars(select(Replica).where(Replica.job_id == view.job.id))).all():
            replica.node_name, replica.status = "n1", "running"
    async with db.read() as session:
        used = await quotas.quota_usage(session, w.p.ws, w.default_pool)
    assert (used["cpu"], used["memory"], used["accelerators"]) == (8000, 16 * GiB, 0)
    await move(db, view.job.id, JobStatus.SUCCEEDED)
    async with db.write() as session:
        for replica in (await session.scalars(select(Replica).where(Replica.job_id == view.job.id))).all():
            replica.status = "succeeded"
    async with db.read() as session:
        assert (await quotas.quota_usage(session, w.p.ws, w.default_pool))["cpu"] == 0


async def test_an_unready_image_is_a_conflict_naming_the_field(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    image = await catalog_item(db, w)
    with pytest.raises(Conflict) as caught:
        await submit(db, w.p.alice, spec(image=f"#{image}"))
    assert caught.value.details["field"] == "image"
    assert "not ready" in caught.value.message
    assert await counts(db) == (0, 0, 0)


async def catalog_item(db: Database, w: JobWorld) -> int:
    """A venv image version of alice that is not built (pending): its version id."""
    async with db.write() as session:
        item = await catalog.create_item(session, w.p.alice, ItemKind.IMAGE, name="env")
    async with db.write() as session:
        version = await catalog.create_version(
            session, w.p.alice, ItemKind.IMAGE, item.id, metadata={"requirements": ["numpy"]}
        )
    assert version.state != "ready"
    return version.id


async def test_no_job_row_is_left_when_the_transaction_fails_late(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)

    async def submit_then_fail() -> None:
        async with db.write() as session:
            await jobs.submit_job(session, w.p.alice, spec())
            assert await session.scalar(select(Job.id)) is not None
            raise RuntimeError("the caller's transaction fails after the submit")

    with pytest.raises(RuntimeError):
        await submit_then_fail()
    assert await counts(db) == (0, 0, 0)
