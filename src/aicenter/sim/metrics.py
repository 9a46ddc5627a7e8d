"""Metrics of a simulated run: JCT, queueing delay, makespan, allocation, fairness (definitions: docs/simulator.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]


@dataclass(slots=True)
class JobOutcome:
    """What happened to one job. Times are simulated seconds; ``None`` = never happened."""

    id: str
    workspace: str
    submit: float
    duration: float
    gpus: float
    first_start: float | None = None
    finish: float | None = None
    run_s: float = 0.0
    preemptions: int = 0

    @property
    def jct(self) -> float | None:
        return None if self.finish is None else self.finish - self.submit

    @property
    def queueing_delay(self) -> float | None:
        return None if self.first_start is None else self.first_start - self.submit

    @property
    def pending_s(self) -> float | None:
        """All time spent waiting, including after preemptions (JCT minus time holding resources)."""
        return None if self.finish is None else self.finish - self.submit - self.run_s


@dataclass(slots=True)
class Timeline:
    """Step functions sampled after every change: value ``i`` holds over ``[t[i], t[i+1])``."""

    t: list[float] = field(default_factory=list)
    allocated_gpus: list[float] = field(default_factory=list)
    queue_length: list[int] = field(default_factory=list)
    running: list[int] = field(default_factory=list)
    ws_allocated: list[FloatArray] = field(default_factory=list)
    ws_demand: list[FloatArray] = field(default_factory=list)

    def record(
        self,
        now: float,
        allocated: float,
        queued: int,
        running: int,
        ws_allocated: FloatArray | None = None,
        ws_demand: FloatArray | None = None,
    ) -> None:
        """Append a sample, or overwrite the last one when the time has not moved."""
        if self.t and self.t[-1] == now:
            self.t.pop()
            self.allocated_gpus.pop()
            self.queue_length.pop()
            self.running.pop()
            if self.ws_allocated:
                self.ws_allocated.pop()
                self.ws_demand.pop()
        self.t.append(now)
        self.allocated_gpus.append(allocated)
        self.queue_length.append(queued)
        self.running.append(running)
        if ws_allocated is not None and ws_demand is not None:
            self.ws_allocated.append(ws_allocated.copy())
            self.ws_demand.append(ws_demand.copy())


def percentile(values: Sequence[float] | FloatArray, q: float) -> float | None:
    """The q-th percentile (linear interpolation, as numpy's default); ``None`` for no values."""
    arr = np.asarray(values, dtype=np.float64)
    return float(np.percentile(arr, q)) if arr.size else None


def mean(values: Sequence[float] | FloatArray) -> float | None:
    arr = np.asarray(values, dtype=np.float64)
    return float(arr.mean()) if arr.size else None


def distribution(values: Sequence[float] | FloatArray) -> dict[str, float | None]:
    """avg, median, p95 and p99 of ``values``."""
    arr = np.asarray(values, dtype=np.float64)
    return {
        "avg": mean(arr),
        "median": percentile(arr, 50),
        "p95": percentile(arr, 95),
        "p99": percentile(arr, 99),
    }


def time_average(
    t: Sequence[float] | FloatArray, values: Sequence[float] | FloatArray, start: float, end: float
) -> float | None:
    """Average of the step function (``values[i]`` over ``[t[i], t[i+1])``) over ``[start, end]``; 0 before t[0]."""
    if end <= start:
        return None
    ts = np.asarray(t, dtype=np.float64)
    vs = np.asarray(values, dtype=np.float64)
    if ts.size == 0:
        return 0.0
    left = np.clip(ts, start, end)
    right = np.clip(np.append(ts[1:], max(end, float(ts[-1]))), start, end)
    return float(np.sum(vs * (right - left)) / (end - start))


def jain_index(values: Sequence[float] | FloatArray) -> float | None:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 = all equal, 1/n = one takes everything."""
    arr = np.asarray(values, dtype=np.float64)
    if arr.size == 0:
        return None
    denominator = arr.size * float(np.sum(arr * arr))
    return 1.0 if denominator == 0 else float(np.sum(arr)) ** 2 / denominator


def max_min_share(demand: FloatArray, capacity: float) -> FloatArray:
    """Max-min fair (water-filling) entitlement of each column for each row of ``demand`` (rows x tenants).

    Every tenant gets min(demand, L) where the level L makes the entitlements sum to ``capacity``, or its whole
    demand when all demands fit.
    """
    demand = np.atleast_2d(np.asarray(demand, dtype=np.float64))
    rows, width = demand.shape
    if width == 0:
        return demand.copy()
    ordered = np.sort(demand, axis=1)
    before = np.cumsum(ordered, axis=1) - ordered  # sum of the smaller demands
    remaining = width - np.arange(width)
    total_at = before + remaining * ordered  # what a level of ordered[:, k] hands out
    enough = total_at >= capacity
    k = np.argmax(enough, axis=1)
    idx = np.arange(rows)
    level = np.where(enough.any(axis=1), (capacity - before[idx, k]) / remaining[k], np.inf)
    return np.minimum(demand, level[:, None])


def normalized_service(timeline: Timeline, capacity: float, end: float) -> FloatArray:
    """Per tenant: accelerator-seconds received / max-min fair accelerator-seconds, over the whole run.

    NaN for a tenant that never had demand.
    """
    if not timeline.ws_allocated:
        return np.zeros(0)
    t = np.asarray(timeline.t, dtype=np.float64)
    dt = np.diff(np.append(t, max(end, float(t[-1]))))
    alloc = np.vstack(timeline.ws_allocated)
    entitled = max_min_share(np.vstack(timeline.ws_demand), capacity)
    got = (alloc * dt[:, None]).sum(axis=0)
    fair = (entitled * dt[:, None]).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(fair > 0, got / fair, np.nan)


def job_metrics(outcomes: Sequence[JobOutcome]) -> dict[str, object]:
    """JCT and queueing-delay distributions, makespan and preemptions over the jobs that finished."""
    done = [o for o in outcomes if o.finish is not None]
    started = [o for o in outcomes if o.first_start is not None]
    jct = [o.finish - o.submit for o in done if o.finish is not None]
    delay = [o.first_start - o.submit for o in started if o.first_start is not None]
    pending = [o.finish - o.submit - o.run_s for o in done if o.finish is not None]
    first_submit = min((o.submit for o in outcomes), default=0.0)
    last_finish = max((o.finish for o in done if o.finish is not None), default=first_submit)
    slowdown = [(o.finish - o.submit) / o.duration for o in done if o.finish is not None and o.duration > 0]
    return {
        "jobs": len(outcomes),
        "finished": len(done),
        "unfinished": len(outcomes) - len(done),
        "jct_s": distribution(jct),
        "queueing_delay_s": {"avg": mean(delay), "median": percentile(delay, 50), "p99": percentile(delay, 99)},
        "pending_time_s": {"avg": mean(pending), "p99": percentile(pending, 99)},
        "slowdown": {"avg": mean(slowdown), "median": percentile(slowdown, 50)},
        "makespan_s": last_finish - first_submit,
        "preemptions": sum(o.preemptions for o in outcomes),
    }
