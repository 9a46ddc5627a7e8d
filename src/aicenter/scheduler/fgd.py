"""Fragmentation-gradient placement (in the spirit of FGD, USENIX ATC'23 "Beware of Fragmentation").

A node's accelerator fragmentation *for a task class* is the free accelerator share that class cannot use:
all of the node's free share when the class does not fit at all (cpu, memory or accelerators short);
otherwise the partially used devices too small for it (for a fraction g: devices with less than g free; for
whole devices: every partially used device). The node's *expected* fragmentation weights each class by its
popularity in the workload. FGD places a task where this expectation grows least, which keeps whole devices
whole and fills partial devices with the fractions that fit them exactly.

The workload's distribution is configured (``PolicyConfig.fgd_task_classes``), passed in, or learned from the
jobs the scheduler sees (``TaskDistribution.observe``).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from .model import FULL_MILLI, Job

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Learned fractions are rounded to this many milli so a trace with 100 distinct fractions still costs ~10-20
# classes to score (the cost is linear in classes); 50 milli keeps FGD's fragmentation-to-fit decisions.
_BUCKET = 50
MAX_CLASSES = 16


class TaskDistribution:
    """Popularity of task classes ``(accelerator_milli, cpu_milli, memory_mib)``.

    Learned classes are keyed by accelerator share only (fractions in steps of 50 milli) and carry the mean
    cpu and memory of their tasks: keying by cpu/memory too scatters the weight over hundreds of classes, and
    rounding cpu up (we tried powers of two) makes big classes fit no node at all, which hides them from FGD.

    Args:
        classes: Configured ``(accelerator_milli, cpu_milli, memory_mib, weight)`` tuples (then fixed).
    """

    def __init__(self, classes: Iterable[tuple[int, int, int, float]] = ()) -> None:
        # key -> [weight, weighted cpu sum, weighted memory sum]
        self._stats: dict[int | tuple[int, int, int], list[float]] = {}
        for milli, cpu, mem, w in classes:
            st = self._stats.setdefault((milli, cpu, mem), [0.0, 0.0, 0.0])
            st[0] += w
            st[1] += w * cpu
            st[2] += w * mem
        self._arrays: tuple[IntArray, IntArray, IntArray, FloatArray] | None = None
        self.fixed = bool(self._stats)
        """A configured distribution is not changed by ``observe``."""

    def __len__(self) -> int:
        return len(self._stats)

    def observe(self, job: Job) -> None:
        """Learn from a submitted job's replicas (no effect on a configured distribution)."""
        if self.fixed:
            return
        for t in job.tasks:
            r = t.request
            st = self._stats.setdefault(_bucket(r.milli), [0.0, 0.0, 0.0])
            st[0] += t.replicas
            st[1] += t.replicas * r.cpu_milli
            st[2] += t.replicas * r.memory_mib
            self._arrays = None

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
        """(milli, cpu, memory, weight) arrays of the most popular classes; weights sum to 1."""
        if self._arrays is None:
            # The most popular classes only: cost is linear in classes, and rare ones barely move the
            # expectation (16 classes cover ~99% of openb's default tasks).
            keys = sorted(self._stats, key=lambda k: -self._stats[k][0])[:MAX_CLASSES]
            rows: list[tuple[int, int, int, float]] = []
            for k in keys:
                w, cpu, mem = self._stats[k]
                milli = k[0] if isinstance(k, tuple) else k
                rows.append((milli, round(cpu / w), round(mem / w), w))
            if not rows:
                rows = [(FULL_MILLI, 0, 0, 1.0)]
            w_arr = np.array([r[3] for r in rows], dtype=np.float64)
            self._arrays = (
                np.array([r[0] for r in rows], dtype=np.int64),
                np.array([r[1] for r in rows], dtype=np.int64),
                np.array([r[2] for r in rows], dtype=np.int64),
                w_arr / w_arr.sum(),
            )
        return self._arrays


def _bucket(milli: int) -> int:
    if 0 < milli < FULL_MILLI:
        return min(FULL_MILLI - 1, max(1, round(milli / _BUCKET) * _BUCKET))
    return milli


def expected_fragmentation(
    dev_free: IntArray, cpu_free: IntArray, mem_free: IntArray, dist: TaskDistribution
) -> FloatArray:
    """Expected fragmentation (milli) of K nodes.

    Args:
        dev_free: (K, D) free milli per device (0 for absent devices).
        cpu_free: (K,) free cpu.
        mem_free: (K,) free memory.
        dist: The task distribution.

    Returns:
        (K,) expected fragmented milli.
    """
    milli, cpu, mem, w = dist.arrays()
    total = dev_free.sum(axis=1)
    full = dev_free == FULL_MILLI
    nfull = full.sum(axis=1)
    partial = total - nfull * FULL_MILLI
    fits_res = (cpu_free[:, None] >= cpu[None, :]) & (mem_free[:, None] >= mem[None, :])
    frag = np.empty(fits_res.shape, dtype=np.float64)
    is_frac = (milli > 0) & (milli < FULL_MILLI)
    is_whole = milli >= FULL_MILLI
    is_none = milli == 0
    if is_whole.any():
        k = milli[is_whole] // FULL_MILLI
        fits = fits_res[:, is_whole] & (nfull[:, None] >= k[None, :])
        frag[:, is_whole] = np.where(fits, partial[:, None], total[:, None])
    if is_frac.any():
        g = milli[is_frac]
        small = dev_free[:, :, None] < g[None, None, :]
        fragf = (dev_free[:, :, None] * small).sum(axis=1)
        fits = fits_res[:, is_frac] & (~small).any(axis=1)
        frag[:, is_frac] = np.where(fits, fragf, total[:, None])
    if is_none.any():
        frag[:, is_none] = np.where(fits_res[:, is_none], 0, total[:, None])
    result: FloatArray = frag @ w
    return result


def fractional_deltas(
    dev_free: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    nodes: IntArray,
    rows: IntArray,
    cols: IntArray,
    milli: int,
    cpu: int,
    mem: int,
    dist: TaskDistribution,
) -> FloatArray:
    """Growth of expected fragmentation when a fraction ``milli`` goes to device ``cols[k]`` of
    ``nodes[rows[k]]`` (each node's "before" is computed once, not once per device)."""
    cur = dev_free[nodes]
    cf = cpu_free[nodes]
    mf = mem_free[nodes]
    before = expected_fragmentation(cur, cf, mf, dist)
    after_rows = cur[rows]
    after_rows[np.arange(len(rows)), cols] -= milli
    after = expected_fragmentation(after_rows, cf[rows] - cpu, mf[rows] - mem, dist)
    out: FloatArray = after - before[rows]
    return out


def whole_deltas(
    dev_free: IntArray,
    cpu_free: IntArray,
    mem_free: IntArray,
    nodes: IntArray,
    devices: int,
    cpu: int,
    mem: int,
    dist: TaskDistribution,
) -> FloatArray:
    """Growth of expected fragmentation when ``devices`` whole devices of each of ``nodes`` are taken."""
    rows = dev_free[nodes]
    cf = cpu_free[nodes]
    mf = mem_free[nodes]
    before = expected_fragmentation(rows, cf, mf, dist)
    after_rows = rows.copy()
    # Taking whole devices: which full ones does not matter for fragmentation, so take the first ones.
    full = after_rows == FULL_MILLI
    rank = np.cumsum(full, axis=1)
    after_rows[full & (rank <= devices)] = 0
    after = expected_fragmentation(after_rows, cf - cpu, mf - mem, dist)
    out: FloatArray = after - before
    return out
