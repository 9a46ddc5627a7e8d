"""Reading reported metrics from replicas' run directories: series by cursor, bounds, the latest values, and the
final metrics of a job (rank 0 preferred, later attempts over earlier ones)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.services.jobs import final_metrics, read_job_metrics

JOB = 7
RANKS = [("worker", 0), ("worker", 1)]


def _write(jobs: Path, attempt: int, replica: str, *records: dict[str, Any], tail: str = "") -> Path:
    path = jobs / str(JOB) / "runs" / str(attempt) / replica / "metrics.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        for i, record in enumerate(records):
            f.write(json.dumps({"at": f"2026-12-03T10:00:{i:02d}.000000Z", **record}) + "\n")
        f.write(tail)
    return path


def _values(result: Any, name: str) -> list[Any]:
    return [p.value for s in result.series if s.name == name for p in s.points]


def test_series_are_read_forward_from_a_cursor_across_attempts(tmp_path: Path) -> None:
    _write(tmp_path, 0, "worker-0", {"step": 1, "loss": 1.0}, {"step": 2, "loss": 0.5})
    _write(tmp_path, 1, "worker-0", {"step": 2, "loss": 0.4}, {"step": 3, "loss": 0.3, "acc": 0.9})
    first = read_job_metrics(tmp_path, JOB, RANKS, limit=3)
    assert _values(first, "loss") == [1.0, 0.5, 0.4]
    assert first.next_cursor is not None
    rest = read_job_metrics(tmp_path, JOB, RANKS, cursor=first.next_cursor)
    assert (_values(rest, "loss"), _values(rest, "acc"), rest.next_cursor) == ([0.3], [0.9], None)
    assert {k: p.value for k, p in rest.latest.items()} == {"loss": 0.3, "acc": 0.9}
    # A poll from the last cursor gets only what was appended since.
    _write(tmp_path, 1, "worker-0", {"step": 4, "loss": 0.2})
    assert _values(read_job_metrics(tmp_path, JOB, RANKS, cursor=rest.cursor), "loss") == [0.2]
    assert read_job_metrics(tmp_path, JOB, RANKS).latest["loss"].step == 4  # the cached latest caught up


def test_a_half_written_line_waits_and_a_damaged_line_is_skipped(tmp_path: Path) -> None:
    path = _write(tmp_path, 0, "worker-0", {"step": 1, "loss": 1.0}, tail='not json\n{"at": "2026-12-03T10:01')
    result = read_job_metrics(tmp_path, JOB, RANKS)
    assert (_values(result, "loss"), result.next_cursor) == ([1.0], None)
    with path.open("a") as f:
        f.write(':00.000000Z", "step": 2, "loss": 0.5}\n')
    assert _values(read_job_metrics(tmp_path, JOB, RANKS, cursor=result.cursor), "loss") == [0.5]


def test_filters_by_name_and_time_and_reports_who_reported(tmp_path: Path) -> None:
    _write(tmp_path, 0, "worker-1", {"step": 1, "loss": 2.0, "lr": 0.1}, {"step": 2, "loss": 1.0, "lr": 0.05})
    result = read_job_metrics(tmp_path, JOB, RANKS, name="lr")
    # worker-0 reported nothing: the first replica in rank order that did is shown.
    assert (result.task, result.replica, result.reporting) == ("worker", 1, ["worker-1"])
    assert [s.name for s in result.series] == ["lr"]
    assert sorted(result.latest) == ["loss", "lr"]
    late = read_job_metrics(tmp_path, JOB, RANKS, since=datetime(2026, 12, 3, 10, 0, 1, tzinfo=UTC))
    assert _values(late, "loss") == [1.0]
    empty = read_job_metrics(tmp_path, JOB, RANKS, task="worker", replica=0)
    assert (empty.series, empty.latest, empty.next_cursor) == ([], {}, None)


def test_a_read_is_bounded_by_bytes(tmp_path: Path) -> None:
    _write(tmp_path, 0, "worker-0", *({"step": i, "loss": 1.0 / (i + 1), "noise": 0.0} for i in range(500)))
    result = read_job_metrics(tmp_path, JOB, RANKS, name="missing", max_bytes=4096)
    assert result.series == []
    assert result.next_cursor is not None  # stopped after ~4 KiB, not at the end of the file
    assert int(result.next_cursor.split(":")[1]) <= 4096 + 200


def test_a_malformed_cursor_names_the_field(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed) as caught:
        read_job_metrics(tmp_path, JOB, RANKS, cursor="yesterday")
    assert caught.value.details["field"] == "cursor"


def test_final_metrics_prefer_rank_zero_and_the_latest_attempt(tmp_path: Path) -> None:
    _write(tmp_path, 0, "worker-0", {"step": 9, "loss": 0.9, "acc": 0.1})
    _write(tmp_path, 1, "worker-0", {"step": 10, "loss": 0.25}, {"step": 11, "diverged": float("inf")})
    _write(tmp_path, 1, "worker-1", {"step": 11, "loss": 0.75, "only_here": 3})
    _write(tmp_path, 1, "ps-0", {"step": 1, "loss": 99.0})
    assert final_metrics(tmp_path, JOB, RANKS) == {"loss": 0.25, "acc": 0.1, "only_here": 3.0}
    # Without the rank order: index 0 first, then the task name (ps-0 before worker-0).
    assert final_metrics(tmp_path, JOB)["loss"] == 99.0
    assert final_metrics(tmp_path, JOB + 1) == {}
