"""The scheduling controller's reads and writes: the cluster and the jobs as the scheduler's model, and its
decisions (placements, preemption requests, pending reasons) written in the caller's transaction.

The controller (``aicenter.controllers.scheduling``) keeps a ``ClusterState`` and a ``PendingQueue`` across ticks
and syncs them by difference; this module is the only place its reads and writes touch rows. Reads are cheap
enough to repeat every tick: the pools, nodes and quotas (tens to hundreds of rows), and the ids and attempts of
the jobs that hold resources or are queued (through the status index). Only the jobs the controller does not
hold yet are loaded in full (``load_scheduling_jobs``); finished jobs are never read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import Severity
from aicenter.core.clock import utcnow
from aicenter.core.errors import InvalidTransition
from aicenter.core.jobs import FailureReason, JobStatus
from aicenter.core.pools import DEFAULT_POOL
from aicenter.db.models import CatalogVersion, Job, Node, Pool, Quota, Replica, User, Workspace
from aicenter.scheduler import Job as SchedJob
from aicenter.scheduler import Node as SchedNode
from aicenter.scheduler import Quota as SchedQuota
from aicenter.scheduler import ReplicaPlacement
from aicenter.services.alerts import record_event
from aicenter.services.context import Actor
from aicenter.services.jobs._lifecycle import transition
from aicenter.services.jobs._scheduling_rows import epoch, placements_of, to_node, to_quota, to_sched_job

__all__ = [
    "PENDING_REASON_MAX",
    "SchedulingCluster",
    "SchedulingIds",
    "SchedulingJob",
    "load_scheduling_cluster",
    "load_scheduling_ids",
    "load_scheduling_jobs",
    "mark_preempted",
    "place_job",
    "set_pending_reasons",
]

SCHEDULER = Actor.system("scheduler")
"""The actor of the scheduler's job events."""

PENDING_REASON_MAX = 1024
"""The length of ``jobs.pending_reason``: a longer reason is stored cut, and compared cut."""

_CHUNK = 500  # ids per IN (...) list: well under SQLite's and asyncpg's bound-parameter limits

# Jobs whose replicas hold resources on nodes: from placement until their replicas are stopped and the job
# leaves for the queue or a final status. A job with a stop request (a user's stop, a preemption) is left out:
# the scheduler treats its resources as already given back, so the job that preempted it can be placed.
_HOLDING: tuple[str, ...] = tuple(
    s.value for s in (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING)
)


# -- reads ------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SchedulingCluster:
    """The pools, nodes and quotas, as the scheduler sees them."""

    pools: Mapping[int, str]
    """Pool id -> name (jobs and quotas carry pool names: a rename changes what they mean)."""
    default_pool: str
    nodes: list[SchedNode]
    """Every node, by name; each in every pool whose selector matches it."""
    node_ids: Mapping[str, int]
    """Node name -> row id (placements write both)."""
    quotas: Mapping[tuple[str, str], SchedQuota]
    """(workspace name, pool name) -> quota, memory in MiB."""


@dataclass(frozen=True, slots=True)
class SchedulingIds:
    """The jobs the scheduler accounts for, by scheduler id (the job id as a string)."""

    holding: Mapping[str, int]
    """Jobs that hold resources (scheduled, starting, running, restarting; no stop request) -> attempt."""
    queued: Mapping[str, tuple[int, str]]
    """Queued jobs without a stop request -> (attempt, pending reason as stored)."""


@dataclass(frozen=True, slots=True)
class SchedulingJob:
    """A loaded job: what the scheduler queues or accounts for, and where it already runs."""

    job: SchedJob | None
    """None when its current attempt has no replica rows (nothing to place)."""
    attempt: int
    placements: tuple[ReplicaPlacement, ...] | None
    """Where its current attempt's replicas are; None while any is not placed."""
    scheduled_at: float | None
    """When it was placed, in seconds since the epoch."""


async def load_scheduling_cluster(session: AsyncSession) -> SchedulingCluster:
    """Read every pool, node and quota (three statements; hundreds of rows, not millions)."""
    pools = list((await session.scalars(select(Pool))).all())
    names = {p.id: p.name for p in pools}
    rows = (await session.scalars(select(Node).order_by(Node.name))).all()
    quota_rows = (
        await session.execute(select(Quota, Workspace.name).join(Workspace, Workspace.id == Quota.workspace_id))
    ).all()
    quotas = {}
    for quota, workspace in quota_rows:
        pool = names.get(quota.pool_id)
        if pool is not None:
            quotas[(workspace, pool)] = to_quota(quota, workspace, pool)
    return SchedulingCluster(
        pools=names,
        default_pool=next((p.name for p in pools if p.is_default), DEFAULT_POOL),
        nodes=[to_node(row, pools) for row in rows],
        node_ids={row.name: row.id for row in rows},
        quotas=quotas,
    )


async def load_scheduling_ids(session: AsyncSession) -> SchedulingIds:
    """Read the ids and attempts of the jobs that hold resources and of the queued ones (two index scans)."""
    holding = await session.execute(
        select(Job.id, Job.restart_count).where(Job.status.in_(_HOLDING), Job.stop_requested_at.is_(None))
    )
    queued = await session.execute(
        select(Job.id, Job.restart_count, Job.pending_reason).where(
            Job.status == JobStatus.QUEUED.value, Job.stop_requested_at.is_(None)
        )
    )
    return SchedulingIds(
        holding={str(i): int(a) for i, a in holding},
        queued={str(i): (int(a), r) for i, a, r in queued},
    )


