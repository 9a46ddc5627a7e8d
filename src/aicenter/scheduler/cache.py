"""Dataset-cache affinity: prefer nodes that hold a job's dataset versions; make room by evicting obsolete ones.

Preference, best first: nodes caching every dataset of the job; nodes with room to cache the missing ones;
nodes that get the room by dropping *obsolete* caches (datasets no job running on the node reads), scored by how
much they could drop; then any node (the job reads remotely). Evictions are returned as ``EvictCache``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from .model import EvictCache, Job
from .state import ClusterState

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class CacheTier:
    """A preference level: a node mask and, optionally, a node score (lower is better)."""

    name: str
    mask: BoolArray
    score: FloatArray | None = None


def _have(state: ClusterState, job: Job) -> npt.NDArray[np.int64]:
    have = np.zeros(len(state.index), dtype=np.int64)
    for ds, size in job.datasets:
        holders = state.cache_holders.get(ds)
        if holders:
            have[list(holders)] += size
    return have


def obsolete_mib(state: ClusterState, i: int, keep: set[str]) -> int:
    """Cache on node ``i`` that no running job there reads and that is not in ``keep``."""
    in_use = state.datasets_in_use(i) | keep
    return sum(size for ds, size in state.cached[i].items() if ds not in in_use)


def cache_tiers(state: ClusterState, job: Job, feasible: BoolArray) -> list[CacheTier]:
    """Preference masks for a job with datasets (empty list when it reads none).

    Args:
        state: The cluster state.
        job: The job.
        feasible: Nodes that could take at least one replica (limits the Python work of the eviction tier).
    """
    if not job.datasets:
        return []
    total = sum(size for _, size in job.datasets)
    have = _have(state, job)
    missing = total - have
    room = state.cache_capacity - state.cache_used
    tiers = [CacheTier("cached", have >= total), CacheTier("room", room >= missing)]
    # Eviction tier: only nodes short of room but large enough; Python per node, so only feasible ones.
    short = np.flatnonzero(feasible & (room < missing) & (state.cache_capacity >= missing))
    if short.size:
        keep = {ds for ds, _ in job.datasets}
        reclaim = np.zeros(len(state.index), dtype=np.float64)
        mask = np.zeros(len(state.index), dtype=bool)
        for i in short[:2048]:
            r = room[i] + obsolete_mib(state, int(i), keep)
            if r >= missing[i]:
                mask[i] = True
                reclaim[i] = r
        # More reclaimable space first: the node keeps room for the next dataset too.
        tiers.append(CacheTier("evict", mask, -reclaim))
    return tiers


def plan_evictions(state: ClusterState, job: Job, nodes: set[int]) -> list[EvictCache]:
    """Evictions that make room for the job's missing datasets on the chosen nodes (largest obsolete first)."""
    out: list[EvictCache] = []
    keep = {ds for ds, _ in job.datasets}
    for i in sorted(nodes):
        missing = sum(size for ds, size in job.datasets if ds not in state.cached[i])
        room = int(state.cache_capacity[i] - state.cache_used[i])
        if missing <= room or state.cache_capacity[i] < missing:
            continue
        in_use = state.datasets_in_use(i) | keep
        victims = sorted(((size, ds) for ds, size in state.cached[i].items() if ds not in in_use), reverse=True)
        chosen: list[str] = []
        for size, ds in victims:
            if room >= missing:
                break
            chosen.append(ds)
            room += size
        if room >= missing:
            out.extend(EvictCache(state.names[i], ds) for ds in chosen)
    return out
