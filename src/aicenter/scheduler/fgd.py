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

from collections import Counter
from collections.abc import Iterable

import numpy as np
import numpy.typing as npt

from .model import FULL_MILLI, Job

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Learned fractions are rounded to this many milli so a trace with 100 distinct fractions still costs ~10-20
# classes to score (the cost is linear in classes); 50 milli keeps FGD's fragmentation-to-fit decisions.
_BUCKET = 50


class TaskDistribution:
    """Popularity of task classes ``(accelerator_milli, cpu_milli, memory_mib)``.

    Args:
        classes: Initial ``(accelerator_milli, cpu_milli, memory_mib, weight)`` tuples.
    """

    def __init__(self, classes: Iterable[tuple[int, int, int, float]] = ()) -> None:
        self._counts: Counter[tuple[int, int, int]] = Counter()
        for milli, cpu, mem, w in classes:
            self._counts[(milli, cpu, mem)] += w
        self._arrays: tuple[IntArray, IntArray, IntArray, FloatArray] | None = None
        self.fixed = bool(self._counts)
        """A configured distribution is not changed by ``observe``."""

    def __len__(self) -> int:
        return len(self._counts)

    def observe(self, job: Job) -> None:
        """Learn from a submitted job's replicas (no effect on a configured distribution)."""
        if self.fixed:
            return
        for t in job.tasks:
            r = t.request
            milli = r.milli
            if r.fractional:
                milli = min(FULL_MILLI - 1, max(1, round(milli / _BUCKET) * _BUCKET))
            # cpu/memory rounded to powers of two: fit tests stay meaningful, classes stay few.
            key = (milli, _pow2(r.cpu_milli), _pow2(r.memory_mib))
            self._counts[key] += t.replicas
            self._arrays = None

    def arrays(self) -> tuple[IntArray, IntArray, IntArray, FloatArray]:
        """(milli, cpu, memory, weight) arrays; weights sum to 1."""
        if self._arrays is None:
            keys = list(self._counts)
            if not keys:
                keys = [(FULL_MILLI, 0, 0)]
                weights = [1.0]
            else:
                weights = [float(self._counts[k]) for k in keys]
            w = np.array(weights, dtype=np.float64)
            self._arrays = (
                np.array([k[0] for k in keys], dtype=np.int64),
                np.array([k[1] for k in keys], dtype=np.int64),
                np.array([k[2] for k in keys], dtype=np.int64),
                w / w.sum(),
            )
        return self._arrays


def _pow2(v: int) -> int:
    return 0 if v <= 0 else 1 << (int(v) - 1).bit_length() if v & (v - 1) else int(v)


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
    cols: IntArray,
    milli: int,
    cpu: int,
    mem: int,
    dist: TaskDistribution,
) -> FloatArray:
    """Growth of expected fragmentation when a fraction ``milli`` goes to device ``cols[k]`` of ``nodes[k]``."""
    rows = dev_free[nodes]
    cf = cpu_free[nodes]
    mf = mem_free[nodes]
    before = expected_fragmentation(rows, cf, mf, dist)
    after_rows = rows.copy()
    after_rows[np.arange(len(nodes)), cols] -= milli
    after = expected_fragmentation(after_rows, cf - cpu, mf - mem, dist)
    out: FloatArray = after - before
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
