"""Alibaba GPU-sharing cluster trace (clusterdata cluster-trace-gpu-v2023), as used by the FGD paper (ATC'23)."""

from __future__ import annotations

from pathlib import Path

from aicenter.sim.traces._rows import Rows, fail
from aicenter.sim.workload import NodeSpec, Trace, TraceJob

# Some public openb variants carry only the resource columns; creation_time and the rest are optional.
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")


def load_openb_pods(path: str | Path, *, workspace: str = "default") -> Trace:
    """Load openb_pod_list_*.csv in file order (the trace is sorted by creation time).

    ``num_gpu == 1`` with ``gpu_milli < 1000`` is a fractional request on one GPU; ``num_gpu > 1`` asks for whole
    GPUs; ``gpu_spec`` lists the allowed GPU models, '|'-separated (empty: any). The duration is
    ``deletion_time - scheduled_time`` (``creation_time`` for tasks the trace never scheduled), at least 1 s.
    A pod list with only the resource columns (no ``creation_time``) arrives one task per second in file order,
    each lasting 1 s: fill mode, which only uses the order, reads it as it reads the full list.

    Raises:
        ValidationFailed: a malformed row, naming the file, line and column.
    """
    path = Path(path)
    rows = Rows(path, POD_COLUMNS)
    jobs: list[TraceJob] = []
    timed = "creation_time" in rows.index
    for n, row in enumerate(rows):
        name = row.get_str("name")
        num_gpu = row.get_int("num_gpu")
        gpu_milli = row.get_int("gpu_milli", default=0)
        if num_gpu == 1 and not 0 < gpu_milli <= 1000:
            fail(path, row.line, "gpu_milli", f"must be in 1..1000 for num_gpu == 1, got {gpu_milli}")
        if num_gpu > 1 and gpu_milli not in (0, 1000):
            fail(path, row.line, "gpu_milli", f"fractions apply to one GPU only (num_gpu is {num_gpu})")
        created = row.get_float("creation_time") if timed else float(n)
        started = row.get_float("scheduled_time", default=created) if "scheduled_time" in rows.index else created
        deleted = row.get_float("deletion_time", default=started + 1) if "deletion_time" in rows.index else started + 1
        spec = row.get_str("gpu_spec", default="") if "gpu_spec" in rows.index else ""
        jobs.append(
            TraceJob(
                id=name,
                workspace=workspace,
                user=row.get_str("qos", default=workspace) if "qos" in rows.index else workspace,
                submit_time=created,
                duration=max(1.0, deleted - started),
                gpus=num_gpu if (num_gpu > 1 or gpu_milli == 1000) else 0,
                gpu_milli=gpu_milli if num_gpu == 1 and gpu_milli < 1000 else 0,
                cpu_milli=row.get_int("cpu_milli"),
                memory_mib=row.get_int("memory_mib"),
                gpu_types=frozenset(t.strip() for t in spec.split("|") if t.strip()),
            )
        )
    origin_shift = min((j.submit_time for j in jobs), default=0.0)
    return Trace(source=str(path), jobs=tuple(jobs), meta={"format": "openb", "time_offset_s": origin_shift})


def load_openb_nodes(path: str | Path) -> list[NodeSpec]:
    """Load openb_node_list_*.csv: one node per row, ``gpu`` whole GPUs of type ``model`` (empty when gpu == 0).

    Raises:
        ValidationFailed: a malformed row, naming the file, line and column.
    """
    path = Path(path)
    rows = Rows(path, NODE_COLUMNS)
    nodes: list[NodeSpec] = []
    seen: set[str] = set()
    for row in rows:
        name = row.get_str("sn")
        if name in seen:
            fail(path, row.line, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        gpus = row.get_int("gpu")
        nodes.append(
            NodeSpec(
                name=name,
                cpu_milli=row.get_int("cpu_milli", minimum=1),
                memory_mib=row.get_int("memory_mib", minimum=1),
                gpus=gpus,
                gpu_type=row.get_str("model") if gpus else row.get_str("model", default=""),
            )
        )
    if not nodes:
        fail(path, 2, None, "no nodes")
    return nodes
