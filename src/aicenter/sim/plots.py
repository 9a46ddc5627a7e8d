"""PNG plots of one or several runs (one line per policy): JCT CDF, allocation and queue length over time."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: no display on servers and in CI

import matplotlib.pyplot as plt
import numpy as np

from aicenter.sim.engine import SimResult
from aicenter.sim.metrics import FloatArray

_MAX_POINTS = 4000  # a month replays into ~10^5 samples; more points than pixels only slow the renderer


def _thin(t: Sequence[float], v: Sequence[float]) -> tuple[FloatArray, FloatArray]:
    ts, vs = np.asarray(t, dtype=float), np.asarray(v, dtype=float)
    if ts.size <= _MAX_POINTS:
        return ts, vs
    step = int(np.ceil(ts.size / _MAX_POINTS))
    keep = np.append(np.arange(0, ts.size, step), ts.size - 1)  # the last sample shows how the run ended
    return ts[keep], vs[keep]


def plot_results(results: Sequence[SimResult], path: str | Path, title: str = "") -> Path:
    """Write a PNG to ``path``; replay runs get three panels, fill runs two."""
    path = Path(path)
    fill = any(r.fill is not None for r in results)
    if fill:
        fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
        ax_alloc, ax_bar = axes
        for r in results:
            x, y = _thin(r.timeline.t, r.timeline.allocated_gpus)
            ax_alloc.plot(x, r.total_gpus - y, label=r.policy, drawstyle="steps-post")
        ax_alloc.set_xlabel("arrived GPU demand (GPUs)")
        ax_alloc.set_ylabel("unallocated GPUs")
        ax_alloc.set_title("unallocated GPUs as tasks arrive")
        ax_alloc.legend()
        names = [r.policy for r in results]
        values = [r.fill.unallocated_gpus if r.fill else 0.0 for r in results]
        ax_bar.bar(names, values, color=[f"C{i}" for i in range(len(results))])
        ax_bar.set_ylabel("unallocated GPUs at first failure")
        ax_bar.set_title("fragmentation")
    else:
        fig, axes = plt.subplots(1, 3, figsize=(17, 4.5))
        ax_cdf, ax_alloc, ax_queue = axes
        for r in results:
            jct = np.sort([o.finish - o.submit for o in r.outcomes if o.finish is not None])
            if jct.size:
                ax_cdf.plot(np.maximum(jct, 1.0), np.arange(1, jct.size + 1) / jct.size, label=r.policy)
            x, y = _thin(r.timeline.t, r.timeline.allocated_gpus)
            ax_alloc.plot(x / 86400.0, y, label=r.policy, drawstyle="steps-post", linewidth=0.8)
            x, q = _thin(r.timeline.t, r.timeline.queue_length)
            ax_queue.plot(x / 86400.0, q, label=r.policy, drawstyle="steps-post", linewidth=0.8)
        ax_cdf.set_xscale("log")
        ax_cdf.set_xlabel("JCT (s)")
        ax_cdf.set_ylabel("fraction of jobs")
        ax_cdf.set_title("JCT CDF")
        total = max((r.total_gpus for r in results), default=0.0)
        if total:
            ax_alloc.axhline(total, color="grey", linestyle=":", linewidth=0.8)
        ax_alloc.set_xlabel("day")
        ax_alloc.set_ylabel("allocated GPUs")
        ax_alloc.set_title("GPU allocation")
        ax_queue.set_xlabel("day")
        ax_queue.set_ylabel("pending jobs")
        ax_queue.set_title("queue length")
        for ax in axes:
            ax.grid(alpha=0.3)
            ax.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
