"""Microsoft Philly jobs as derived for the Pollux/Sia simulators (timestamp, duration, num_gpus, gpu_time, cluster)."""

from __future__ import annotations

import csv
from datetime import UTC, datetime
from pathlib import Path

from aicenter.sim.traces._rows import fail, open_text, parse_time
from aicenter.sim.workload import Trace, TraceJob

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "cluster")


def split_replicas(gpus: int, gpus_per_node: int) -> tuple[int, int]:
    """Split ``gpus`` into the fewest equal replicas that each fit on one node: 16 -> 2x8, 12 -> 2x6, 6 -> 1x6."""
    if gpus <= gpus_per_node:
        return 1, gpus
    for replicas in range(2, gpus + 1):
        if gpus % replicas == 0 and gpus // replicas <= gpus_per_node:
            return replicas, gpus // replicas
    return gpus, 1  # unreachable: replicas == gpus always divides


def load_philly(
    path: str | Path,
    *,
    start: datetime | None = None,
    end: datetime | None = None,
    gpus_per_node: int = 8,
    cpu_milli_per_gpu: int = 4000,
    memory_mib_per_gpu: int = 32768,
) -> Trace:
    """Load philly.csv; keep jobs submitted in ``[start, end)``; time 0 is ``start`` (else the first submit).

    The trace has no job id, user, cpu or memory: the id is ``philly-<line>``, the user is the tenant, and each
    replica asks ``cpu_milli_per_gpu`` / ``memory_mib_per_gpu`` per GPU. A job of more GPUs than a node has is
    split into equal replicas (see :func:`split_replicas`) that form one gang.

    Raises:
        ValidationFailed: a malformed row, naming the file, line and column.
    """
    path = Path(path)
    reader = csv.reader(open_text(path).splitlines())
    header = [h.strip() for h in next(reader, [])]
    if not header:
        fail(path, 1, None, "empty file, expected a header line")
    for column in PHILLY_COLUMNS:
        if column not in header:
            fail(path, 1, column, f"missing column (header is {','.join(header)})")
    i_ts, i_dur, i_gpus, i_cluster = (header.index(c) for c in PHILLY_COLUMNS)
    width = len(header)
    start_ts = start.timestamp() if start is not None else None
    end_ts = end.timestamp() if end is not None else None
    parsed: list[tuple[float, int, float, int, str]] = []
    split_cache: dict[int, tuple[int, int]] = {}
    for row in reader:
        line = reader.line_num
        if not row or (len(row) == 1 and not row[0].strip()):
            continue
        if len(row) != width:
            fail(path, line, None, f"expected {width} fields, found {len(row)}")
        column = "timestamp"
        try:
            ts = parse_time(row[i_ts]).timestamp()
            column = "duration"
            duration = float(row[i_dur])
            column = "num_gpus"
            gpus = int(row[i_gpus])
        except Exception:
            fail(path, line, column, f"cannot parse {row[header.index(column)]!r}")
        if not duration > 0 or duration == float("inf"):
            fail(path, line, "duration", f"must be a positive number of seconds, got {row[i_dur]!r}")
        if gpus < 1:
            fail(path, line, "num_gpus", f"must be >= 1, got {gpus}")
        tenant = row[i_cluster].strip()
        if not tenant:
            fail(path, line, "cluster", "is empty")
        if (start_ts is not None and ts < start_ts) or (end_ts is not None and ts >= end_ts):
            continue
        parsed.append((ts, line, duration, gpus, tenant))
    parsed.sort()
    origin_ts = start_ts if start_ts is not None else (parsed[0][0] if parsed else 0.0)
    jobs = []
    for ts, line, duration, gpus, tenant in parsed:
        shape = split_cache.get(gpus)
        if shape is None:
            shape = split_cache[gpus] = split_replicas(gpus, gpus_per_node)
        replicas, per_replica = shape
        jobs.append(
            TraceJob(
                id=f"philly-{line}",
                workspace=tenant,
                user=tenant,
                submit_time=ts - origin_ts,
                duration=duration,
                replicas=replicas,
                gpus=per_replica,
                cpu_milli=cpu_milli_per_gpu * per_replica,
                memory_mib=memory_mib_per_gpu * per_replica,
            )
        )
    origin = datetime.fromtimestamp(origin_ts, tz=UTC) if (start is not None or parsed) else None
    window = (0.0, end_ts - origin_ts) if end_ts is not None else None
    return Trace(source=str(path), jobs=tuple(jobs), origin=origin, window_s=window, meta={"format": "philly"})
