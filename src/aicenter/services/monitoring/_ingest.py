"""Job metrics from ``aicenter.runtime.report`` into series: ``report.<name>`` per job and replica.

Each replica attempt appends JSON lines to its run directory's ``metrics.jsonl`` (services.jobs finds the files).
The ingest reads every file of the jobs that run or finished lately forward from a byte cursor (only whole lines:
a line being written is left for the next round), turns each value into a Sample labelled ``{task, replica}``
(the step given to ``report`` becomes ``report.step``), and writes the samples and the new cursor in one
transaction. A restart resumes at the committed cursor, and a batch written twice is stored once anyway (points
are insert-if-absent), so nothing is ingested twice.

Reading is plain file I/O, done in a thread outside any transaction; a round reads at most 4 MiB per file
(~40,000 lines, ~0.1 s of JSON parsing), so a job that logged for hours while the server was down is caught up
over a few rounds instead of one long transaction.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.db.metric_writes import set_ingest_cursor
from aicenter.db.models import Job, MetricIngestCursor
from aicenter.services.jobs import metric_files, report_stamp
from aicenter.services.monitoring._series import Sample, record_samples, to_ms

__all__ = [
    "REPORT_PREFIX",
    "FileChunk",
    "IngestTarget",
    "ingest_targets",
    "read_reported",
    "store_reported",
]

REPORT_PREFIX = "report."
MAX_BYTES_PER_FILE = 4 * 1024 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Finished jobs are read for this long after they end: their last lines, and a server restart in between.
FINISHED_WINDOW = timedelta(hours=1)
_ACTIVE = (JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.PREEMPTED)


@dataclass(frozen=True, slots=True)
class IngestTarget:
    job_id: int
    workspace_id: int
    # file path (relative to the jobs directory) -> (bytes ingested, the millisecond its last point was stored at)
    cursors: dict[str, tuple[int, int | None]]


@dataclass(slots=True)
class FileChunk:
    """What one round read of one file: the samples, the cursor it started from and where it stopped."""

    path: str
    start: int
    end: int
    last_ms: int | None = None  # the millisecond the chunk's last point is stored at
    samples: list[Sample] = field(default_factory=list)


async def ingest_targets(session: AsyncSession, *, now: datetime | None = None) -> list[IngestTarget]:
    """Jobs whose replicas may be writing metrics (or wrote their last lines within the hour), with their
    files' cursors."""
    cutoff = (now or utcnow()) - FINISHED_WINDOW
    jobs = (
        await session.execute(
            select(Job.id, Job.workspace_id)
            .where(or_(Job.status.in_([s.value for s in _ACTIVE]), Job.finished_at >= cutoff))
            .order_by(Job.id)
        )
    ).all()
    ids = [job_id for job_id, _ in jobs]
    cursors: dict[int, dict[str, tuple[int, int | None]]] = {job_id: {} for job_id in ids}
    for i in range(0, len(ids), 500):
        for job_id, path, offset, last_ms in await session.execute(
            select(
                MetricIngestCursor.job_id,
                MetricIngestCursor.path,
                MetricIngestCursor.offset,
                MetricIngestCursor.last_ms,
            ).where(MetricIngestCursor.job_id.in_(ids[i : i + 500]))
        ):
            cursors[job_id][path] = (offset, last_ms)
    return [IngestTarget(job_id, workspace_id, cursors[job_id]) for job_id, workspace_id in jobs]


def _number(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    number = float(value)
    return number if math.isfinite(number) else None


def _samples(line: bytes, target: IngestTarget, labels: dict[str, str]) -> list[Sample]:
    try:
        record = json.loads(line)
    except ValueError:
        return []  # a damaged line is skipped, not retried forever
    if not isinstance(record, dict):
        return []
    at = report_stamp(record.get("at"))
    if at is None:
        return []
    out = []
    for name, value in record.items():
        if name == "at":
            continue  # the time; "step" is a value like any other (report.step)
        number = _number(value)
        if number is not None:
            out.append(Sample(REPORT_PREFIX + name, at, number, labels, target.workspace_id, target.job_id))
    return out


def _read(
    path: Path, start: int, last_ms: int | None, target: IngestTarget, labels: dict[str, str], relative: str
) -> FileChunk:
    """Read one file's new complete lines as samples.

    A point is stored per series and millisecond, and a training loop reports several steps within one
    (``report`` costs ~30 us): a line in the same or an earlier millisecond than the line stored before it
    (``last_ms``, kept with the cursor across rounds) is moved to the next free millisecond, so every step is
    kept, in the file's order, at most a few ms off.
    """
    chunk = FileChunk(relative, start, start, last_ms)
    try:
        with path.open("rb") as f:
            f.seek(start)
            data = f.read(MAX_BYTES_PER_FILE)
    except OSError:
        return chunk
    whole = data.rfind(b"\n") + 1  # bytes up to the last complete line
    for line in data[:whole].splitlines():
        if not line.strip():
            continue
        samples = _samples(line, target, labels)
        if samples:
            at_ms = to_ms(samples[0].at)
            if last_ms is not None and at_ms <= last_ms:
                at_ms = last_ms + 1
                # Half a millisecond in, so that to_ms's truncation of a float lands on this millisecond.
                at = _EPOCH + timedelta(milliseconds=at_ms, microseconds=500)
                samples = [replace(s, at=at) for s in samples]
            last_ms = at_ms
            chunk.samples.extend(samples)
    chunk.end = start + whole
    chunk.last_ms = last_ms
    return chunk


def read_reported(jobs_path: Path, target: IngestTarget) -> list[FileChunk]:
    """Read what the job's replicas reported since the cursors (blocking file I/O: run it in a thread).

    Returns:
        One chunk per file that grew, in attempt order per replica.
    """
    chunks = []
    for (task, index), files in sorted(metric_files(jobs_path, target.job_id).items()):
        labels = {"task": task, "replica": str(index)}
        for _attempt, path in files:
            relative = str(path.relative_to(jobs_path))
            start, last_ms = target.cursors.get(relative, (0, None))
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if size > start:
                chunk = _read(path, start, last_ms, target, labels, relative)
                if chunk.end > chunk.start:
                    chunks.append(chunk)
    return chunks


async def store_reported(session: AsyncSession, job_id: int, chunks: Sequence[FileChunk]) -> int:
    """Write the chunks' samples and move their cursors, in the caller's write transaction. A chunk whose
    cursor moved meanwhile (another server got there first) is dropped.

    Returns:
        The number of points stored.
    """
    if not chunks:
        return 0
    stored = dict(
        (
            await session.execute(
                select(MetricIngestCursor.path, MetricIngestCursor.offset).where(MetricIngestCursor.job_id == job_id)
            )
        ).all()
    )
    fresh = [c for c in chunks if stored.get(c.path, 0) == c.start]
    points = await record_samples(session, [s for c in fresh for s in c.samples])
    for chunk in fresh:
        await set_ingest_cursor(session, path=chunk.path, job_id=job_id, offset=chunk.end, last_ms=chunk.last_ms)
    return points
