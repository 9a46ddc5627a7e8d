"""Preemption and reclaim: evict the smallest set of whole jobs that lets a higher-ranked job start.

Who may evict whom (strict, so no two jobs can evict each other in turn):
- priority: a victim has a lower priority than the preemptor;
- LAS (Tiresias): a victim sits in a lower queue (more attained service) than the preemptor;
- reclaim: the preemptor's workspace stays within its guarantee, the victim's workspace is borrowing; after
  the reclaim the preemptor's workspace is not borrowing, so the victim's cannot reclaim back. Reclaim is
  within one pool (quotas are per pool); by rank, a job of another pool that runs on a node of the
  preemptor's pool is a candidate too (pools overlap, so such a node serves both).

Victims are preemptible, not protected (a job started by preemption is immune for ``preemption_protect_s``),
and preferred in this order: lowest rank, most recently checkpointed, shortest running. The search releases
the candidates in the state (what-if), places the preemptor, keeps only victims on the nodes it got, then
drops every victim whose eviction turns out unnecessary, smallest first (so the set is minimal: no victim can
be spared, and few large victims beat many small ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .admission import is_borrowing
from .model import FULL_MILLI, Job, ReplicaPlacement, RunningJob
from .placement import Placer
from .state import ClusterState


@dataclass(frozen=True, slots=True)
class Eviction:
    """Victims released in the state and the preemptor's placement on the freed capacity."""

    victims: tuple[tuple[RunningJob, str], ...]
    placements: tuple[ReplicaPlacement, ...]
    nodes: frozenset[int]


def _preference(rj: RunningJob, now: float, rank: float) -> tuple[float, float, float]:
    ckpt = now - rj.job.last_checkpoint_at if rj.job.last_checkpoint_at is not None else float("inf")
    return (rank, ckpt, now - rj.started_at)


def _could_fit(state: ClusterState, job: Job, victims: list[RunningJob]) -> bool:
    """Cheap necessary condition before the what-if releases: enough devices in all, and for the largest
    whole-device replica, one node with enough devices once the victims leave."""
    need = job.accelerator_milli
    if need == 0:
        return True
    pool = state.ready & state.pool_mask(job.pool)
    free = int(state.dev_free[pool].sum())
    if free + sum(v.accelerator_milli for v in victims) < need:
        return False
    g = max((t.request.accelerators for t in job.tasks), default=0)
    if g <= 1:
        return True
    gain: dict[int, int] = {}
    for v in victims:
        for p in v.placements:
            if len(p.devices) and p.accelerator_milli >= FULL_MILLI * len(p.devices):
                i = state.index[p.node]
                gain[i] = gain.get(i, 0) + len(p.devices)
    ff = state.full_free_all
    if int(ff[pool].max(initial=0)) >= g:
        return True
    return any(pool[i] and ff[i] + n >= g for i, n in gain.items())


def find_eviction(
    state: ClusterState,
    placer: Placer,
    job: Job,
    now: float,
    *,
    protect_s: float,
    max_victims: int,
    reclaim: bool,
    job_rank: float,
    rank: Callable[[RunningJob], float],
) -> Eviction | None:
    """Find and apply (release in the state) a minimal set of victims for ``job``.

    Args:
        state: The state; victims are released in it on success, unchanged on failure.
        placer: Places the preemptor.
        job: The preemptor.
        now: Current time.
        protect_s: Jobs started by preemption within this many seconds are immune.
        max_victims: Candidates considered.
        reclaim: The preemptor's workspace may reclaim from borrowing workspaces.
        job_rank: The preemptor's rank; victims must rank strictly lower (unless reclaimed).
        rank: Rank of a running job.

    Returns:
        The eviction, or ``None``.
    """
    borrowing: dict[str, bool] = {}
    members = state.pool_mask(job.pool)
    cands: list[tuple[tuple[float, float, float], str, RunningJob, str]] = []
    for rj in state.running.values():
        v = rj.job
        if not v.preemptible:
            continue
        # Pools overlap: a job of another pool is a victim only where it sits on a node of the preemptor's pool,
        # and only by rank; reclaim is a matter of one pool's quotas.
        same_pool = v.pool == job.pool
        if not same_pool and not any(members[state.index[p.node]] for p in rj.placements):
            continue
        if rj.by_preemption and now - rj.started_at < protect_s:
            continue
        r = rank(rj)  # once per job: for LAS this is the costly part of the scan
        if r < job_rank:
            why = f"preempted for job {job.id} of higher rank"
        elif reclaim and same_pool and v.workspace != job.workspace:
            if v.workspace not in borrowing:
                borrowing[v.workspace] = is_borrowing(state, v.workspace, v.pool)
            if not borrowing[v.workspace]:
                continue
            why = f"workspace {job.workspace} reclaims its guaranteed quota lent to {v.workspace}"
        else:
            continue
        cands.append((_preference(rj, now, r), v.id, rj, why))
    if not cands:
        return None
    cands.sort(key=lambda c: (c[0], c[1]))
    cands = cands[:max_victims]
    if not _could_fit(state, job, [c[2] for c in cands]):
        return None
    # What-if releases: capacity only (``lift``), unless cache affinity reads the running jobs' datasets.
    light = not job.datasets

    def free(rj: RunningJob) -> RunningJob:
        if light:
            state.lift([rj])
            return rj
        return state.release(rj.job.id)

    def hold(rj: RunningJob) -> None:
        if light:
            state.unlift([rj])
        else:
            state.restore(rj)

    released: dict[str, tuple[RunningJob, str]] = {}
    if light:
        state.lift([c[2] for c in cands])
        released = {jid: (rj, why) for _, jid, rj, why in cands}
    else:
        for _, jid, _rj, why in cands:
            released[jid] = (state.release(jid), why)
    out = placer.place(state, job)
    if not out.ok:
        if light:
            state.unlift([rj for rj, _ in released.values()])
        else:
            for rj, _ in released.values():
                state.restore(rj)
        return None
    # Keep only victims on the nodes the preemptor got; give the others back.
    spared = [
        jid for jid, (rj, _) in released.items() if not any(state.index[p.node] in out.nodes for p in rj.placements)
    ]
    if light:
        state.unlift([released[jid][0] for jid in spared])
    for jid in spared:
        if not light:
            state.restore(released[jid][0])
        del released[jid]

    # Minimality: try sparing each victim; the smallest first (so the fewest, largest jobs remain victims),
    # among equals the least preferred victim first.
    def spare_order(j: str) -> tuple[int, tuple[float, float, float]]:
        rj = released[j][0]
        pref = _preference(rj, now, rank(rj))
        return (rj.accelerator_milli, (-pref[0], -pref[1], -pref[2]))

    for jid in sorted(released, key=spare_order):
        rj, why = released[jid]
        hold(rj)
        trial = placer.place(state, job)
        if trial.ok:
            del released[jid]
            out = trial
        else:
            released[jid] = (free(rj) if light else state.release(jid), why)
    if not out.ok:  # pragma: no cover - the last successful trial stands
        return None
    if light:  # the victims leave for real now
        state.unlift([rj for rj, _ in released.values()])
        for jid, (_, why) in list(released.items()):
            released[jid] = (state.release(jid), why)
    final = placer.place(state, job)
    if not final.ok:  # pragma: no cover - state is as when ``out`` was found
        for rj, _ in released.values():
            state.restore(rj)
        return None
    return Eviction(tuple(released.values()), final.placements, frozenset(final.nodes))
