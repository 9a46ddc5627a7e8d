"""Reading the metrics a job reported with ``aicenter.runtime.report`` (``metrics.jsonl`` in each run dir).

Every replica attempt appends JSON lines ``{"at": "...", "step": 3, "loss": 0.5, ...}`` to
``<jobs>/<job id>/runs/<attempt>/<task>-<index>/metrics.jsonl``. A replica's series is its attempts' files in
attempt order (a restarted job resumes from its checkpoint and reports on).

Files grow for as long as a job trains (a step every few ms, ~100 bytes a line: hundreds of MB for a long job),
so nothing here loads a whole file: series are read forward from a byte cursor with a budget of points and
bytes per call, and the latest value of each metric is kept per file with the offset scanned so far, so a
console polling every few seconds reads only what was appended since its last poll.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import NotFound, ValidationFailed
from aicenter.runtime.files import METRICS_FILE
from aicenter.services.context import Actor
from aicenter.services.jobs._queries import load_job
from aicenter.services.jobs._runtime import job_dirs

__all__ = [
    "DEFAULT_POINTS",
    "MAX_POINTS",
    "JobMetrics",
    "MetricPoint",
    "MetricSeries",
    "final_metrics",
    "job_metrics",
    "metric_files",
    "read_job_metrics",
    "report_stamp",
]

DEFAULT_POINTS = 2_000
MAX_POINTS = 10_000
# Bytes one call reads at most, whatever it finds: a name filter that matches nothing must not scan a 1 GB file
# per request. 16 MiB is ~160k lines, ~0.3 s of JSON parsing here.
MAX_SCAN_BYTES = 16 * 1024 * 1024
_RESERVED = frozenset({"at", "step"})
_CACHE_FILES = 512


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One reported value: the step given to ``report`` (None when none was), when, and the value (None for a
    non-finite value: NaN or infinity)."""

    step: int | None
    at: datetime
    value: float | None


@dataclass(slots=True)
class MetricSeries:
    name: str
    points: list[MetricPoint] = field(default_factory=list)


@dataclass(slots=True)
class JobMetrics:
    """The metrics of one replica of a job.

    Attributes:
        task: The replica's task. replica: Its index within the task.
        reporting: Every replica (``task-index``) that reported anything, in rank order.
        latest: The last point of every metric the replica reported (all of it, whatever the filters).
        series: The points read by this call, by metric name (filtered by ``name`` and ``since``).
        next_cursor: Where the next page starts, or None when everything written so far was read.
        cursor: Where this read stopped: passed back as ``cursor`` later, it returns only what came since.
    """

    job_id: int
    task: str
    replica: int
    reporting: list[str]
    latest: dict[str, MetricPoint]
    series: list[MetricSeries]
    next_cursor: str | None
    cursor: str


# -- files ----------------------------------------------------------------------------------------------------


def _attempts(runs: Path) -> list[int]:
    try:
        names = [e.name for e in os.scandir(runs) if e.is_dir()]
    except OSError:
        return []
    return sorted(int(n) for n in names if n.isdigit())


def metric_files(jobs_path: Path, job_id: int) -> dict[tuple[str, int], list[tuple[int, Path]]]:
    """Every replica's metric files, ``(task, index) -> [(attempt, path), ...]`` in attempt order."""
    runs = job_dirs(jobs_path, job_id).root / "runs"
    found: dict[tuple[str, int], list[tuple[int, Path]]] = {}
    for attempt in _attempts(runs):
        try:
            entries = list(os.scandir(runs / str(attempt)))
        except OSError:
            continue
        for entry in entries:
            task, _, index = entry.name.rpartition("-")
            path = Path(entry.path) / METRICS_FILE
            if task and index.isdigit() and path.is_file():
                found.setdefault((task, int(index)), []).append((attempt, path))
    for files in found.values():
        files.sort()
    return found


def report_stamp(value: object) -> datetime | None:
    """The time of a ``metrics.jsonl`` line (its ``at``), or None when it is missing or malformed."""
    # fromisoformat rather than runtime.files.parse_stamp's strptime: ~1 us instead of ~10 us a line.
    if not isinstance(value, str):
        return None
    try:
        at = datetime.fromisoformat(value)
    except ValueError:
        return None
    return at if at.tzinfo is not None else at.replace(tzinfo=UTC)


def _point(step: object, at: datetime, value: object) -> MetricPoint | None:
    """The point of one reported value; None for what is not a number (or null)."""
    step = step if isinstance(step, int) and not isinstance(step, bool) else None
    if value is None:
        return MetricPoint(step, at, None)
    if isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
        return MetricPoint(step, at, number if math.isfinite(number) else None)
    return None


def _points(record: dict[str, Any]) -> Iterator[tuple[str, MetricPoint]]:
    at = report_stamp(record.get("at"))
    if at is None:
        return
    step = record.get("step")
    for name, value in record.items():
        if name not in _RESERVED:
            point = _point(step, at, value)
            if point is not None:
                yield name, point


