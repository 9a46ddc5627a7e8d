"""The cycle: plugins in a fixed order, as Volcano runs actions and plugins.

For each job of the queue order (at most ``max_jobs_per_cycle``):
1. admission: the caller's hook (billing balance), then quota maximum;
2. placement (gang, accelerator types, strategy, topology, fractional packing, cache affinity), outside the
   reservation unless the job ends before it starts;
3. when it does not fit: preemption / reclaim; then, once per cycle, the reservation of the first job that
   does not fit (EASY backfill) or, in strict order, a stop.
Every decision is applied to the state as it is taken, so the next job sees it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .admission import is_borrowing, quota_refusal, within_guarantee
from .backfill import Reservation, reserve
from .cache import plan_evictions
from .fgd import TaskDistribution
from .memo import PlacementMemo, Shape
from .model import FULL_MILLI, Admission, CycleResult, Job, PendingReasons, Place, Preempt, Reserve, RunningJob
from .placement import BoolArray, Outcome, Placer
from .policy import PolicyConfig
from .preemption import find_eviction
from .queue import LasRank, PendingQueue, order, rank_of
from .state import ClusterState, job_demand

_NOT_EXAMINED = "waiting in the queue: not among the jobs examined this cycle (max_jobs_per_cycle)"


class Scheduler:
    """A pool's scheduler: pure, no I/O, no clock.

    Args:
        policy: A ``PolicyConfig``, a built-in name, a policy document (dict) or a YAML/JSON path.
        admission: Hook that refuses a job with a reason (e.g. the billing balance check).
        distribution: FGD task-size distribution; default: the policy's ``fgd_task_classes`` or, when empty,
            learned from the pending jobs the scheduler sees.
        memoize: Reuse placement failures within a cycle (see ``memo.py``); ``False`` asks the placer for
            every job (the reference the tests compare against).

    Raises:
        ValidationFailed: On a bad policy.
    """

    def __init__(
        self,
        policy: PolicyConfig | str | Mapping[str, Any] = "default",
        admission: Admission | None = None,
        distribution: TaskDistribution | None = None,
        memoize: bool = True,
    ) -> None:
        self.memoize = memoize
        self.policy = PolicyConfig.load(policy)
        self.admission = admission
        if distribution is None:
            distribution = TaskDistribution(
                (c.accelerator_milli, c.cpu_milli, c.memory_mib, c.weight) for c in self.policy.fgd_task_classes
            )
        self.distribution = distribution
        self.placer = Placer(self.policy, distribution)
        self._seen: set[str] = set()
        self._log_mark: tuple[PendingQueue, int] | None = None  # (queue, log position) observed up to
        self._demoted: dict[float, bool] = {}
        self._shapes: dict[str, tuple[Job, Shape]] = {}  # request shapes by job (memo.py), across cycles

    def cycle(self, state: ClusterState, pending: Sequence[Job], now: float) -> CycleResult:
        """Run one scheduling cycle.

        Args:
            state: The cluster; decisions are applied to it (allocations, releases, cache evictions).
            pending: Jobs waiting to run (not in ``state.running``).
            now: Current time.

        Returns:
            Decisions in order, and a reason for every pending job left waiting.
        """
        p = self.policy
        result = CycleResult()
        explicit: dict[str, str] = {}
        # Only FGD reads the distribution: other policies skip the pass over every pending job.
        if not self.distribution.fixed and "fgd" in (p.placement, p.fractional_placement):
            self._observe(pending)
        limit = p.max_jobs_per_cycle
        jobs, ranker = order(state, pending, p, now, limit)
        reservation: Reservation | None = None
        reserved_mask: np.ndarray[Any, np.dtype[np.bool_]] | None = None
        outside_reservation: np.ndarray[Any, np.dtype[np.bool_]] | None = None
        blocker: Job | None = None
        examined: set[str] = set()
        already: list[str] = []
        if len(self._shapes) > 4 * len(pending) + 10_000:  # forget jobs long gone
            self._shapes.clear()
        memo = PlacementMemo(state, p.gang, p.cache_affinity, self._shapes) if self.memoize else None
        self._demoted = {}
        preemptions_left = 16  # bounds a cycle's cost when a full cluster meets a high-priority backlog
        for job in jobs:
            if len(examined) >= limit:
                break
            examined.add(job.id)
            if job.id in state.running:  # the caller's pending list is stale; nothing to decide
                already.append(job.id)
                continue
            if self.admission is not None:
                refusal = self.admission(job)
                if refusal:
                    explicit[job.id] = refusal
                    continue
            # Demand matters only under a quota (maximum, guarantee); skip the sums otherwise.
            demand = job_demand(job) if (job.workspace, job.pool) in state.quotas else {}
            refusal = quota_refusal(state, job, demand) if demand else None
            if refusal:
                explicit[job.id] = refusal
                continue
            allowed = None
            if reserved_mask is not None and reservation is not None:
                fits_before = (
                    reservation.start_at is not None
                    and job.estimate_s is not None
                    and now + job.estimate_s <= reservation.start_at
                )
                if not fits_before:
                    allowed = outside_reservation
            out, reason, behind = self._try_place(state, job, allowed, memo)
            if out is not None and out.ok and self._commit(state, job, out, now, result, by_preemption=False):
                continue
            if out is not None and out.ok:  # placed but refused by a per-type quota maximum
                explicit[job.id] = out.reason or "over quota"
                continue
            if behind and reservation is not None:
                explicit[job.id] = f"behind the reservation of job {reservation.job_id}"
                continue
            if p.preemption and preemptions_left > 0 and allowed is None:
                preemptions_left -= 1
                if self._preempt(state, job, now, result, ranker, demand, memo):
                    continue
            explicit[job.id] = reason
            if p.backfill == "none":
                blocker = job
                break  # strict order: nothing behind it runs this cycle (they share one reason below)
            if p.backfill == "easy" and reservation is None:
                reservation = reserve(state, job, now, p.topology)
                if reservation is not None:
                    reserved_mask = reservation.mask(len(state.names))
                    outside_reservation = ~reserved_mask
                    result.decisions.append(
                        Reserve(job.id, tuple(state.names[i] for i in reservation.nodes), reservation.start_at)
                    )
        # Jobs past the examined head (or behind the strict-order blocker) share one reason, listed lazily.
        default = f"waiting behind job {blocker.id} (strict order, no backfill)" if blocker else _NOT_EXAMINED
        drop = {d.job_id for d in result.decisions if isinstance(d, Place)}
        drop.update(already)
        result.pending = PendingReasons(explicit, pending, default, drop, state.running)
        return result

    def _observe(self, pending: Sequence[Job]) -> None:
        """Teach the FGD distribution the jobs not seen before (in FIFO order for a ``PendingQueue``, whose
        additions since the last cycle are read from its log instead of scanning the whole backlog)."""
        if isinstance(pending, PendingQueue):
            mark = self._log_mark
            if mark is not None and mark[0] is pending:
                new, end = pending.added(mark[1])
                new.sort(key=attrgetter("submit_time", "id"))
            else:
                new, end = list(pending), pending.added(0)[1]
            self._log_mark = (pending, end)
        else:
            new = list(pending)
        seen = self._seen
        for job in new:
            if job.id not in seen:
                seen.add(job.id)
                self.distribution.observe(job)

    def _try_place(
        self, state: ClusterState, job: Job, allowed: BoolArray | None, memo: PlacementMemo | None
    ) -> tuple[Outcome | None, str, bool]:
        """Place ``job`` (outside the reservation when ``allowed`` is set), asking the memo first.

        Returns:
            The outcome when the placer ran (``None`` when the memo knew the answer), the reason when it does
            not fit, and whether it would fit on all nodes (so only the reservation holds it back).
        """
        restricted = allowed is not None
        if memo is None:
            out = self.placer.place(state, job, allowed)
            if out.ok or not restricted:
                return out, out.reason, False
            free_try = self.placer.place(state, job)
            return out, free_try.reason, free_try.ok
        shape = memo.shape(job)
        # Known not to fit on all nodes: it fits nowhere, outside the reservation neither.
        known, why = memo.failure(shape, False)
        if known:
            if why is None:
                why = self.placer.explain(state, job)
                memo.record_failure(shape, False, why)
            return None, why, False
        if restricted:
            known, why = memo.failure(shape, True)
            if not known:
                out = self.placer.place(state, job, allowed)
                if out.ok:
                    return out, "", False
                memo.record_failure(shape, True, out.reason)
            # Outside the reservation it does not fit; on all nodes? (decides the reason only)
            if memo.fits(shape):
                return None, "", True
            free_try = self.placer.place(state, job)
            if free_try.ok:
                memo.record_fit(shape)
                return None, "", True
            memo.record_failure(shape, False, free_try.reason)
            return None, free_try.reason, False
        out = self.placer.place(state, job)
        if not out.ok:
            memo.record_failure(shape, False, out.reason)
        return out, out.reason, False

    def _commit(
        self, state: ClusterState, job: Job, out: Outcome, now: float, result: CycleResult, by_preemption: bool
    ) -> bool:
        """Check per-type quota on the real devices, evict caches, allocate, record the decision."""
        demand = state.placed_demand(job, out.placements)
        refusal = quota_refusal(state, job, demand)
        if refusal:
            out.reason = refusal
            return False
        if self.policy.cache_affinity and job.datasets:
            for ev in plan_evictions(state, job, out.nodes):
                state.cache_drop(ev.node, ev.dataset)
                result.decisions.append(ev)
        state.allocate(job, out.placements, now, by_preemption=by_preemption, demand=demand)
        if job.datasets:
            for i in out.nodes:
                room = int(state.cache_capacity[i] - state.cache_used[i])
                for ds, size in job.datasets:
                    if ds not in state.cached[i] and size <= room:
                        state.cache_add(state.names[i], ds, size)
                        room -= size
        result.decisions.append(Place(job.id, out.placements))
        return True

    def _any_attained(self, state: ClusterState, threshold: float, now: float) -> bool:
        """Whether a running job has at least ``threshold`` attained service (memoised per cycle).

        A plain loop with inline arithmetic: it runs once per cycle over the running jobs (~0.1 us each),
        where the generic rank function cost ~15 us per job and dominated a Philly replay.
        """
        hit = self._demoted.get(threshold)
        if hit is None:
            hit = False
            for rj in state.running.values():
                rate = rj.accelerator_milli / FULL_MILLI
                if rj.job.attained_service + rate * (now - rj.started_at) >= threshold:
                    hit = True
                    break
            self._demoted[threshold] = hit
        return hit

    def _preempt(
        self,
        state: ClusterState,
        job: Job,
        now: float,
        result: CycleResult,
        ranker: LasRank | None,
        demand: Mapping[str, float],
        memo: PlacementMemo | None = None,
    ) -> bool:
        p = self.policy
        job_rank = rank_of(job, p, ranker)
        reclaim = within_guarantee(state, job, demand) and any(
            is_borrowing(state, ws, pool) for ws, pool in list(state.usage) if pool == job.pool and ws != job.workspace
        )
        # Cheap exits: scanning the running jobs costs ~10 ms at 30,000 of them.
        if not reclaim:
            if ranker is None and (not state.priorities or min(state.priorities) >= job.priority):
                return False
            if ranker is not None:
                q = ranker.pending(job)
                if q >= len(p.las_thresholds) or not self._any_attained(state, p.las_thresholds[q], now):
                    return False

        thresholds = p.las_thresholds

        def rank(rj: RunningJob) -> float:
            if ranker is None:
                return float(rj.job.priority)
            # Inline LAS queue of a running job (~0.5 us instead of ~2.5 us through LasRank).
            attained = rj.job.attained_service + rj.accelerator_milli / FULL_MILLI * (now - rj.started_at)
            q = 0
            for t in thresholds:
                if attained < t:
                    break
                q += 1
            return -float(q)

        # The candidates depend on the preemptor's rank, pool and (reclaiming) workspace only.
        shape = memo.shape(job) if memo is not None else None
        key: tuple[object, ...] = (job_rank, reclaim, job.workspace if reclaim else "")
        if memo is not None and shape is not None and memo.no_victims(shape, key):
            return False
        ev = find_eviction(
            state,
            self.placer,
            job,
            now,
            protect_s=p.preemption_protect_s,
            max_victims=p.max_victims,
            reclaim=reclaim,
            job_rank=job_rank,
            rank=rank,
        )
        if ev is None:
            if memo is not None and shape is not None:
                memo.record_no_victims(shape, key)
            return False
        for rj, why in ev.victims:
            result.decisions.append(Preempt(rj.job.id, why, job.id))
        if not self._commit(state, job, Outcome(ev.placements, "", set(ev.nodes)), now, result, by_preemption=True):
            for rj, _ in ev.victims:  # pragma: no cover - quota was checked before
                state.restore(rj)
            del result.decisions[-len(ev.victims) :]
            return False
        return True
