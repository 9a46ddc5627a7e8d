"""The generic job trace format (CSV or JSON), documented in docs/simulator.md."""

from __future__ import annotations

import difflib
import json
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn

from aicenter.core.errors import ValidationFailed
from aicenter.sim.traces._rows import Fields, Rows, fail, open_text, parse_time
from aicenter.sim.workload import Trace, TraceJob

GENERIC_COLUMNS = ("submit_time", "duration")
KNOWN_COLUMNS = frozenset(
    {
        *GENERIC_COLUMNS,
        "id",
        "workspace",
        "user",
        "replicas",
        "gpus",
        "gpu_milli",
        "cpu_milli",
        "memory_mib",
        "gpu_types",
        "priority",
        "preemptible",
        "estimate_s",
    }
)


def _unknown(column: str) -> str | None:
    """A message when the format does not define ``column``, else None.

    Refused rather than ignored: an ignored column reads as its default, so a trace that says ``num_gpus``
    (Philly's name) instead of ``gpus`` would be simulated with 0 GPUs and no word of it.
    """
    if column in KNOWN_COLUMNS:
        return None
    close = difflib.get_close_matches(column, sorted(KNOWN_COLUMNS), n=1, cutoff=0.6)
    hint = f' (did you mean "{close[0]}"?)' if close else ""
    known = ", ".join(sorted(KNOWN_COLUMNS))
    return f"unknown column{hint}; the generic format has {known} (see docs/simulator.md)"


class _JsonRecord(Fields):
    def __init__(self, path: Path, index: int, record: dict[str, Any]) -> None:
        self.path, self.index, self.record = path, index, record

    def raw(self, column: str) -> str | None:
        value = self.record.get(column)
        if value is None:
            return None
        if isinstance(value, list):
            return "|".join(str(v) for v in value)
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def error(self, column: str | None, message: str) -> NoReturn:
        where = f"jobs[{self.index}]" + (f".{column}" if column else "")
        raise ValidationFailed(
            f"{self.path.name}: {where}: {message}",
            field=None,
            details={"file": str(self.path), "index": self.index, "column": column},
        )


def _records(path: Path) -> list[Fields] | Rows:
    if path.suffix.lower() != ".json":
        rows = Rows(path, GENERIC_COLUMNS)
        for column in rows.header:
            message = _unknown(column)
            if message:
                fail(path, 1, column, message)
        return rows
    try:
        document = json.loads(open_text(path))
    except json.JSONDecodeError as exc:
        fail(path, exc.lineno, None, f"invalid JSON: {exc.msg} (column {exc.colno})")
    items = document.get("jobs") if isinstance(document, dict) else document
    if not isinstance(items, list):
        fail(path, 1, None, 'expected a list of jobs or {"jobs": [...]}')
    out: list[Fields] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            _JsonRecord(path, i, {}).error(None, "expected an object")
        record = _JsonRecord(path, i, item)
        for key in item:
            message = _unknown(str(key))
            if message:
                record.error(str(key), message)
        out.append(record)
    return out


def _submit(fields: Fields) -> tuple[float, bool]:
    """(seconds, is_calendar): a number of seconds, or an ISO 8601 time as POSIX seconds."""
    raw = fields.get_str("submit_time")
    try:
        return float(raw), False
    except ValueError:
        return fields.timestamp("submit_time").timestamp(), True


def load_generic(path: str | Path, *, start: datetime | None = None, end: datetime | None = None) -> Trace:
    """Load a trace in the generic format (``.json``: JSON; anything else: CSV with a header line).

    ``submit_time`` is either seconds (any origin) or an ISO 8601 time; ``start``/``end`` filter calendar times
    only. Time 0 is ``start``, else the first submit.

    Raises:
        ValidationFailed: a malformed record, naming the file and the line (CSV) or the index (JSON) and the
            column.
    """
    path = Path(path)
    parsed: list[tuple[float, int, TraceJob]] = []
    calendar: bool | None = None
    for n, fields in enumerate(_records(path)):
        submit, is_calendar = _submit(fields)
        if calendar is not None and is_calendar != calendar:
            fields.error("submit_time", "mixes ISO times and seconds; use one kind in a trace")
        calendar = is_calendar
        gpus = fields.get_int("gpus", default=0)
        gpu_milli = fields.get_int("gpu_milli", default=0)
        if gpu_milli and (gpus or gpu_milli >= 1000):
            fields.error("gpu_milli", "is a fraction (1..999) of one GPU; leave it empty when gpus is set")
        workspace = fields.get_str("workspace", default="default")
        estimate = fields.get_float("estimate_s", default=-1.0)
        job = TraceJob(
            id=fields.get_str("id", default=f"job-{n}"),
            workspace=workspace,
            user=fields.get_str("user", default=workspace),
            submit_time=submit,
            duration=fields.get_float("duration", minimum=1e-9),
            replicas=fields.get_int("replicas", default=1, minimum=1),
            gpus=gpus,
            gpu_milli=gpu_milli,
            cpu_milli=fields.get_int("cpu_milli", default=1000),
            memory_mib=fields.get_int("memory_mib", default=1024),
            gpu_types=frozenset(t.strip() for t in fields.get_str("gpu_types", default="").split("|") if t.strip()),
            priority=fields.get_int("priority", default=0, minimum=None),
            preemptible=fields.get_bool("preemptible", default=True),
            estimate_s=estimate if estimate >= 0 else None,
        )
        parsed.append((submit, n, job))
    if not calendar and (start is not None or end is not None):
        raise ValidationFailed(
            f"{path.name}: --from/--to need calendar submit times (ISO 8601); this trace uses seconds",
            details={"file": str(path)},
        )
    lo = start.timestamp() if start is not None else float("-inf")
    hi = end.timestamp() if end is not None else float("inf")
    parsed = sorted(p for p in parsed if lo <= p[0] < hi)
    ids = set()
    for _, _, job in parsed:
        if job.id in ids:
            raise ValidationFailed(f"{path.name}: duplicate job id {job.id!r}", details={"file": str(path)})
        ids.add(job.id)
    origin_ts = start.timestamp() if start is not None else (parsed[0][0] if parsed else 0.0)
    jobs = tuple(_shift(job, origin_ts) for _, _, job in parsed)
    origin = datetime.fromtimestamp(origin_ts, tz=UTC) if calendar else None
    window = (0.0, end.timestamp() - origin_ts) if end is not None else None
    return Trace(source=str(path), jobs=jobs, origin=origin, window_s=window, meta={"format": "generic"})


def _shift(job: TraceJob, origin: float) -> TraceJob:
    return replace(job, submit_time=job.submit_time - origin)


__all__ = ["load_generic", "parse_time"]
