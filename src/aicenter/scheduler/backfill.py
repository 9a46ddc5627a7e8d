"""EASY backfill: the first job that does not fit keeps a reservation; later jobs must not delay it.

With runtime estimates, the reservation is where and when enough running jobs will have ended (a binary search
over their expected ends; each probe is one vector pass). Later jobs may use the reserved nodes only if they
end (now + estimate) before the reservation starts. Without estimates, the reservation holds the nodes the head
job will most likely get first (the roomiest, under one leaf if possible), and later jobs run only in its
shadow: on the other nodes.

Approximation, stated: the future capacity is computed for the job's largest task (whole devices or cpu-only);
device-sharing replicas are small and do not need reservations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .model import FULL_MILLI, Job, ReplicaRequest
from .state import ClusterState
from .topology import NodeChoice, choose_nodes

BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class Reservation:
    """Nodes held for ``job_id`` from ``start_at`` (``None``: unknown, no estimates)."""

    job_id: str
    nodes: tuple[int, ...]
    start_at: float | None

    def mask(self, n: int) -> BoolArray:
        """Boolean array over nodes: reserved."""
        m = np.zeros(n, dtype=bool)
        m[list(self.nodes)] = True
        return m


def _anchor(job: Job) -> tuple[ReplicaRequest, int]:
    task = max(job.tasks, key=lambda t: (t.request.milli, t.request.cpu_milli))
    return task.request, task.replicas


def _cap(
    state: ClusterState, r: ReplicaRequest, ff: IntArray, cpu: IntArray, mem: IntArray, base: BoolArray
) -> IntArray:
    cap = np.where(base, 1 << 20, 0).astype(np.int64)
    if r.accelerators:
        cap = np.minimum(cap, ff // r.accelerators)
    elif r.fractional:
        cap = np.minimum(cap, ff)
    if r.cpu_milli:
        cap = np.minimum(cap, cpu // r.cpu_milli)
    if r.memory_mib:
        cap = np.minimum(cap, mem // r.memory_mib)
    return cap


def reserve(state: ClusterState, job: Job, now: float, topology: bool) -> Reservation | None:
    """Compute the head job's reservation (``None`` when it cannot fit even on an empty pool).

    Args:
        state: The state.
        job: The head job that did not fit.
        now: Current time.
        topology: Keep the reserved nodes under one leaf when possible.
    """
    r, k = _anchor(job)
    base = state.ready & state.pool_mask(job.pool)
    if r.accelerator_types:
        ids = [state.type_id[t] for t in r.accelerator_types if t in state.type_id]
        base = base & np.isin(state.dev_type, ids).any(axis=1)
    total_cap = _cap(state, r, state.dev_count, state.cpu_cap, state.mem_cap, base)
    if int(total_cap.sum()) < k:
        return None
    ends: list[tuple[float, int, int, int, int]] = []  # (end, node, devices, cpu, mem) per replica
    for rj in state.running.values():
        end = rj.expected_end()
        if end is None:
            continue
        req = {t.name: t.request for t in rj.job.tasks}
        for p in rj.placements:
            q = req[p.task]
            whole = len(p.devices) if not q.fractional else 0
            ends.append((max(end, now), state.index[p.node], whole, q.cpu_milli, q.memory_mib))
    if ends:
        ends.sort()
        arr = np.array([e[1:] for e in ends], dtype=np.int64)
        times = [e[0] for e in ends]
        n = len(state.names)

        def probe(p: int) -> NodeChoice | None:
            ff = state.full_free_all + np.bincount(arr[:p, 0], weights=arr[:p, 1], minlength=n).astype(np.int64)
            cpu = state.cpu_free + np.bincount(arr[:p, 0], weights=arr[:p, 2], minlength=n).astype(np.int64)
            mem = state.mem_free + np.bincount(arr[:p, 0], weights=arr[:p, 3], minlength=n).astype(np.int64)
            got = choose_nodes(state, _cap(state, r, ff, cpu, mem, base), k, "binpack", topology, "none")
            return got if isinstance(got, NodeChoice) else None

        if probe(len(ends)) is not None:
            lo, hi = 1, len(ends)
            while lo < hi:
                mid = (lo + hi) // 2
                if probe(mid) is not None:
                    hi = mid
                else:
                    lo = mid + 1
            choice = probe(lo)
            assert choice is not None
            return Reservation(job.id, tuple(sorted(i for i, _ in choice.nodes)), times[lo - 1])
    # No estimates (or not enough): hold the roomiest nodes, under one leaf when one is big enough.
    now_ff = state.full_free_all if r.accelerators else np.zeros_like(state.full_free_all)
    cand = np.flatnonzero(total_cap)
    leaf_total = np.bincount(state.leaf_of[cand], weights=total_cap[cand], minlength=len(state.leaf_names))
    if topology and leaf_total.max() >= k:
        leaf_free = np.bincount(state.leaf_of[cand], weights=now_ff[cand], minlength=len(state.leaf_names))
        ok = np.flatnonzero(leaf_total >= k)
        leaf = ok[np.argmax(leaf_free[ok])]
        cand = cand[state.leaf_of[cand] == leaf]
    order = cand[np.argsort(-(now_ff[cand] * (1 << 20) + state.cpu_free[cand] // FULL_MILLI), kind="stable")]
    picked: list[int] = []
    got = 0
    for i in order:
        picked.append(int(i))
        got += int(total_cap[i])
        if got >= k:
            break
    return Reservation(job.id, tuple(sorted(picked)), None)
