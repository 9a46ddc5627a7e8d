"""``report(step=..., loss=...)``: a job's metrics, as JSON lines in its run directory.

Cheap by design, since training loops call it every step: one ``open``/``write``/``close`` per call, flushed to
the kernel but not fsynced (a metric lost to a power cut is acceptable; a slowed training loop is not). The
server reads ``$AICENTER_RUN_DIR/metrics.jsonl`` where it is (``aicenter.services.jobs.job_metrics``).
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path

from aicenter.runtime.files import METRICS_FILE, utc_stamp

__all__ = ["metrics_path", "report"]

_warned = False


def metrics_path() -> Path | None:
    """``$AICENTER_RUN_DIR/metrics.jsonl``, or None outside a job."""
    run_dir = os.environ.get("AICENTER_RUN_DIR")
    return Path(run_dir) / METRICS_FILE if run_dir else None


def report(step: int | None = None, **metrics: float) -> None:
    """Record metrics of the current step, e.g. ``report(step=100, loss=0.25, accuracy=0.91)``.

    Outside a job (no ``AICENTER_RUN_DIR``) it does nothing and warns once, so a script runs unchanged on a
    laptop. Non-finite values (NaN, inf) are recorded as null: JSON has no such numbers.

    Raises:
        TypeError: A metric is not a number.
    """
    global _warned
    values: dict[str, float | None] = {}
    for name, value in metrics.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise TypeError(f"metric {name!r} must be a number, not {type(value).__name__}")
        values[name] = float(value) if math.isfinite(value) else None
    path = metrics_path()
    if path is None:
        if not _warned:
            warnings.warn("aicenter.runtime.report: not inside an aicenter job; metrics are dropped", stacklevel=2)
            _warned = True
        return
    line = json.dumps({"at": utc_stamp(), "step": step, **values}, allow_nan=False) + "\n"
    with path.open("a") as f:
        f.write(line)
