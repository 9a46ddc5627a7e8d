"""The transition table: every declared edge passes, the rest raise invalid_transition; terminal states."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from aicenter.core.errors import Conflict, InvalidTransition
from aicenter.core.jobs import (
    ACTIVE_STATUSES,
    TRANSITIONS,
    FailureReason,
    JobStatus,
    ReplicaStatus,
    check_transition,
    dominant_reason,
    status_after_failure,
    transition,
)

S = JobStatus
AT = datetime(2025, 1, 1, tzinfo=UTC)

ALLOWED = [(current, new) for current, targets in TRANSITIONS.items() for new in sorted(targets)]
FORBIDDEN = [(current, new) for current in JobStatus for new in JobStatus if new not in TRANSITIONS[current]]


def test_table_covers_every_status() -> None:
    assert set(TRANSITIONS) == set(JobStatus)


def test_table_is_the_documented_one() -> None:
    """DESIGN.md's lifecycle, refined in docs/jobs.md; changing it is a decision, so it is spelled out here."""
    expected = {
        S.PENDING: {S.QUEUED, S.STOPPED, S.FAILED},
        S.QUEUED: {S.SCHEDULED, S.STOPPED, S.FAILED},
        S.SCHEDULED: {S.STARTING, S.QUEUED, S.STOPPED, S.FAILED},
        S.STARTING: {S.RUNNING, S.SUCCEEDED, S.RESTARTING, S.PREEMPTED, S.STOPPED, S.FAILED},
        S.RUNNING: {S.SUCCEEDED, S.RESTARTING, S.PREEMPTED, S.STOPPED, S.FAILED},
        S.RESTARTING: {S.QUEUED, S.STOPPED, S.FAILED},
        S.PREEMPTED: {S.QUEUED, S.STOPPED, S.FAILED},
        S.SUCCEEDED: set(),
        S.FAILED: set(),
        S.STOPPED: set(),
    }
    assert {k: set(v) for k, v in TRANSITIONS.items()} == expected


@pytest.mark.parametrize(("current", "new"), ALLOWED)
def test_allowed_transitions_pass(current: JobStatus, new: JobStatus) -> None:
    check_transition(current, new)
    change = transition(current, new, at=AT, actor_id=7, actor_name="alice", reason="why", message="m")
    assert (change.from_status, change.to_status, change.at, change.actor_id, change.actor_name) == (
        current,
        new,
        AT,
        7,
        "alice",
    )
    assert (change.reason, change.message) == ("why", "m")


@pytest.mark.parametrize(("current", "new"), FORBIDDEN)
def test_forbidden_transitions_raise(current: JobStatus, new: JobStatus) -> None:
    with pytest.raises(InvalidTransition) as info:
        check_transition(current, new)
    err = info.value
    assert isinstance(err, Conflict)
    assert err.code == "invalid_transition"
    assert err.status == 409
    assert err.details["from"] == current.value
    assert err.details["to"] == new.value


def test_forbidden_messages_say_what_is_possible() -> None:
    with pytest.raises(InvalidTransition) as info:
        check_transition(S.QUEUED, S.RUNNING)
    assert info.value.message == 'a queued job cannot become "running" (it can become: scheduled, failed, stopped)'
    with pytest.raises(InvalidTransition) as info:
        check_transition(S.SUCCEEDED, S.QUEUED)
    assert info.value.message == 'the job is succeeded, which is final; it cannot become "queued"'


def test_a_status_never_changes_to_itself() -> None:
    for status in JobStatus:
        with pytest.raises(InvalidTransition):
            check_transition(status, status)


@pytest.mark.parametrize("status", list(JobStatus))
def test_finished_statuses_are_terminal(status: JobStatus) -> None:
    assert status.is_finished() == (status in {S.SUCCEEDED, S.FAILED, S.STOPPED})
    assert status.is_finished() == (not TRANSITIONS[status])
    assert (status in ACTIVE_STATUSES) == (not status.is_finished())


def test_every_unfinished_job_can_be_stopped_and_can_fail() -> None:
    for status in ACTIVE_STATUSES:
        assert S.STOPPED in TRANSITIONS[status]
        assert S.FAILED in TRANSITIONS[status]


def test_every_unfinished_status_can_reach_success() -> None:
    reach = {S.SUCCEEDED}
    changed = True
    while changed:
        changed = False
        for status, targets in TRANSITIONS.items():
            if status not in reach and targets & reach:
                reach.add(status)
                changed = True
    assert reach == set(ACTIVE_STATUSES) | {S.SUCCEEDED}


def test_a_new_job_starts_pending_or_queued() -> None:
    assert transition(None, S.PENDING, at=AT).from_status is None
    assert transition(None, S.QUEUED, at=AT).actor_name == "system"
    with pytest.raises(InvalidTransition):
        transition(None, S.RUNNING, at=AT)


def test_replica_status() -> None:
    finished = {s for s in ReplicaStatus if s.is_finished()}
    assert finished == {ReplicaStatus.SUCCEEDED, ReplicaStatus.FAILED, ReplicaStatus.LOST, ReplicaStatus.STOPPED}


@pytest.mark.parametrize(
    ("reasons", "expected"),
    [
        ([], None),
        ([FailureReason.ERROR], FailureReason.ERROR),
        ([FailureReason.ERROR, FailureReason.NODE_LOST, FailureReason.ERROR], FailureReason.NODE_LOST),
        ([FailureReason.OOM, FailureReason.ERROR], FailureReason.OOM),
        ([FailureReason.PREEMPTED, FailureReason.NODE_LOST], FailureReason.PREEMPTED),
        ([FailureReason.ERROR, FailureReason.STOPPED], FailureReason.STOPPED),
        ([FailureReason.STOPPED, FailureReason.STOPPED_BY_ADMIN], FailureReason.STOPPED_BY_ADMIN),
        ([FailureReason.LAUNCH_FAILED, FailureReason.OOM], FailureReason.LAUNCH_FAILED),
    ],
)
def test_dominant_reason(reasons: list[FailureReason], expected: FailureReason | None) -> None:
    assert dominant_reason(reasons) == expected


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        (FailureReason.ERROR, S.FAILED),
        (FailureReason.OOM, S.FAILED),
        (FailureReason.NODE_LOST, S.FAILED),
        (FailureReason.PREEMPTED, S.FAILED),
        (FailureReason.LAUNCH_FAILED, S.FAILED),
        (FailureReason.STOPPED, S.STOPPED),
        (FailureReason.STOPPED_BY_ADMIN, S.STOPPED),
        (FailureReason.ARREARS, S.STOPPED),
    ],
)
def test_status_after_failure(reason: FailureReason, status: JobStatus) -> None:
    assert status_after_failure(reason) is status
