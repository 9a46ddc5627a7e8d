"""Retry decisions by reason, budget and policy."""

from __future__ import annotations

import pytest

from aicenter.core.jobs import FailureReason, RetryPolicy, counts_against_budget, should_restart

R = FailureReason
ALL_RETRYABLE = [R.ERROR, R.OOM, R.NODE_LOST, R.PREEMPTED, R.LAUNCH_FAILED]


@pytest.mark.parametrize(
    ("max_restarts", "on", "reason", "so_far", "restart"),
    [
        # Never: a person or the balance ended the job, whatever the policy.
        (100, ALL_RETRYABLE, R.STOPPED, 0, False),
        (100, ALL_RETRYABLE, R.STOPPED_BY_ADMIN, 0, False),
        (100, ALL_RETRYABLE, R.ARREARS, 0, False),
        # Listed reasons restart while the budget lasts.
        (3, [R.ERROR], R.ERROR, 0, True),
        (3, [R.ERROR], R.ERROR, 2, True),
        (3, [R.ERROR], R.ERROR, 3, False),
        (3, [R.NODE_LOST], R.NODE_LOST, 1, True),
        (3, [R.OOM, R.LAUNCH_FAILED], R.LAUNCH_FAILED, 0, True),
        # Unlisted reasons never restart.
        (3, [R.NODE_LOST], R.ERROR, 0, False),
        (3, [R.NODE_LOST], R.OOM, 0, False),
        (0, [R.ERROR], R.ERROR, 0, False),
        # Preemption restarts without budget when listed ...
        (0, [R.PREEMPTED], R.PREEMPTED, 0, True),
        (0, [R.PREEMPTED], R.PREEMPTED, 50, True),
        # ... and fails the job when it is not.
        (5, [R.ERROR], R.PREEMPTED, 0, False),
    ],
)
def test_should_restart(
    max_restarts: int, on: list[FailureReason], reason: FailureReason, so_far: int, restart: bool
) -> None:
    assert should_restart(RetryPolicy(max_restarts=max_restarts, on=on), reason, so_far) is restart


def test_default_policy() -> None:
    """Default: no budget, so only preemption requeues; raising max_restarts alone enables node_lost."""
    policy = RetryPolicy()
    assert should_restart(policy, R.PREEMPTED, 0)
    assert not should_restart(policy, R.NODE_LOST, 0)
    assert not should_restart(policy, R.ERROR, 0)
    assert should_restart(RetryPolicy(max_restarts=1), R.NODE_LOST, 0)


def test_only_preemption_is_free() -> None:
    assert [r for r in FailureReason if not counts_against_budget(r)] == [R.PREEMPTED]


def test_user_error_is_a_synonym_and_duplicates_collapse() -> None:
    policy = RetryPolicy.model_validate({"on": ["user_error", "error", "oom"]})
    assert policy.on == [R.ERROR, R.OOM]
