"""The scheduling controller's reads and writes, on SQLite and PostgreSQL: the cluster and the jobs as the
scheduler's model (overlapping pools, quotas in MiB, only unstopped jobs that hold resources or wait), a
placement written once through ``transition``, a preemption request only on a job that still holds resources,
and pending reasons only on queued jobs, cut to the column."""

from __future__ import annotations

from pathlib import Path

from sqlalchemy import select

from aicenter.core.jobs import JobStatus
from aicenter.core.roles import NodeSchedule
from aicenter.db.engine import Database
from aicenter.db.models import Job, JobEvent, Node, Quota, Replica
from aicenter.scheduler import ReplicaPlacement
from aicenter.services import jobs
from tests.integration.services.jobs_helpers import GiB, JobWorld, job_world, move, spec, submit

A100 = {"type": "nvidia-a100", "memory_bytes": 80 * GiB}


def _two_on_n1(*devices: tuple[int, ...]) -> list[ReplicaPlacement]:
    return [ReplicaPlacement("worker", i, "n1", d, 1000 * len(d)) for i, d in enumerate(devices or ((), ()))]


async def _place(db: Database, job_id: int, placements: list[ReplicaPlacement], attempt: int | None = 0) -> bool:
    async with db.write() as session:
        node_ids = (await jobs.load_scheduling_cluster(session)).node_ids
        return await jobs.place_job(session, job_id, placements, attempt=attempt, node_ids=node_ids)


async def _job(db: Database, job_id: int) -> Job:
    async with db.read() as session:
        job = await session.get(Job, job_id)
    assert job is not None
    return job


async def _replicas(db: Database, job_id: int) -> list[tuple[str | None, int | None, list[int]]]:
    async with db.read() as session:
        rows = await session.scalars(select(Replica).where(Replica.job_id == job_id).order_by(Replica.index))
        return [(r.node_name, r.node_id, list(r.devices or [])) for r in rows]


async def test_a_node_is_in_every_pool_that_selects_it_and_quotas_count_memory_in_mib(
    db: Database, tmp_path: Path
) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        session.add(
            Node(
                name="g1",
                cpu_milli=8000,
                memory_bytes=32 * GiB,
                labels={"kind": "gpu"},
                accelerators=[{"index": 1, **A100}, {"index": 0, **A100}],
                schedule=NodeSchedule.CORDONED.value,
            )
        )
        session.add(
            Quota(workspace_id=w.p.ws, pool_id=w.default_pool, guaranteed={"cpu": 1000}, maximum={"memory": GiB})
        )
    async with db.read() as session:
        cluster = await jobs.load_scheduling_cluster(session)
    assert cluster.pools == {w.default_pool: "default", w.gpu_pool: "gpu"}
    assert cluster.default_pool == "default"
    g1, n1 = cluster.nodes
    assert (g1.name, g1.pools, g1.state, [d.index for d in g1.devices]) == (
        "g1",
        {"default", "gpu"},
        "cordoned",
        [0, 1],
    )
    assert (n1.name, n1.pools, n1.memory_mib) == ("n1", {"default"}, 64 * 1024)
    assert set(cluster.node_ids) == {"g1", "n1"}
    [quota] = cluster.quotas.values()
    assert (quota.pool, quota.guaranteed, quota.maximum) == ("default", {"cpu": 1000.0}, {"memory": 1024.0})


