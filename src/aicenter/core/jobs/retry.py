"""The retry policy: which failures restart a job's gang, and how many times.

Semantics (those of Kubernetes' PodFailurePolicy and Volcano's job policies):

- ``stopped``, ``stopped_by_admin`` and ``arrears`` never restart: a person or the balance ended the job.
- A reason restarts only if it is listed in ``on``.
- ``preempted`` restarts without consuming the budget: the scheduler took the resources away, the job did
  nothing wrong, and a job preempted four times must not fail because its budget was three. It is in ``on`` by
  default; remove it to make a preempted job fail instead of queueing again.
- Every other listed reason restarts while ``restarts_so_far < max_restarts``, where ``restarts_so_far``
  counts only restarts that consumed the budget (``Job.counted_restarts``; ``Job.restart_count`` counts them
  all and is what ``AICENTER_RESTART_COUNT`` and the replica ``attempt`` show).

A restart restarts the whole gang: every replica stops, the job goes back to the queue, and the new attempt
starts with the same ``$AICENTER_CHECKPOINT_DIR``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from aicenter.core.jobs._model import SpecModel, choice, fail, show
from aicenter.core.jobs.lifecycle import FailureReason

NEVER_RESTART: frozenset[FailureReason] = frozenset(
    {FailureReason.STOPPED, FailureReason.STOPPED_BY_ADMIN, FailureReason.ARREARS}
)
RETRYABLE: tuple[FailureReason, ...] = tuple(r for r in FailureReason if r not in NEVER_RESTART)
"""The reasons ``retry.on`` may list, in the order the docs show them."""

FREE_RESTARTS: frozenset[FailureReason] = frozenset({FailureReason.PREEMPTED})
"""Reasons whose restarts do not count against ``max_restarts``."""

# DESIGN.md's vocabulary calls a non-zero exit "user_error"; accept it as a synonym of "error".
_SYNONYMS = {"user_error": FailureReason.ERROR.value}


class RetryPolicy(SpecModel):
    """``retry:`` of a job spec.

    Attributes:
        max_restarts: Restarts allowed for reasons that count (all but ``preempted``); 0..100.
        on: The reasons that restart the gang; no duplicates, order kept.
    """

    max_restarts: int = Field(default=0, ge=0, le=100, strict=True)
    on: list[FailureReason] = Field(default_factory=lambda: [FailureReason.NODE_LOST, FailureReason.PREEMPTED])

    @field_validator("on", mode="before")
    @classmethod
    def _reasons(cls, value: Any) -> list[FailureReason]:
        if not isinstance(value, list | tuple):
            fail(f"must be a list of failure reasons (got {show(value)})")
        reasons: list[FailureReason] = []
        for i, raw in enumerate(value):
            raw = _SYNONYMS.get(raw, raw) if isinstance(raw, str) else raw
            if raw in NEVER_RESTART:
                allowed = ", ".join(r.value for r in RETRYABLE)
                fail(f'"{raw}" never restarts a job; allowed: {allowed}', at=f"[{i}]")
            reason = choice(FailureReason, raw, RETRYABLE, at=f"[{i}]")
            if reason not in reasons:
                reasons.append(reason)
        return reasons


def should_restart(policy: RetryPolicy, reason: FailureReason, restarts_so_far: int) -> bool:
    """Whether a job that failed for ``reason`` restarts its gang.

    Args:
        policy: The job's retry policy.
        reason: Why the gang ended (``dominant_reason`` of its replicas).
        restarts_so_far: Restarts that consumed the budget so far (``Job.counted_restarts``).

    Returns:
        True to re-queue the job with ``restart_count + 1``; False to finish it.
    """
    if reason in NEVER_RESTART or reason not in policy.on:
        return False
    if reason in FREE_RESTARTS:
        return True
    return restarts_so_far < policy.max_restarts


def counts_against_budget(reason: FailureReason) -> bool:
    """Whether a restart for ``reason`` increments ``Job.counted_restarts``."""
    return reason not in FREE_RESTARTS