def _lines(path: Path, offset: int, max_bytes: int) -> Iterator[tuple[int, bytes]]:
    """Complete lines from ``offset``: (offset after the line, line). A last line without its newline is being
    written (``report`` appends a line with one write, but a reader may see part of it) and is left for later."""
    try:
        f = path.open("rb")
    except OSError:
        return
    with f:
        f.seek(offset)
        read = 0
        for line in f:
            if not line.endswith(b"\n"):
                return
            offset += len(line)
            read += len(line)
            yield offset, line
            if read >= max_bytes:
                return


def _records(
    path: Path, offset: int, max_bytes: int, *, containing: bytes | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Parsed lines from ``offset``; a line without ``containing`` (a metric's quoted name) is not parsed."""
    for end, line in _lines(path, offset, max_bytes):
        if containing is not None and containing not in line:
            yield end, {}
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None  # a damaged line (a full disk, a crash mid-write) is skipped, not fatal
        yield end, record if isinstance(record, dict) else {}


class _LatestCache:
    """The last point of each metric of each file, with how far the file was scanned (thread safe).

    A file that shrank or was replaced (another inode) is scanned again from its start.
    """

    def __init__(self, size: int = _CACHE_FILES) -> None:
        self._size = size
        self._entries: OrderedDict[str, tuple[int, int, dict[str, MetricPoint]]] = OrderedDict()
        self._lock = threading.Lock()

    def latest(self, path: Path) -> dict[str, MetricPoint]:
        key = str(path)
        try:
            stat = path.stat()
        except OSError:
            return {}
        with self._lock:
            cached = self._entries.get(key)
        inode, offset, values = (0, 0, {}) if cached is None else cached
        if cached is None or inode != stat.st_ino or stat.st_size < offset:
            offset, values = 0, {}
        if stat.st_size > offset:
            # The last raw record of each name, turned into points once at the end: building a point per value
            # costs the scan of a long file several times over.
            last: dict[str, dict[str, Any]] = {}
            for end, record in _records(path, offset, stat.st_size - offset):
                for name in record:
                    if name not in _RESERVED:
                        last[name] = record
                offset = end
            values = dict(values)
            for name, record in last.items():
                at = report_stamp(record.get("at"))
                point = None if at is None else _point(record.get("step"), at, record[name])
                if point is not None:
                    values[name] = point
        with self._lock:
            self._entries[key] = (stat.st_ino, offset, values)
            self._entries.move_to_end(key)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return values


_latest = _LatestCache()


def _merged_latest(files: Iterable[tuple[int, Path]]) -> dict[str, MetricPoint]:
    merged: dict[str, MetricPoint] = {}
    for _attempt, path in files:  # later attempts override earlier ones
        merged.update(_latest.latest(path))
    return merged


def final_metrics(jobs_path: Path, job_id: int, ranks: Sequence[tuple[str, int]] | None = None) -> dict[str, float]:
    """The last value of every metric the job reported: what a job's output model version records.

    Each metric is taken from the first replica in rank order that reported it (rank 0 in a data-parallel job,
    whose replicas report the same names), from that replica's latest attempt that reported it. A metric whose
    last value is not finite (NaN, infinity: JSON has no such numbers) is left out.

    Blocking file reads: from async code, call it through ``asyncio.to_thread``.

    Args:
        jobs_path: ``settings.jobs_path``.
        job_id: The job.
        ranks: ``(task, index)`` of every replica in rank order, e.g. from ``JobSpec.ranks()``; replicas not in it
            come after, and without it the order is index, then task name.
    """
    files = metric_files(jobs_path, job_id)
    order = list(ranks or ())
    order += sorted((k for k in files if k not in set(order)), key=lambda k: (k[1], k[0]))
    result: dict[str, float] = {}
    seen: set[str] = set()
    for key in order:
        for name, point in _merged_latest(files.get(key, ())).items():
            if name in seen:
                continue
            seen.add(name)
            if point.value is not None:
                result[name] = point.value
    return result


# -- cursor ---------------------------------------------------------------------------------------------------


def _parse_cursor(cursor: str | None) -> tuple[int, int]:
    if not cursor:
        return 0, 0
    attempt, _, offset = cursor.partition(":")
    if not attempt.isdigit() or not offset.isdigit():
        raise ValidationFailed("not a cursor this endpoint returned (expected ATTEMPT:OFFSET)", field="cursor")
    return int(attempt), int(offset)


@dataclass(slots=True)
class _Read:
    series: dict[str, MetricSeries]
    cursor: str
    more: bool


def _read_series(
    files: Sequence[tuple[int, Path]],
    cursor: str | None,
    *,
    name: str | None,
    since: datetime | None,
    limit: int,
    max_bytes: int,
) -> _Read:
    """Points after ``cursor``, at most ``limit`` of them and ``MAX_SCAN_BYTES`` read; stops after a whole line."""
    start_attempt, start_offset = _parse_cursor(cursor)
    series: dict[str, MetricSeries] = {}
    count = 0
    budget = max_bytes
    needle = None if name is None else json.dumps(name).encode()
    position = (start_attempt, start_offset)
    for attempt, path in files:
        if attempt < start_attempt:
            continue
        offset = start_offset if attempt == start_attempt else 0
        position = (attempt, offset)
        for end, record in _records(path, offset, budget, containing=needle):
            budget -= end - position[1]
            position = (attempt, end)
            for metric, point in _points(record):
                if (name is not None and metric != name) or (since is not None and point.at < since):
                    continue
                series.setdefault(metric, MetricSeries(metric)).points.append(point)
                count += 1
            if count >= limit or budget <= 0:
                more = _has_more(files, position)
                return _Read(series, f"{position[0]}:{position[1]}", more)
    return _Read(series, f"{position[0]}:{position[1]}", False)


def _has_more(files: Sequence[tuple[int, Path]], position: tuple[int, int]) -> bool:
    for attempt, path in files:
        if attempt > position[0]:
            return True
        if attempt == position[0]:
            try:
                if path.stat().st_size > position[1]:
                    return True
            except OSError:
                pass
    return False


def _rank_order(spec: dict[str, Any]) -> list[tuple[str, int]]:
    return [
        (str(task.get("name", "worker")), index)
        for task in spec.get("tasks", [])
        for index in range(int(task.get("replicas", 1)))
    ]


async def job_metrics(
    session: AsyncSession,
    actor: Actor,
    job_id: int,
    jobs_path: Path,
    *,
    task: str | None = None,
    replica: int | None = None,
    name: str | None = None,
    since: datetime | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_POINTS,
) -> JobMetrics:
    """The metrics one replica of a job reported (members of the job's workspace and platform admins).

    Reads forward from ``cursor`` (default: the start) at most ``limit`` points; ``next_cursor`` is set while
    more was already written. A console that polls a running job passes the last ``cursor`` it got back and
    receives only the points appended since.

    Args:
        task: The task; default: the first replica in rank order that reported anything (rank 0 normally).
        replica: The replica index within the task (default 0).
        name: Only this metric's series (``latest`` still has every metric).
        since: Only points reported at or after this time.
        cursor: ``cursor`` or ``next_cursor`` of a previous answer for the same replica.
        limit: Most points to return (1 to ``MAX_POINTS``).

    Raises:
        NotFound: No such job (for this actor), task or replica; ``details['field']`` says which.
        ValidationFailed: A malformed cursor or a limit out of range.
    """
    if not 1 <= limit <= MAX_POINTS:
        raise ValidationFailed(f"must be between 1 and {MAX_POINTS}", field="limit")
    _parse_cursor(cursor)
    if since is not None and since.tzinfo is None:
        since = since.replace(tzinfo=UTC)  # the API's times are UTC
    job = await load_job(session, actor, job_id)
    ranks = _rank_order(job.spec)
    tasks = list(dict.fromkeys(t for t, _ in ranks))
    if task is not None and task not in tasks:
        raise NotFound(f'job {job.id} has no task "{task}" (its tasks: {", ".join(tasks)})', details={"field": "task"})
    owner = task or (tasks[0] if tasks else "worker")
    if replica is not None and (owner, replica) not in set(ranks):
        raise NotFound(f"job {job.id} has no replica {owner}-{replica}", details={"field": "replica"})
    return await asyncio.to_thread(
        read_job_metrics, jobs_path, job.id, ranks, task, replica, name, since, cursor, limit
    )


def read_job_metrics(
    jobs_path: Path,
    job_id: int,
    ranks: Sequence[tuple[str, int]],
    task: str | None = None,
    replica: int | None = None,
    name: str | None = None,
    since: datetime | None = None,
    cursor: str | None = None,
    limit: int = DEFAULT_POINTS,
    max_bytes: int = MAX_SCAN_BYTES,
) -> JobMetrics:
    """``job_metrics`` without the access check: blocking file reads (``ranks`` as in ``final_metrics``); one
    call reads at most about ``max_bytes`` of files."""
    files = metric_files(jobs_path, job_id)
    order = list(ranks) + sorted(k for k in files if k not in set(ranks))
    reporting = [k for k in order if k in files]
    if task is not None:
        key = (task, replica or 0)
    elif replica is not None:
        key = (ranks[0][0] if ranks else "worker", replica)
    else:
        key = reporting[0] if reporting else (ranks[0] if ranks else ("worker", 0))
    chosen = files.get(key, [])
    read = _read_series(chosen, cursor, name=name, since=since, limit=limit, max_bytes=max_bytes)
    return JobMetrics(
        job_id=job_id,
        task=key[0],
        replica=key[1],
        reporting=[f"{t}-{i}" for t, i in reporting],
        latest=_merged_latest(chosen),
        series=sorted(read.series.values(), key=lambda s: s.name),
        next_cursor=read.cursor if read.more else None,
        cursor=read.cursor,
    )