async def test_a_placement_schedules_the_job_once_and_writes_where_its_replicas_go(
    db: Database, tmp_path: Path
) -> None:
    w = await job_world(db, tmp_path)
    job_id = (await submit(db, w.p.alice, spec())).job.id
    async with db.read() as session:
        cluster = await jobs.load_scheduling_cluster(session)
        [queued] = (await jobs.load_scheduling_jobs(session, [job_id], cluster.pools, cluster.default_pool)).values()
    assert queued.job is not None
    assert (queued.job.pool, queued.job.user, queued.placements, queued.scheduled_at) == (
        "default",
        "alice",
        None,
        None,
    )
    assert [(t.name, t.replicas, t.request.cpu_milli) for t in queued.job.tasks] == [("worker", 2, 4000)]

    assert await _place(db, job_id, _two_on_n1())
    n1 = cluster.node_ids["n1"]
    assert await _replicas(db, job_id) == [("n1", n1, []), ("n1", n1, [])]
    job = await _job(db, job_id)
    assert (job.status, job.message) == ("scheduled", "placed on n1")
    async with db.read() as session:
        [placed] = (await jobs.load_scheduling_jobs(session, [job_id], cluster.pools, cluster.default_pool)).values()
        events = list(await session.scalars(select(JobEvent.to_status).where(JobEvent.job_id == job_id)))
    assert placed.placements == tuple(_two_on_n1())
    assert placed.scheduled_at is not None
    # A second placement of a job no longer queued writes nothing: no event, the replicas stay where they are.
    assert not await _place(db, job_id, [ReplicaPlacement("worker", i, "elsewhere", (), 0) for i in (0, 1)])
    assert await _replicas(db, job_id) == [("n1", n1, []), ("n1", n1, [])]
    assert events == ["pending", "queued", "scheduled"]


async def test_a_placement_decided_for_another_attempt_or_replica_writes_nothing(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    job_id = (await submit(db, w.p.alice, spec())).job.id
    assert not await _place(db, job_id, _two_on_n1(), attempt=1)
    assert not await _place(db, job_id, [*_two_on_n1(), ReplicaPlacement("worker", 2, "n1", (), 0)])
    assert not await _place(db, job_id + 1000, _two_on_n1())
    assert (await _job(db, job_id)).status == "queued"
    assert await _replicas(db, job_id) == [(None, None, []), (None, None, [])]


async def _world_of_four(db: Database, w: JobWorld) -> tuple[int, int, int, int]:
    """A queued job, a scheduled one, a running one and a stopped one."""
    queued, scheduled, running, stopped = [(await submit(db, w.p.alice, spec(name=f"j{i}"))).job.id for i in range(4)]
    for job_id in (scheduled, running):
        assert await _place(db, job_id, _two_on_n1())
    await move(db, running, JobStatus.STARTING, JobStatus.RUNNING)
    await move(db, stopped, JobStatus.STOPPED)
    return queued, scheduled, running, stopped


async def test_a_preemption_request_is_written_only_on_a_job_that_holds_resources(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    queued, scheduled, running, stopped = await _world_of_four(db, w)
    async with db.read() as session:
        before = await jobs.load_scheduling_ids(session)
    assert before.holding == {str(scheduled): 0, str(running): 0}
    assert before.queued == {str(queued): (0, "")}

    async with db.write() as session:
        assert await jobs.mark_preempted(session, running, "preempted for job 9: priority")
        assert not await jobs.mark_preempted(session, running, "again")  # already asked to stop
        assert not await jobs.mark_preempted(session, queued, "holds nothing")
        assert not await jobs.mark_preempted(session, stopped, "finished")
    job = await _job(db, running)
    assert (job.status, job.failure_reason, job.message) == ("running", "preempted", "preempted for job 9: priority")
    assert job.stop_requested_at is not None
    assert job.stop_requested_by is None
    assert (await _job(db, queued)).stop_requested_at is None
    # A victim's resources count as given back from then on: the scheduler no longer accounts for it.
    async with db.read() as session:
        assert (await jobs.load_scheduling_ids(session)).holding == {str(scheduled): 0}


async def test_pending_reasons_are_written_cut_to_the_column_and_only_on_queued_jobs(
    db: Database, tmp_path: Path
) -> None:
    w = await job_world(db, tmp_path)
    queued, scheduled, _, _ = await _world_of_four(db, w)
    other = (await submit(db, w.p.alice, spec(name="other"))).job.id
    long = "no node has enough cpu " * 100
    async with db.write() as session:
        await jobs.set_pending_reasons(session, {queued: long, other: "waiting", scheduled: "waiting"})
    assert (await _job(db, queued)).pending_reason == long[: jobs.PENDING_REASON_MAX]
    assert (await _job(db, other)).pending_reason == "waiting"
    assert (await _job(db, scheduled)).pending_reason == ""
    async with db.read() as session:
        ids = await jobs.load_scheduling_ids(session)
    assert ids.queued[str(queued)] == (0, long[: jobs.PENDING_REASON_MAX])
