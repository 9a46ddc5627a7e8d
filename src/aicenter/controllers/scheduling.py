"""The scheduling controller: database -> ``Scheduler.cycle`` -> decisions applied in one guarded transaction.

One replica schedules at a time: the holder of the named lease ``scheduler``. Its ``ClusterState`` and
``PendingQueue`` live across ticks and are brought up to date from the database each tick by difference:

- nodes: one read of the node table (nodes are hundreds, not millions), each in every pool whose selector
  matches it (pools overlap); the arrays are rebuilt only when a node's hardware, pools or topology changed, a
  state change (ready, cordoned, down) is applied in place;
- running jobs: the ids and attempts of jobs that hold resources (``status IN (...)``, through the status
  index); only jobs that appeared are loaded, with their placed replica rows;
- pending jobs: the ids of queued jobs (status index again); only jobs new to the queue are loaded;
- pools: jobs and quotas carry pool names, so a pool renamed or deleted (rare) makes the tick reload everything.

Finished jobs are never read. Decisions are applied in one write transaction that first checks the lease
token (a replica that lost the lease while it computed writes nothing): a Place sets the replicas' node and
devices and moves the job ``queued -> scheduled`` through ``transition``; a Preempt marks the victim with a stop
request (reason ``preempted``) that the job reconciler carries out gracefully; pending reasons are written only
for the jobs whose reason changed.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import WakeableController, replica_name
from aicenter.controllers.jobs_snapshot import (
    HOLDING,
    JobFacts,
    epoch,
    node_pools,
    node_signature,
    placements_of,
    to_node,
    to_quota,
    to_sched_job,
)
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, InvalidTransition
from aicenter.core.jobs import FailureReason, JobStatus
from aicenter.core.pools import DEFAULT_POOL
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.leases import NamedLease, renew_row
from aicenter.db.models import CatalogVersion, Job, Lease, Node, Pool, Quota, Replica, User, Workspace
from aicenter.events import notify_after_commit
from aicenter.scheduler import ClusterState, CycleResult, PendingQueue, Place, Preempt, Scheduler
from aicenter.scheduler import Job as SchedJob
from aicenter.services.context import Actor
from aicenter.services.jobs import transition

log = logging.getLogger(__name__)

LEASE_NAME = "scheduler"
SCHEDULER_ACTOR = Actor.system("scheduler")
_CHUNK = 500  # ids per IN (...) list
_REASON_MAX = 1024  # jobs.pending_reason


@dataclass
class TickStats:
    """What the last tick did (for tests and logs)."""

    placed: list[int] = field(default_factory=list)
    preempted: list[int] = field(default_factory=list)
    undone: list[int] = field(default_factory=list)
    reasons_written: int = 0
    loaded: int = 0


class SchedulingController(WakeableController):
    """Places queued jobs on nodes with the scheduler core, one replica at a time (named lease ``scheduler``).

    Args:
        db: The database.
        settings: ``schedule_interval_s`` and ``scheduler_policy`` are read.
        owner: The lease owner name (default ``host:pid``).
    """

    name = "scheduling"

    def __init__(self, db: Database, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.settings = settings
        self.interval_s = settings.schedule_interval_s
        self.owner = owner or replica_name()
        # The lease outlives a few missed ticks, so a slow cycle does not hand scheduling to another replica.
        self.lease_ttl_s = max(10.0, 5 * self.interval_s)
        self.scheduler = Scheduler(settings.scheduler_policy)
        self.last = TickStats()
        self._lease: NamedLease | None = None
        self._reset()

    def _reset(self) -> None:
        """Forget everything derived from the database (lost lease, rebuilt nodes): the next tick reloads."""
        self.state = ClusterState([])
        self.pending = PendingQueue()
        self._node_sigs: dict[str, tuple[object, ...]] = {}
        self._node_ids: dict[str, int] = {}
        self._quotas: dict[tuple[str, str], object] = {}
        self._attempts: dict[str, int] = {}  # job id -> attempt of its allocation in ``state``
        self._queued_attempts: dict[str, int] = {}  # job id -> attempt of its entry in ``pending``
        self._reasons: dict[str, str] = {}  # job id -> pending_reason as stored
        self._pool_names: dict[int, str] = {}  # pool id -> name, as the loaded jobs and quotas carry it

    # -- lease ------------------------------------------------------------------------------------------------

    async def _hold_lease(self) -> NamedLease | None:
        lease = self._lease
        if lease is not None and lease.expires_at - utcnow() > timedelta(seconds=self.lease_ttl_s / 2):
            return lease
        if lease is not None:
            lease = await leases.renew(self.db, lease, ttl_s=self.lease_ttl_s)
        if lease is None:
            lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self.lease_ttl_s)
            if lease is not None and self._lease is None:
                log.info("scheduler lease taken by %s", self.owner)
        if lease is None and self._lease is not None:
            log.info("scheduler lease lost by %s", self.owner)
            self._reset()
        self._lease = lease
        return lease

    async def release_lease(self) -> None:
        """Give the lease up (on shutdown), so another replica schedules without waiting for it to expire."""
        if self._lease is not None:
            await leases.release(self.db, self._lease)
            self._lease = None

    async def stop(self) -> None:
        await super().stop()
        try:
            await self.release_lease()
        except Exception:  # the database may be gone at shutdown; the lease then simply expires
            log.warning("could not release the scheduler lease", exc_info=True)

    # -- the tick ---------------------------------------------------------------------------------------------

    async def tick(self) -> None:
        lease = await self._hold_lease()
        if lease is None:
            return  # another replica schedules
        stats = TickStats()
        async with self.db.read() as session:
            await self._sync(session, stats)
        if not len(self.pending):
            self.last = stats
            return
        result = self.scheduler.cycle(self.state, self.pending, time.time())
        await self._apply(lease, result, stats)
        self.last = stats

    # -- snapshot ---------------------------------------------------------------------------------------------

    async def _sync(self, session: AsyncSession, stats: TickStats) -> None:
        pools = list((await session.scalars(select(Pool))).all())
        pool_names = {p.id: p.name for p in pools}
        if any(pool_names.get(i) != name for i, name in self._pool_names.items()):
            # Loaded jobs, usage and quotas carry pool names: after a rename or a deletion (rare) reload them all,
            # or a queued job would wait for a pool of its old name forever.
            self._reset()
        self._pool_names = pool_names
        default_pool = next((p.name for p in pools if p.is_default), DEFAULT_POOL)
        await self._sync_nodes(session, pools)
        await self._sync_quotas(session, pool_names)

        holding = {
            str(i): int(a)
            for i, a in (
                await session.execute(
                    select(Job.id, Job.restart_count).where(Job.status.in_(HOLDING), Job.stop_requested_at.is_(None))
                )
            )
        }
        for job_id in [j for j in self.state.running if holding.get(j) != self._attempts.get(j)]:
            self.state.release(job_id)
            self._attempts.pop(job_id, None)
        missing = [int(j) for j in holding if j not in self.state.running]

        queued = {
            str(i): (int(a), r)
            for i, a, r in (
                await session.execute(
                    select(Job.id, Job.restart_count, Job.pending_reason).where(
                        Job.status == JobStatus.QUEUED.value, Job.stop_requested_at.is_(None)
                    )
                )
            )
        }
        for job_id in self.pending.ids():
            if job_id not in queued or queued[job_id][0] != self._queued_attempts.get(job_id):
                self.pending.remove(job_id)
                self._queued_attempts.pop(job_id, None)
                self._reasons.pop(job_id, None)
        new = [int(j) for j in queued if not self.pending.has(j) and j not in self.state.running]

        facts = await self._load(session, missing + new, pool_names, default_pool)
        stats.loaded = len(facts)
        now = time.time()
        for missing_id in missing:
            fact = facts.get(missing_id)
            if fact is None:
                continue
            sched = to_sched_job(fact)
            placements = placements_of(fact.replicas)
            if sched is None or not placements:
                continue
            try:
                self.state.allocate(sched, placements, epoch(fact.job.scheduled_at) or now)
            except AicenterError as exc:  # a node vanished or shrank under it: it keeps running, unaccounted
                log.warning("job %s holds resources the scheduler cannot account for: %s", missing_id, exc)
                continue
            self._attempts[sched.id] = fact.job.restart_count
        for new_id in new:
            fact = facts.get(new_id)
            sched = to_sched_job(fact) if fact else None
            if sched is None:
                continue
            self.pending.add(sched)
            self._queued_attempts[sched.id] = queued[sched.id][0]
            self._reasons[sched.id] = queued[sched.id][1]
        # PendingQueue logs every job added (for FGD); start it afresh before the log dwarfs the queue.
        if len(self.pending.added(0)[0]) > 10_000 + 4 * len(self.pending):
            self.pending = PendingQueue(list(self.pending))

    async def _sync_nodes(self, session: AsyncSession, pools: list[Pool]) -> None:
        rows = list((await session.scalars(select(Node).order_by(Node.name))).all())
        nodes = [to_node(row, node_pools(row, pools)) for row in rows]
        self._node_ids = {row.name: row.id for row in rows}
        sigs = {n.name: node_signature(n) for n in nodes}
        if sigs != self._node_sigs:
            quotas = list(self.state.quotas.values())
            self.state = ClusterState(nodes, quotas)  # rare: hardware, pools or topology changed
            self._node_sigs = sigs
            self._attempts.clear()  # every holding job is allocated again from its rows
            return
        for n in nodes:
            if self.state.node(n.name).state != n.state:
                self.state.set_node_state(n.name, n.state)

    async def _sync_quotas(self, session: AsyncSession, pool_names: dict[int, str]) -> None:
        rows = (
            await session.execute(select(Quota, Workspace.name).join(Workspace, Workspace.id == Quota.workspace_id))
        ).all()
        quotas = {}
        for row, workspace in rows:
            pool = pool_names.get(row.pool_id)
            if pool is not None:
                quotas[(workspace, pool)] = to_quota(row, workspace, pool)
        if quotas == self._quotas:
            return
        self.state.quotas.clear()
        for quota in quotas.values():
            self.state.set_quota(quota)
        self._quotas = dict(quotas)

    async def _load(
        self, session: AsyncSession, ids: list[int], pool_names: dict[int, str], default_pool: str
    ) -> dict[int, JobFacts]:
        out: dict[int, JobFacts] = {}
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
                out[job.id] = JobFacts(
                    job=job,
                    workspace=workspace,
                    user=username or f"user-{job.user_id}",
                    pool=pool_names.get(job.pool_id, default_pool) if job.pool_id else default_pool,
                    replicas=current,
                    dataset_sizes=sizes,
                )
        return out

    # -- decisions --------------------------------------------------------------------------------------------

    async def _apply(self, lease: NamedLease, result: CycleResult, stats: TickStats) -> None:
        placed = result.placed
        preempted = result.preempted
        # Reasons first: the lazy mapping reads the pending queue, which the placements below change.
        changed: dict[str, list[int]] = defaultdict(list)
        placed_ids = {p.job_id for p in placed}
        for job_id, reason in result.pending.items():
            reason = reason[:_REASON_MAX]
            if job_id not in placed_ids and self._reasons.get(job_id) != reason:
                changed[reason].append(int(job_id))
        if not placed and not preempted and not changed:
            return
        undone: list[str] = []
        try:
            async with self.db.write() as session:
                if not await renew_row(
                    session, Lease, Lease.name == LEASE_NAME, token=lease.token, ttl_s=self.lease_ttl_s
                ):
                    raise _LeaseLost
                undone.extend([place.job_id for place in placed if not await self._place(session, place)])
                for preempt in preempted:
                    await self._preempt(session, preempt)
                for reason, ids in changed.items():
                    for start in range(0, len(ids), _CHUNK):
                        await session.execute(
                            update(Job)
                            .where(Job.id.in_(ids[start : start + _CHUNK]), Job.status == JobStatus.QUEUED.value)
                            .values(pending_reason=reason)
                            .execution_options(synchronize_session=False)
                        )
                if len(undone) < len(placed) or preempted:
                    notify_after_commit(session)  # the reconciler of this replica acts on them now
        except _LeaseLost:
            log.info("scheduler lease lost before the decisions were written; dropping them")
            self._lease = None
            self._reset()
            return
        except Exception:
            # Nothing was written: undo the cycle's allocations; victims are re-allocated by the next sync.
            for place in placed:
                self._release(place.job_id)
            for preempt in preempted:
                self._attempts.pop(preempt.job_id, None)
            raise
        for job_id in undone:
            self._release(job_id)
        for place in placed:
            if place.job_id in undone:
                continue
            if self.pending.has(place.job_id):
                self.pending.remove(place.job_id)
            self._attempts[place.job_id] = self._queued_attempts.pop(place.job_id, 0)
            self._reasons.pop(place.job_id, None)
            stats.placed.append(int(place.job_id))
        for preempt in preempted:
            self._attempts.pop(preempt.job_id, None)
            stats.preempted.append(int(preempt.job_id))
        for reason, ids in changed.items():
            for changed_id in ids:
                self._reasons[str(changed_id)] = reason
            stats.reasons_written += len(ids)
        stats.undone = [int(j) for j in undone]

    def _release(self, job_id: str) -> None:
        if job_id in self.state.running:
            self.state.release(job_id)
        self._attempts.pop(job_id, None)

    async def _place(self, session: AsyncSession, place: Place) -> bool:
        """Write one placement; False (and nothing written) when the job changed since the snapshot."""
        job = await session.get(Job, int(place.job_id))
        if job is None or job.status != JobStatus.QUEUED.value or job.stop_requested_at is not None:
            return False
        if job.restart_count != self._queued_attempts.get(place.job_id, job.restart_count):
            return False
        rows = {
            (r.task, r.index): r
            for r in (
                await session.scalars(
                    select(Replica).where(Replica.job_id == job.id, Replica.attempt == job.restart_count)
                )
            ).all()
        }
        if any((p.task, p.replica) not in rows for p in place.placements):
            return False
        nodes = sorted({p.node for p in place.placements})
        try:
            async with session.begin_nested():
                for p in place.placements:
                    row = rows[(p.task, p.replica)]
                    row.node_name = p.node
                    row.node_id = self._node_ids.get(p.node)
                    row.devices = list(p.devices)
                await transition(
                    session,
                    job,
                    JobStatus.SCHEDULED,
                    actor=SCHEDULER_ACTOR,
                    reason="scheduled",
                    message=f"placed on {', '.join(nodes)}",
                )
        except InvalidTransition:
            return False
        return True

    async def _preempt(self, session: AsyncSession, preempt: Preempt) -> None:
        """Ask the reconciler to stop the victim gracefully: a stop request by nobody, reason ``preempted``."""
        await session.execute(
            update(Job)
            .where(
                Job.id == int(preempt.job_id),
                Job.status.in_(HOLDING),
                Job.stop_requested_at.is_(None),
            )
            .values(
                stop_requested_at=utcnow(),
                failure_reason=FailureReason.PREEMPTED.value,
                message=f"preempted for job {preempt.for_job_id}: {preempt.reason}"[:4000],
            )
            .execution_options(synchronize_session=False)
        )


class _LeaseLost(Exception):
    pass


def pending_jobs(controller: SchedulingController) -> list[SchedJob]:
    """The jobs the controller holds as pending (for tests and diagnostics)."""
    return list(controller.pending)


def build(ctx: AppContext) -> SchedulingController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return SchedulingController(ctx.db, ctx.settings)
