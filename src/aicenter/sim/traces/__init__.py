"""Trace loaders: Philly, openb (Alibaba GPU sharing) and the generic CSV/JSON format."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from aicenter.core.errors import ValidationFailed
from aicenter.sim.traces._rows import parse_time
from aicenter.sim.traces.generic import load_generic
from aicenter.sim.traces.openb import load_openb_nodes, load_openb_pods
from aicenter.sim.traces.philly import load_philly, split_replicas
from aicenter.sim.workload import Trace

__all__ = [
    "detect_format",
    "load_generic",
    "load_openb_nodes",
    "load_openb_pods",
    "load_philly",
    "load_trace",
    "parse_time",
    "split_replicas",
]


def detect_format(path: Path) -> str:
    """``philly``, ``openb`` or ``generic``, from the CSV header (JSON is always generic)."""
    if path.suffix.lower() == ".json":
        return "generic"
    try:
        with path.open(encoding="utf-8") as f:
            header = {h.strip() for h in f.readline().split(",")}
    except OSError:
        return "generic"  # the loader reports the missing file with its name
    if {"timestamp", "num_gpus", "cluster"} <= header:
        return "philly"
    if {"num_gpu", "gpu_milli"} <= header:  # creation_time too, except in resource-only variants
        return "openb"
    return "generic"


def load_trace(
    path: str | Path,
    *,
    fmt: str = "auto",
    start: datetime | None = None,
    end: datetime | None = None,
    gpus_per_node: int = 8,
) -> Trace:
    """Load any supported trace; ``fmt`` is ``auto`` (by header), ``philly``, ``openb`` or ``generic``.

    Raises:
        ValidationFailed: unknown format, malformed file, or a date filter on a trace without dates.
    """
    path = Path(path)
    kind = detect_format(path) if fmt == "auto" else fmt
    if kind == "philly":
        return load_philly(path, start=start, end=end, gpus_per_node=gpus_per_node)
    if kind == "openb":
        if start is not None or end is not None:
            raise ValidationFailed(f"{path.name}: --from/--to do not apply to openb traces (times are relative)")
        return load_openb_pods(path)
    if kind == "generic":
        return load_generic(path, start=start, end=end)
    raise ValidationFailed(f"unknown trace format {fmt!r}; expected auto, philly, openb or generic", field="format")
