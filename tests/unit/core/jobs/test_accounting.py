"""Machine time: weight x seconds per replica attempt, summed per task and job, clipped to billing periods."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from aicenter.core.jobs import job_machine_time, machine_time_s, replica_machine_time_s, task_machine_time_s

T0 = datetime(2025, 1, 1, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@dataclass
class Attempt:
    task: str
    billing_weight: float
    started_at: datetime | None
    finished_at: datetime | None


def test_machine_time_is_weight_times_seconds() -> None:
    assert machine_time_s(2.0, at(0), at(3600)) == 7200.0
    assert machine_time_s(0.5, at(10), at(20)) == 5.0
    assert machine_time_s(0.0, at(0), at(100)) == 0.0


def test_never_started_and_clock_skew_cost_nothing() -> None:
    assert machine_time_s(1.0, None, None) == 0.0
    assert machine_time_s(1.0, None, at(10)) == 0.0
    assert machine_time_s(1.0, at(10), at(5)) == 0.0


def test_running_replica_needs_now() -> None:
    assert machine_time_s(1.0, at(0), None, now=at(30)) == 30.0
    with pytest.raises(ValueError, match="pass now"):
        machine_time_s(1.0, at(0), None)


@pytest.mark.parametrize("weight", [-1.0, math.inf, math.nan])
def test_bad_weight(weight: float) -> None:
    with pytest.raises(ValueError, match="billing weight"):
        machine_time_s(weight, at(0), at(1))


def test_periods_add_up_to_the_whole() -> None:
    """A meter charging consecutive periods charges each second once."""
    start, end = at(5), at(95)
    periods = [(at(0), at(30)), (at(30), at(60)), (at(60), at(120))]
    parts = [machine_time_s(1.5, start, end, since=a, until=b) for a, b in periods]
    assert parts == [37.5, 45.0, 52.5]
    assert sum(parts) == machine_time_s(1.5, start, end)
    assert machine_time_s(1.0, start, end, since=at(200)) == 0.0


def test_replicas_sum_into_tasks_and_the_job() -> None:
    attempts = [
        Attempt("worker", 1.0, at(0), at(100)),  # attempt 0
        Attempt("worker", 1.0, at(0), at(50)),
        Attempt("worker", 1.0, at(200), at(300)),  # attempt 1 after a restart: charged too
        Attempt("ps", 0.25, at(0), None),  # still running
        Attempt("ps", 0.25, None, None),  # never started
    ]
    total = job_machine_time(attempts, now=at(400))
    assert total.by_task == {"worker": 250.0, "ps": 100.0}
    assert total.total_s == 350.0
    assert task_machine_time_s(attempts, "worker", now=at(400)) == 250.0
    assert replica_machine_time_s(attempts[3], now=at(400)) == 100.0
    assert job_machine_time([]).total_s == 0.0
