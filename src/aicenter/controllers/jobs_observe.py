"""Pure helpers of the job reconciler: what an executor observation means for a replica row and for its job."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from aicenter.core.jobs import FailureReason, dominant_reason
from aicenter.core.jobs import ReplicaStatus as RowStatus
from aicenter.db.models import Job, Replica
from aicenter.executors.base import ReplicaHandle, ReplicaState
from aicenter.executors.base import ReplicaStatus as Observed
from aicenter.services.jobs import requested_stop_reason

LAUNCH_FAILURE_PREFIXES = ("launch failed", "launcher error")


@dataclass(frozen=True, slots=True)
class Outcome:
    """A replica row's fields after an observation."""

    status: RowStatus
    reason: FailureReason | None = None
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


def outcome(obs: Observed, *, now: datetime, stopped_for: FailureReason = FailureReason.STOPPED) -> Outcome:
    """Map an observation to the replica's status (docs/dev/jobs-contract.md, the executor's reasons table).

    Args:
        obs: What the executor reports.
        now: Used for times the executor did not record (a lost replica's end, a start seen only now).
        stopped_for: The reason of a replica that ended because it was stopped through ``Executor.stop``.
    """
    if obs.state is ReplicaState.RUNNING:
        return Outcome(RowStatus.RUNNING, started_at=obs.started_at or now)
    if obs.state is ReplicaState.LOST:
        return Outcome(RowStatus.LOST, FailureReason.NODE_LOST, None, obs.started_at, now)
    end = obs.finished_at or now
    reason = obs.reason or ""
    if reason == "stopped":
        return Outcome(RowStatus.STOPPED, stopped_for, obs.exit_code, obs.started_at, end)
    if reason == "oom":
        return Outcome(RowStatus.FAILED, FailureReason.OOM, obs.exit_code, obs.started_at, end)
    if obs.exit_code is None and reason.startswith(LAUNCH_FAILURE_PREFIXES):
        return Outcome(RowStatus.FAILED, FailureReason.LAUNCH_FAILED, None, obs.started_at, end)
    if obs.exit_code == 0:
        return Outcome(RowStatus.SUCCEEDED, None, 0, obs.started_at, end)
    return Outcome(RowStatus.FAILED, FailureReason.ERROR, obs.exit_code, obs.started_at, end)


def stop_reason(job: Job) -> FailureReason | None:
    """Why the job must stop now: a preemption (a stop request by nobody with reason ``preempted``, written by
    the scheduling controller), a person's stop (``stopped``/``stopped_by_admin``), or None."""
    if job.stop_requested_at is None:
        return None
    if job.stop_requested_by is None and job.failure_reason in (
        FailureReason.PREEMPTED.value,
        FailureReason.ARREARS.value,
    ):
        return FailureReason(job.failure_reason)
    return requested_stop_reason(job) or FailureReason.STOPPED


def handle_of(replica: Replica) -> ReplicaHandle | None:
    """The replica's handle; None before its intent was recorded."""
    return ReplicaHandle.from_dict(replica.handle) if replica.handle else None


def launched(replica: Replica) -> bool:
    """Whether the launch returned a handle (an intent-only handle has pid 0)."""
    handle = handle_of(replica)
    return handle is not None and handle.pid > 0


@dataclass(frozen=True, slots=True)
class GangFailure:
    """Why a gang failed: its dominant reason, the exit code behind it, and a sentence for people."""

    reason: FailureReason
    exit_code: int | None
    message: str


def gang_failure(replicas: Sequence[Replica]) -> GangFailure | None:
    """The gang's failure from its replica rows; None while no replica failed.

    Only replicas that failed on their own count (``failed``, ``lost``): peers stopped by the reconciler after
    the first failure are consequences. A replica ``stopped`` by something outside aicenter (nobody asked) is
    a failure too, reported as ``error``.
    """
    primary = [r for r in replicas if r.status in (RowStatus.FAILED.value, RowStatus.LOST.value)]
    if not primary:
        finished = all(RowStatus(r.status).is_finished() for r in replicas)
        outside = [r for r in replicas if r.status == RowStatus.STOPPED.value]
        if finished and outside:
            r = outside[0]
            return GangFailure(FailureReason.ERROR, r.exit_code, f"{r.task}/{r.index} was stopped outside aicenter")
        return None
    reason = dominant_reason(FailureReason(r.reason or FailureReason.ERROR.value) for r in primary)
    assert reason is not None
    first = next(r for r in primary if (r.reason or FailureReason.ERROR.value) == reason.value)
    what = f"{first.task}/{first.index}"
    if reason is FailureReason.ERROR:
        message = f"{what} exited with code {first.exit_code}"
    elif reason is FailureReason.OOM:
        message = f"{what} exceeded its memory limit"
    elif reason is FailureReason.NODE_LOST:
        message = f"{what} was lost (node {first.node_name})"
    else:
        message = f"{what} failed: {reason.value}"
    return GangFailure(reason, first.exit_code if reason is FailureReason.ERROR else None, message)
