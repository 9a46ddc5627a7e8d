"""The notebook request, the job spec it becomes, the resumable lifecycle edge, and the idle culler's decision."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aicenter.core.errors import InvalidTransition, ValidationFailed
from aicenter.core.jobs import JobStatus, check_transition, parse_job_spec
from aicenter.core.jobs.notebooks import (
    IdleVerdict,
    NotebookActivity,
    decide_idle,
    last_activity,
    parse_notebook_spec,
)

T0 = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _min(n: float) -> timedelta:
    return timedelta(minutes=n)


def test_a_notebook_becomes_a_one_replica_job_of_kind_notebook_that_round_trips() -> None:
    spec, job = parse_notebook_spec(
        {
            "name": "nb",
            "image": "torch:2",
            "algorithm": "resnet:3",
            "datasets": ["mnist:1"],
            "resources": {"cpu": 2, "memory": "4Gi"},
            "idle_timeout_s": 600,
        }
    )
    assert spec.idle_timeout_s == 600
    assert job.kind.value == "notebook"
    assert [(t.name, t.replicas, t.command) for t in job.tasks] == [("notebook", 1, "aicenter-notebook")]
    assert parse_job_spec(job.normalized()) == job


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"name": "nb"}, "resources"),
        ({"name": "nb", "resources": {"cpu": 1}}, "resources.memory"),
        ({"name": "nb", "resources": {"spec": "a", "cpu": 1}}, "resources.cpu"),
        ({"name": "nb", "resources": {"cpu": 1, "memory": "1Gi"}, "idle_timeout_s": 5}, "idle_timeout_s"),
        ({"name": "nb", "resources": {"cpu": 1, "memory": "1Gi"}, "idle_timeout_s": "1h"}, "idle_timeout_s"),
        ({"name": "nb", "resources": {"cpu": 1, "memory": "1Gi"}, "datasets": ["a", "a"]}, "datasets[1]"),
        ({"name": "nb", "resources": {"cpu": 1, "memory": "1Gi"}, "command": "x"}, "command"),
        ({"name": "Bad Name", "resources": {"cpu": 1, "memory": "1Gi"}}, "name"),
    ],
)
def test_bad_notebook_requests_name_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationFailed) as err:
        parse_notebook_spec(doc)
    assert err.value.details["field"] == field


def test_a_job_spec_of_kind_notebook_must_be_the_platforms_one_replica() -> None:
    base = {"kind": "notebook", "name": "nb", "tasks": [{"name": "notebook", "resources": {"cpu": 1, "memory": "1Gi"},
            "command": "aicenter-notebook"}]}  # fmt: skip
    parse_job_spec(base)
    with pytest.raises(ValidationFailed, match="its command"):
        parse_job_spec({**base, "tasks": [{**base["tasks"][0], "command": "python evil.py"}]})  # type: ignore[dict-item]
    with pytest.raises(ValidationFailed, match="1 replica"):
        parse_job_spec({**base, "tasks": [{**base["tasks"][0], "replicas": 2}]})  # type: ignore[dict-item]


def test_only_notebooks_leave_stopped_or_failed_for_queued() -> None:
    for status in (JobStatus.STOPPED, JobStatus.FAILED):
        check_transition(status, JobStatus.QUEUED, resumable=True)
        with pytest.raises(InvalidTransition):
            check_transition(status, JobStatus.QUEUED)
    with pytest.raises(InvalidTransition):
        check_transition(JobStatus.SUCCEEDED, JobStatus.QUEUED, resumable=True)
    with pytest.raises(InvalidTransition):
        check_transition(JobStatus.RUNNING, JobStatus.QUEUED, resumable=True)


def test_last_activity_is_the_newest_sign_of_use_and_now_while_a_kernel_is_busy() -> None:
    seen = NotebookActivity(running_since=T0, jupyter=T0 + _min(5), ssh=T0 + _min(9), proxy=T0 + _min(7))
    assert last_activity(seen, T0 + _min(60)) == T0 + _min(9)
    assert last_activity(NotebookActivity(running_since=T0), T0 + _min(60)) == T0
    busy = NotebookActivity(running_since=T0, kernel_busy=True)
    assert last_activity(busy, T0 + _min(60)) == T0 + _min(60)


# (minutes since start with no activity, warned minutes ago or None) -> verdict; timeout 60 min, warning 10 min.
@pytest.mark.parametrize(
    ("idle_min", "warned_min_ago", "verdict"),
    [
        (30, None, IdleVerdict.KEEP),
        (49, None, IdleVerdict.KEEP),
        (50, None, IdleVerdict.WARN),
        (70, None, IdleVerdict.WARN),  # seen late: warned now, culled 10 min later, never without a warning
        (55, 5, IdleVerdict.KEEP),
        (60, 10, IdleVerdict.CULL),
        (70, 5, IdleVerdict.KEEP),  # warned late: the warning gets its full 10 minutes
        (70, 10, IdleVerdict.CULL),
    ],
)
def test_decide_idle_warns_before_it_culls(idle_min: int, warned_min_ago: int | None, verdict: IdleVerdict) -> None:
    now = T0 + _min(idle_min)
    warned = None if warned_min_ago is None else now - _min(warned_min_ago)
    decision = decide_idle(NotebookActivity(running_since=T0), now=now, timeout_s=3600, warning_s=600, warned_at=warned)
    assert decision.verdict is verdict
    assert decision.idle_since == T0


def test_a_warning_before_the_user_came_back_no_longer_counts() -> None:
    activity = NotebookActivity(running_since=T0, proxy=T0 + _min(30))
    now = T0 + _min(95)  # 65 min after the last use
    decision = decide_idle(activity, now=now, timeout_s=3600, warning_s=600, warned_at=T0 + _min(20))
    assert decision.verdict is IdleVerdict.WARN


def test_off_unknown_and_busy_are_never_culled() -> None:
    later = T0 + timedelta(days=3)
    off = decide_idle(NotebookActivity(running_since=T0), now=later, timeout_s=0, warning_s=600, warned_at=T0)
    assert off.verdict is IdleVerdict.KEEP
    assert off.cull_at is None
    unknown = NotebookActivity(running_since=T0, jupyter_readable=False)
    assert decide_idle(unknown, now=later, timeout_s=60, warning_s=10, warned_at=T0).verdict is IdleVerdict.KEEP
    busy = NotebookActivity(running_since=T0, kernel_busy=True)
    assert decide_idle(busy, now=later, timeout_s=60, warning_s=10, warned_at=T0).verdict is IdleVerdict.KEEP
