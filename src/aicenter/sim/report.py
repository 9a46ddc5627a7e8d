"""Turn simulator results into the JSON report (see docs/simulator.md for every field)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from aicenter.sim.engine import SimResult
from aicenter.sim.metrics import jain_index, job_metrics, normalized_service, time_average


def _clean(value: Any) -> Any:
    """JSON-safe: NaN/inf become None, numpy scalars become Python numbers, floats keep 6 significant digits."""
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        return float(f"{value:.6g}")
    return value


def summarize(result: SimResult, window: tuple[float, float] | None = None) -> dict[str, Any]:
    """The report of one policy's run.

    Args:
        result: What the simulator returned.
        window: The trace window (simulated seconds); allocation is also averaged over it when given.
    """
    out: dict[str, Any] = {"policy": result.policy, "mode": result.mode}
    if result.fill is not None:
        f = result.fill
        failed = f.failed_task
        out["fill"] = {
            "total_gpus": f.total_gpus,
            "allocated_gpus": f.allocated_gpus,
            "unallocated_gpus": f.unallocated_gpus,
            "unallocated_fraction": f.unallocated_gpus / f.total_gpus if f.total_gpus else None,
            "tasks_placed": f.tasks_placed,
            "arrived_gpus": f.arrived_gpus,
            "passes": f.passes,
            "failed_task": None
            if failed is None
            else {
                "id": failed.id,
                "gpus": failed.gpus,
                "gpu_milli": failed.gpu_milli,
                "cpu_milli": failed.cpu_milli,
                "memory_mib": failed.memory_mib,
                "reason": f.failed_reason,
            },
        }
    else:
        metrics = job_metrics(result.outcomes)
        out.update(metrics)
        tl = result.timeline
        first = min((o.submit for o in result.outcomes), default=0.0)
        end = first + float(metrics["makespan_s"])  # type: ignore[arg-type]
        avg = time_average(tl.t, tl.allocated_gpus, first, end)
        allocation: dict[str, Any] = {
            "avg_gpus": avg,
            "avg_fraction": None if avg is None or not result.total_gpus else avg / result.total_gpus,
        }
        if window is not None:
            in_window = time_average(tl.t, tl.allocated_gpus, window[0], window[1])
            allocation["window_avg_gpus"] = in_window
            allocation["window_avg_fraction"] = (
                None if in_window is None or not result.total_gpus else in_window / result.total_gpus
            )
        out["gpu_allocation"] = allocation
        out["queue_length"] = {
            "avg": time_average(tl.t, tl.queue_length, first, end),
            "max": max(tl.queue_length, default=0),
        }
        service = normalized_service(tl, result.total_gpus, end)
        per_ws = {w: float(s) for w, s in zip(result.workspaces, service, strict=False)}
        valid = [s for s in per_ws.values() if math.isfinite(s)]
        out["fairness"] = {
            "jain_index": jain_index(valid),
            "workspaces": len(valid),
            "normalized_service": per_ws,
        }
    out["run"] = {
        "cycles": result.cycles,
        "wall_s": result.wall_s,
        "scheduler_s": result.scheduler_s,
        "decisions": result.decisions,
    }
    return _clean(out)  # type: ignore[no-any-return]
