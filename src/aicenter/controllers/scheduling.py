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

The controller runs no SQL of its own: it reads through ``services.jobs.load_scheduling_cluster``,
``load_scheduling_ids`` and ``load_scheduling_jobs`` (rows come back as the scheduler's model), writes through
``place_job``, ``mark_preempted`` and ``set_pending_reasons``, and holds its lease through ``db.leases``.

Each tick of the lease holder is timed and its decisions counted by pool into ``ProcessTelemetry`` (the
``/metrics`` families ``aicenter_scheduler_cycle_duration_seconds`` and ``aicenter_scheduler_decisions_total``):
here, not in the scheduler core, which stays pure and is shared with the simulator.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import WakeableController, replica_name
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.leases import NamedLease
from aicenter.events import notify_after_commit
from aicenter.scheduler import ClusterState, CycleResult, PendingQueue, Quota, Scheduler
from aicenter.scheduler import Job as SchedJob
from aicenter.scheduler import Node as SchedNode
from aicenter.services.jobs import (
    PENDING_REASON_MAX,
    load_scheduling_cluster,
    load_scheduling_ids,
    load_scheduling_jobs,
    mark_preempted,
    place_job,
    set_pending_reasons,
)
from aicenter.services.monitoring import NO_POOL, DecisionKind, ProcessTelemetry

log = logging.getLogger(__name__)

LEASE_NAME = "scheduler"


def node_signature(node: SchedNode) -> tuple[Any, ...]:
    """What, when it changes, needs the state's arrays rebuilt (everything but the node's state)."""
    return (
        node.cpu_milli,
        node.memory_mib,
        node.devices,
        node.pools,
        node.leaf,
        node.spine,
        tuple(node.labels.items()),
    )


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
        telemetry: Where each cycle's duration and decisions are counted (a private one when not given).
    """

    name = "scheduling"

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        owner: str | None = None,
        telemetry: ProcessTelemetry | None = None,
    ) -> None:
        super().__init__()
        self.telemetry = telemetry or ProcessTelemetry()
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
        self._quotas: dict[tuple[str, str], Quota] = {}
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
        started = time.perf_counter()
        stats = TickStats()
        async with self.db.read() as session:
            await self._sync(session, stats)
        if not len(self.pending):
            self.last = stats
            self.telemetry.observe_cycle(time.perf_counter() - started, {})
            return
        result = self.scheduler.cycle(self.state, self.pending, time.time())
        pools = self._decision_pools(result)  # before _apply takes the placed jobs out of the pending queue
        await self._apply(lease, result, stats)
        self.last = stats
        decisions: Counter[tuple[str, str]] = Counter()
        undone = set(stats.undone)
        for job_id in stats.placed:
            decisions[(pools.get(str(job_id), NO_POOL), DecisionKind.STARTED)] += 1
        for job_id in undone:
            decisions[(pools.get(str(job_id), NO_POOL), DecisionKind.UNDONE)] += 1
        for job_id in stats.preempted:
            decisions[(pools.get(str(job_id), NO_POOL), DecisionKind.PREEMPTED)] += 1
        self.telemetry.observe_cycle(time.perf_counter() - started, decisions)

    def _decision_pools(self, result: CycleResult) -> dict[str, str]:
        """Job id -> the pool its decision counts under: a placed job's own pool, and for a preempted job the
        pool of the job it made room for (the victim was already released from the state)."""
        pools: dict[str, str] = {}
        for place in result.placed:
            job = self.pending.get(place.job_id)
            if job is not None:
                pools[place.job_id] = job.pool
        for preempt in result.preempted:
            job = self.pending.get(preempt.for_job_id)
            if job is not None:
                pools[preempt.job_id] = job.pool
        return pools

    # -- snapshot ---------------------------------------------------------------------------------------------

    async def _sync(self, session: AsyncSession, stats: TickStats) -> None:
        cluster = await load_scheduling_cluster(session)
        if any(cluster.pools.get(i) != name for i, name in self._pool_names.items()):
            # Loaded jobs, usage and quotas carry pool names: after a rename or a deletion (rare) reload them all,
            # or a queued job would wait for a pool of its old name forever.
            self._reset()
        self._pool_names = dict(cluster.pools)
        self._sync_nodes(cluster.nodes, cluster.node_ids)
        self._sync_quotas(cluster.quotas)

        ids = await load_scheduling_ids(session)
        holding, queued = ids.holding, ids.queued
        for job_id in [j for j in self.state.running if holding.get(j) != self._attempts.get(j)]:
            self.state.release(job_id)
            self._attempts.pop(job_id, None)
        missing = [int(j) for j in holding if j not in self.state.running]

        for job_id in self.pending.ids():
            if job_id not in queued or queued[job_id][0] != self._queued_attempts.get(job_id):
                self.pending.remove(job_id)
                self._queued_attempts.pop(job_id, None)
                self._reasons.pop(job_id, None)
        new = [int(j) for j in queued if not self.pending.has(j) and j not in self.state.running]

        loaded = await load_scheduling_jobs(session, missing + new, cluster.pools, cluster.default_pool)
        stats.loaded = len(loaded)
        now = time.time()
        for missing_id in missing:
            found = loaded.get(missing_id)
            if found is None or found.job is None or not found.placements:
                continue
            try:
                self.state.allocate(found.job, found.placements, found.scheduled_at or now)
            except AicenterError as exc:  # a node vanished or shrank under it: it keeps running, unaccounted
                log.warning("job %s holds resources the scheduler cannot account for: %s", missing_id, exc)
                continue
            self._attempts[found.job.id] = found.attempt
        for new_id in new:
            found = loaded.get(new_id)
            if found is None or found.job is None:
                continue
            self.pending.add(found.job)
            self._queued_attempts[found.job.id] = queued[found.job.id][0]
            self._reasons[found.job.id] = queued[found.job.id][1]
        # PendingQueue logs every job added (for FGD); start it afresh before the log dwarfs the queue.
        if len(self.pending.added(0)[0]) > 10_000 + 4 * len(self.pending):
            self.pending = PendingQueue(list(self.pending))

    def _sync_nodes(self, nodes: list[SchedNode], node_ids: Mapping[str, int]) -> None:
        self._node_ids = dict(node_ids)
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

    def _sync_quotas(self, quotas: Mapping[tuple[str, str], Quota]) -> None:
        if quotas == self._quotas:
            return
        self.state.quotas.clear()
        for quota in quotas.values():
            self.state.set_quota(quota)
        self._quotas = dict(quotas)

    # -- decisions --------------------------------------------------------------------------------------------

    async def _apply(self, lease: NamedLease, result: CycleResult, stats: TickStats) -> None:
        placed = result.placed
        preempted = result.preempted
        # Reasons first: the lazy mapping reads the pending queue, which the placements below change.
        changed: dict[int, str] = {}
        placed_ids = {p.job_id for p in placed}
        for job_id, reason in result.pending.items():
            reason = reason[:PENDING_REASON_MAX]
            if job_id not in placed_ids and self._reasons.get(job_id) != reason:
                changed[int(job_id)] = reason
        if not placed and not preempted and not changed:
            return
        undone: list[str] = []
        try:
            async with self.db.write() as session:
                if not await leases.renew_in(session, lease, ttl_s=self.lease_ttl_s):
                    raise _LeaseLost
                for place in placed:
                    attempt = self._queued_attempts.get(place.job_id)
                    if not await place_job(
                        session, int(place.job_id), place.placements, attempt=attempt, node_ids=self._node_ids
                    ):
                        undone.append(place.job_id)
                for preempt in preempted:
                    # The victim's reconciler stops it gracefully and requeues it; nothing to do if it ended.
                    message = f"preempted for job {preempt.for_job_id}: {preempt.reason}"
                    await mark_preempted(session, int(preempt.job_id), message)
                await set_pending_reasons(session, changed)
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
        for changed_id, reason in changed.items():
            self._reasons[str(changed_id)] = reason
        stats.reasons_written += len(changed)
        stats.undone = [int(j) for j in undone]

    def _release(self, job_id: str) -> None:
        if job_id in self.state.running:
            self.state.release(job_id)
        self._attempts.pop(job_id, None)


class _LeaseLost(Exception):
    pass


def pending_jobs(controller: SchedulingController) -> list[SchedJob]:
    """The jobs the controller holds as pending (for tests and diagnostics)."""
    return list(controller.pending)


def build(ctx: AppContext) -> SchedulingController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return SchedulingController(ctx.db, ctx.settings, telemetry=ctx.telemetry)
