"""The job reconciler with the scheduling controller on the real local executor, on SQLite and PostgreSQL:
launch, watch, success with an output model and lineage, failure with the exit code, stop, adoption."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from aicenter.config import Settings
from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion
from aicenter.services import jobs
from aicenter.services.context import Actor
from tests.factories import make_user
from tests.integration.controllers.jobs_helpers import (
    controllers,
    handle,
    job_row,
    job_spec,
    register_node,
    replicas,
    status_is,
    statuses,
    submit,
    tick_until,
)
from tests.support.extras import skip_without

PY = sys.executable


@pytest.fixture
async def alice(db: Database, client: httpx.AsyncClient) -> Actor:
    login = await make_user(db, client, "alice")
    await register_node(db)
    return Actor(login.user_id, "alice")


async def test_job_runs_succeeds_and_saves_its_output_model(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    code = (
        "import os; open(os.environ['AICENTER_OUTPUT_DIR'] + '/model.txt', 'w').write('w=1'); "
        "from aicenter.runtime import report; report(step=1, loss=0.5); report(step=2, loss=0.25, acc=0.9); "
        "print('hi', os.environ['AICENTER_RESTART_COUNT'])"
    )
    command = [PY, "-c", code]
    job_id = await submit(db, alice, job_spec("ok", command, output_model="tiny"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")

    job = await job_row(db, job_id)
    assert job.status == "succeeded", job.message
    history = await statuses(db, job_id)
    # A command that ends before a pass sees it running goes starting -> succeeded directly.
    assert history in (
        ["pending", "queued", "scheduled", "starting", "running", "succeeded"],
        ["pending", "queued", "scheduled", "starting", "succeeded"],
    )
    [replica] = await replicas(db, job_id)
    assert (replica.status, replica.exit_code, replica.node_name) == ("succeeded", 0, "jobs-test-node")
    assert replica.started_at is not None
    assert replica.finished_at is not None
    assert replica.finished_at >= replica.started_at
    assert replica.billing_weight == 1.0
    log = (Path(handle(replica)["run_dir"]) / "output.log").read_text()
    assert log.endswith("hi 0\n")

    # The output became a version of alice's model "tiny", with lineage, named as she writes it.
    assert job.output_model_version_id is not None
    assert job.message == "saved model tiny:1"
    async with db.read() as session:
        version = await session.get(CatalogVersion, job.output_model_version_id)
        assert version is not None
        item = await session.get(CatalogItem, version.item_id)
    assert item is not None
    assert (item.kind, item.name, item.owner_id) == ("model", "tiny", alice.user_id)
    assert version.meta["lineage"] == {"job_id": job_id, "algorithm_version_id": None, "dataset_version_ids": []}
    assert version.file_count == 1
    assert version.meta["metrics"] == {"loss": 0.25, "acc": 0.9}  # the final value of each reported metric

    # Idempotent: nothing more happens on later ticks (the finished job is not claimed).
    await scheduler.tick()
    await reconciler.tick()
    assert len(await replicas(db, job_id)) == 1


async def test_failing_job_fails_with_its_exit_code(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("bad", "exit 3", replicas=2))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")
    job = await job_row(db, job_id)
    assert (job.status, job.failure_reason, job.exit_code) == ("failed", "error", 3), job.message
    assert "exited with code 3" in job.message
    assert {r.status for r in await replicas(db, job_id)} <= {"failed", "stopped"}


async def test_retry_restarts_the_gang_with_the_next_attempt(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    # Fails on the first attempt, succeeds on the second: AICENTER_RESTART_COUNT tells them apart.
    command = 'test "$AICENTER_RESTART_COUNT" = 1 || exit 7'
    spec = job_spec("retry", command, retry={"max_restarts": 2, "on": ["error"]})
    job_id = await submit(db, alice, spec)
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")
    job = await job_row(db, job_id)
    assert (job.status, job.restart_count, job.counted_restarts) == ("succeeded", 1, 1)
    assert "restarting" in await statuses(db, job_id)
    rows = await replicas(db, job_id)
    assert [(r.attempt, r.status, r.exit_code) for r in rows] == [(0, "failed", 7), (1, "succeeded", 0)]
    assert handle(rows[0])["run_dir"] != handle(rows[1])["run_dir"]


async def test_stop_request_stops_a_running_job(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    job_id = await submit(db, alice, job_spec("long", "sleep 60"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await tick_until(scheduler, reconciler, status_is(db, job_id, "running"), "the job to run")
    async with db.write() as session:
        await jobs.stop_job(session, alice, job_id)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "stopped"), "the job to stop")
    job = await job_row(db, job_id)
    assert job.failure_reason == "stopped"
    [replica] = await replicas(db, job_id)
    assert (replica.status, replica.reason) == ("stopped", "stopped")
    assert replica.finished_at is not None


async def test_a_restarted_reconciler_adopts_an_intent_instead_of_launching_twice(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    marks = tmp_path / "marks"
    job_id = await submit(db, alice, job_spec("once", f"echo run >> {marks}; sleep 1"))
    scheduler, reconciler = controllers(db, app.state.ctx.store, settings, tmp_path / "jobs")
    await scheduler.tick()
    # A reconciler that "crashes" right after its intent committed: it never acts on it.
    from aicenter.controllers.jobs import Hands

    original = Hands.act

    async def crash(self: Hands, *args: object) -> None:
        raise RuntimeError("crash after the intent")

    Hands.act = crash  # type: ignore[assignment,method-assign]
    try:
        await reconciler.tick()
    finally:
        Hands.act = original  # type: ignore[method-assign]
    [replica] = await replicas(db, job_id)
    assert (replica.status, handle(replica)["pid"]) == ("starting", 0)
    await tick_until(scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end")
    assert (await job_row(db, job_id)).status == "succeeded"
    assert marks.read_text() == "run\n"


@pytest.mark.slow
async def test_ddp_job_resumes_from_its_checkpoint_after_a_replica_is_killed(
    app: FastAPI, db: Database, settings: Settings, alice: Actor, tmp_path: Path
) -> None:
    skip_without("torch", allow_module_level=False)
    from tests.integration.executors.test_ddp import TRAIN
    from tests.integration.services.catalog_helpers import entries, new_item, new_version

    store = app.state.ctx.store
    algorithm = await new_item(db, alice, "ddp", kind=ItemKind.ALGORITHM)
    code = await new_version(
        db, alice, algorithm.id, entries(store, {"train.py": TRAIN.encode()}), kind=ItemKind.ALGORITHM
    )
    dataset = await new_item(db, alice, "toy")
    data = await new_version(db, alice, dataset.id, entries(store, {"README": b"toy data\n"}))
    spec = {
        "name": "ddp",
        "framework": "pytorch",
        "algorithm": "ddp:1",
        "datasets": ["toy:1"],
        "tasks": [
            {
                "name": "worker",
                "replicas": 2,
                "resources": {"cpu": "1", "memory": "2Gi"},
                "command": "python train.py && test -f $AICENTER_DATA_DIR/toy/README",
            }
        ],
        "env": {"CHECKPOINT_EVERY": "5", "HOLD_AT": "10", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"},
        "retry": {"max_restarts": 2, "on": ["error"]},
        "output_model": "ddp-model",
    }
    job_id = await submit(db, alice, spec)
    scheduler, reconciler = controllers(db, store, settings, tmp_path / "jobs")

    async def holding() -> bool:
        rows = [r for r in await replicas(db, job_id) if r.attempt == 0 and r.handle and r.handle["pid"]]
        logs = [(Path(handle(r)["run_dir"]) / "output.log") for r in rows]
        return len(rows) == 2 and all(p.exists() and "holding at step 10" in p.read_text() for p in logs)

    await tick_until(scheduler, reconciler, holding, "both ranks to hold at step 10", deadline_s=300)
    checkpoints = tmp_path / "jobs" / str(job_id) / "checkpoints"
    assert (checkpoints / "step-00010.pt").is_file()
    victim = next(r for r in await replicas(db, job_id) if r.index == 1)
    os.kill(int(handle(victim)["extra"]["child_pid"]), signal.SIGKILL)

    await tick_until(
        scheduler, reconciler, status_is(db, job_id, "succeeded", "failed"), "the job to end", deadline_s=300
    )
    job = await job_row(db, job_id)
    assert job.status == "succeeded", job.message
    assert (job.restart_count, job.counted_restarts) == (1, 1)
    history = await statuses(db, job_id)
    assert history[history.index("running") + 1 :][:3] == ["restarting", "queued", "scheduled"]
    rows = await replicas(db, job_id)
    assert [(r.attempt, r.index, r.status) for r in rows] == [
        (0, 0, "stopped"),
        (0, 1, "failed"),
        (1, 0, "succeeded"),
        (1, 1, "succeeded"),
    ]
    assert rows[1].exit_code == -9
    for rank, row in enumerate(rows[2:]):
        log = (Path(handle(row)["run_dir"]) / "output.log").read_text()
        assert f"rank {rank} resumed from step 10" in log
    # The trained model, with its lineage.
    assert job.output_model_version_id is not None
    async with db.read() as session:
        version = await session.get(CatalogVersion, job.output_model_version_id)
    assert version is not None
    assert version.meta["lineage"] == {
        "job_id": job_id,
        "algorithm_version_id": code.id,
        "dataset_version_ids": [data.id],
    }
    assert version.file_count == 2  # rank0.json, rank1.json