async def load_scheduling_jobs(
    session: AsyncSession, ids: Sequence[int], pools: Mapping[int, str], default_pool: str
) -> dict[int, SchedulingJob]:
    """Load jobs in full: the row, its workspace and user names, its current attempt's replicas, the sizes of
    the dataset versions it reads; 3 or 4 statements per 500 jobs.

    Args:
        session: A read session.
        ids: The jobs to load; ids that no longer exist are left out of the answer.
        pools: Pool id -> name (``SchedulingCluster.pools``).
        default_pool: The pool of a job without one.

    Returns:
        Job id -> the loaded job.
    """
    out: dict[int, SchedulingJob] = {}
    for start in range(0, len(ids), _CHUNK):
        chunk = ids[start : start + _CHUNK]
        rows = (
            await session.execute(
                select(Job, Workspace.name, User.username)
                .join(Workspace, Workspace.id == Job.workspace_id)
                .outerjoin(User, User.id == Job.user_id)
                .where(Job.id.in_(chunk))
            )
        ).all()
        replicas: dict[int, list[Replica]] = defaultdict(list)
        for r in (await session.scalars(select(Replica).where(Replica.job_id.in_(chunk)))).all():
            replicas[r.job_id].append(r)
        dataset_ids = {int(v) for job, _, _ in rows for v in job.dataset_version_ids or []}
        sizes: dict[int, int] = {}
        if dataset_ids:
            stmt = select(CatalogVersion.id, CatalogVersion.size_bytes).where(CatalogVersion.id.in_(dataset_ids))
            sizes = {int(i): int(n) for i, n in await session.execute(stmt)}
        for job, workspace, username in rows:
            current = sorted(
                (r for r in replicas[job.id] if r.attempt == job.restart_count), key=lambda r: (r.task, r.index)
            )
            sched = to_sched_job(
                job,
                current,
                workspace=workspace,
                user=username or f"user-{job.user_id}",
                pool=pools.get(job.pool_id, default_pool) if job.pool_id else default_pool,
                dataset_sizes=sizes,
            )
            out[job.id] = SchedulingJob(
                job=sched,
                attempt=int(job.restart_count),
                placements=placements_of(current),
                scheduled_at=epoch(job.scheduled_at),
            )
    return out


# -- writes (in the caller's transaction, which checks the scheduler's lease first) ------------------------------


async def place_job(
    session: AsyncSession,
    job_id: int,
    placements: Sequence[ReplicaPlacement],
    *,
    attempt: int | None,
    node_ids: Mapping[str, int],
) -> bool:
    """Write one placement: the replicas' node and devices, and the job ``queued -> scheduled`` (``transition``).

    Args:
        session: The caller's write session; nothing is committed here.
        job_id: The job.
        placements: Where each replica of its current attempt goes.
        attempt: The attempt the placement was decided for; None: whichever is current.
        node_ids: Node name -> row id.

    Returns:
        False, with nothing written, when the job changed since it was read: no longer queued, a stop requested,
        another attempt, or a replica of the placement missing.
    """
    job = await session.get(Job, job_id)
    if job is None or job.status != JobStatus.QUEUED.value or job.stop_requested_at is not None:
        return False
    if attempt is not None and job.restart_count != attempt:
        return False
    rows = {
        (r.task, r.index): r
        for r in (
            await session.scalars(select(Replica).where(Replica.job_id == job.id, Replica.attempt == job.restart_count))
        ).all()
    }
    if any((p.task, p.replica) not in rows for p in placements):
        return False
    nodes = sorted({p.node for p in placements})
    try:
        async with session.begin_nested():
            for p in placements:
                row = rows[(p.task, p.replica)]
                row.node_name = p.node
                row.node_id = node_ids.get(p.node)
                row.devices = list(p.devices)
            await transition(
                session,
                job,
                JobStatus.SCHEDULED,
                actor=SCHEDULER,
                reason="scheduled",
                message=f"placed on {', '.join(nodes)}",
            )
    except InvalidTransition:
        return False
    return True


async def mark_preempted(session: AsyncSession, job_id: int, message: str) -> bool:
    """Ask the reconciler to stop a job that holds resources gracefully: a stop request by nobody with the
    failure reason ``preempted`` (the reconciler requeues it once its replicas stopped).

    Returns:
        False when the job no longer holds resources or already has a stop request (nothing written).
    """
    result = await session.execute(
        update(Job)
        .where(Job.id == job_id, Job.status.in_(_HOLDING), Job.stop_requested_at.is_(None))
        .values(
            stop_requested_at=utcnow(),
            failure_reason=FailureReason.PREEMPTED.value,
            message=message[:4000],
        )
        .execution_options(synchronize_session=False)
    )
    if not getattr(result, "rowcount", 0):
        return False
    row = (await session.execute(select(Job.workspace_id, Job.name).where(Job.id == job_id))).one()
    record_event(
        session,
        "job.preempted",
        f"job {row.name} ({job_id}) preempted: {message}",
        severity=Severity.WARNING,
        job_id=job_id,
        workspace_id=row.workspace_id,
    )
    return True


async def set_pending_reasons(session: AsyncSession, reasons: Mapping[int, str]) -> None:
    """Write why queued jobs wait (job id -> reason), one ``UPDATE ... WHERE id IN`` per distinct reason and
    500 jobs: a cycle gives most waiting jobs one of a few reasons. Jobs no longer queued are left alone."""
    by_reason: dict[str, list[int]] = defaultdict(list)
    for job_id, reason in reasons.items():
        by_reason[reason[:PENDING_REASON_MAX]].append(job_id)
    for reason, ids in by_reason.items():
        for start in range(0, len(ids), _CHUNK):
            await session.execute(
                update(Job)
                .where(Job.id.in_(ids[start : start + _CHUNK]), Job.status == JobStatus.QUEUED.value)
                .values(pending_reason=reason)
                .execution_options(synchronize_session=False)
            )
