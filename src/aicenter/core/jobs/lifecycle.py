"""The job lifecycle: statuses, the transition table, failure reasons, replica statuses.

Every status change of a job goes through ``transition`` (or at least ``check_transition``): the service that
applies it writes the returned ``StatusChange`` as a job event in the same transaction, so the history of a job
is complete and no code path can move a job along an edge the table does not declare. Never bypass it, not
even in tests.

The user-visible status is the only state here. What the scheduler thinks of a queued job (why it waits) is a
separate field, the job's ``pending_reason`` string, written from ``CycleResult.pending``; reservations and
placements in progress live in the scheduler's memory and in replica rows, not in the status.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from aicenter.core.errors import InvalidTransition


class JobStatus(StrEnum):
    PENDING = "pending"  # accepted; references being resolved (e.g. an image still building)
    QUEUED = "queued"  # waiting for the scheduler; see pending_reason
    SCHEDULED = "scheduled"  # placed: resources allocated, replicas not launched yet
    STARTING = "starting"  # replicas launched, not all of them running yet
    RUNNING = "running"
    RESTARTING = "restarting"  # a retryable failure: the gang is being stopped, then re-queued
    PREEMPTED = "preempted"  # evicted by the scheduler: the gang is being stopped, then re-queued
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    STOPPED = "stopped"

    def is_finished(self) -> bool:
        """True for the terminal statuses: nothing leaves them."""
        return self in _FINISHED


_FINISHED = frozenset({JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED})

_S = JobStatus
TRANSITIONS: Mapping[JobStatus, frozenset[JobStatus]] = {
    # A job can be stopped (or fail) from every unfinished status; pending too, so that a job waiting for an
    # image build can be stopped, and fails when the build fails.
    _S.PENDING: frozenset({_S.QUEUED, _S.STOPPED, _S.FAILED}),
    _S.QUEUED: frozenset({_S.SCHEDULED, _S.STOPPED, _S.FAILED}),
    # scheduled -> queued: the placement was undone before launch (a node went away, a launch could not begin).
    _S.SCHEDULED: frozenset({_S.STARTING, _S.QUEUED, _S.STOPPED, _S.FAILED}),
    # starting -> succeeded: every replica exited 0 before the reconciler saw them all running.
    _S.STARTING: frozenset({_S.RUNNING, _S.SUCCEEDED, _S.RESTARTING, _S.PREEMPTED, _S.STOPPED, _S.FAILED}),
    _S.RUNNING: frozenset({_S.SUCCEEDED, _S.RESTARTING, _S.PREEMPTED, _S.STOPPED, _S.FAILED}),
    _S.RESTARTING: frozenset({_S.QUEUED, _S.STOPPED, _S.FAILED}),
    _S.PREEMPTED: frozenset({_S.QUEUED, _S.STOPPED, _S.FAILED}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.STOPPED: frozenset(),
}
"""Status -> the statuses it may change to. Finished statuses are terminal."""

RESUMABLE: frozenset[JobStatus] = frozenset({_S.STOPPED, _S.FAILED})
"""The finished statuses a notebook may leave again: ``start`` queues a stopped (or failed: its node was lost)
notebook as its next attempt, with the same work dir. Only notebooks: a training job that ended is final, and
running it again is a new job (``resubmit``)."""

ACTIVE_STATUSES: frozenset[JobStatus] = frozenset(s for s in JobStatus if not s.is_finished())
"""Unfinished statuses (what "my running jobs" and quota accounting look at)."""


class FailureReason(StrEnum):
    """Why a job or a replica ended other than by success. The retry policy decides by reason."""

    ERROR = "error"  # the command exited non-zero ("user_error" in DESIGN.md); exit_code says which
    OOM = "oom"  # over its memory limit
    NODE_LOST = "node_lost"  # the node or the replica's launcher went away
    PREEMPTED = "preempted"  # evicted by the scheduler for higher-priority work
    STOPPED = "stopped"  # its owner (or a workspace admin) stopped it
    STOPPED_BY_ADMIN = "stopped_by_admin"  # a platform admin force-stopped it
    ARREARS = "arrears"  # the workspace's balance ran out
    LAUNCH_FAILED = "launch_failed"  # the executor could not start a replica


# When replicas of one gang end for different reasons, the job takes the most fundamental one: a lost node
# makes its peers fail with collective-communication errors, so node_lost explains the job, not error.
_PRECEDENCE: tuple[FailureReason, ...] = (
    FailureReason.STOPPED_BY_ADMIN,
    FailureReason.STOPPED,
    FailureReason.ARREARS,
    FailureReason.PREEMPTED,
    FailureReason.NODE_LOST,
    FailureReason.LAUNCH_FAILED,
    FailureReason.OOM,
    FailureReason.ERROR,
)
_RANK = {reason: i for i, reason in enumerate(_PRECEDENCE)}


def dominant_reason(reasons: Iterable[FailureReason]) -> FailureReason | None:
    """The reason that explains a gang's failure, from its replicas' reasons; ``None`` when there are none."""
    return min(reasons, key=_RANK.__getitem__, default=None)


def status_after_failure(reason: FailureReason) -> JobStatus:
    """The finished status of a job that ends (without restart) for ``reason``.

    Stopping is not a failure, and neither is running out of balance: the job itself was fine.
    """
    if reason in (FailureReason.STOPPED, FailureReason.STOPPED_BY_ADMIN, FailureReason.ARREARS):
        return JobStatus.STOPPED
    return JobStatus.FAILED


class ReplicaStatus(StrEnum):
    """The status of one replica attempt (one process on one node)."""

    PENDING = "pending"  # planned, not launched
    STARTING = "starting"  # launched, the launcher has not reported the command running
    RUNNING = "running"
    SUCCEEDED = "succeeded"  # exit code 0
    FAILED = "failed"  # non-zero exit, oom, or could not launch
    LOST = "lost"  # its launcher or node went away without a final status
    STOPPED = "stopped"  # stopped on purpose (job stopped, preempted, gang restart)

    def is_finished(self) -> bool:
        return self in _REPLICA_FINISHED


_REPLICA_FINISHED = frozenset(
    {ReplicaStatus.SUCCEEDED, ReplicaStatus.FAILED, ReplicaStatus.LOST, ReplicaStatus.STOPPED}
)

_R = ReplicaStatus
REPLICA_TRANSITIONS: Mapping[ReplicaStatus, frozenset[ReplicaStatus]] = {
    # pending -> stopped/failed: ended before any launch (its job stopped, or it could not be prepared); such a
    # replica never started and holds no machine time.
    _R.PENDING: frozenset({_R.STARTING, _R.STOPPED, _R.FAILED}),
    # starting -> succeeded/failed/...: the command may end before a pass saw it running.
    _R.STARTING: frozenset({_R.RUNNING, _R.SUCCEEDED, _R.FAILED, _R.LOST, _R.STOPPED}),
    _R.RUNNING: frozenset({_R.SUCCEEDED, _R.FAILED, _R.LOST, _R.STOPPED}),
    _R.SUCCEEDED: frozenset(),
    _R.FAILED: frozenset(),
    _R.LOST: frozenset(),
    _R.STOPPED: frozenset(),
}
"""Replica status -> the statuses it may change to. A replica's ``started_at`` and ``finished_at`` are its
machine time (what billing charges), so they change only with a status, through one function
(``services.jobs.change_replica``)."""


def check_replica_transition(current: ReplicaStatus, new: ReplicaStatus) -> None:
    """Raise unless a replica may change from ``current`` to ``new`` (the same status is allowed: no change).

    Raises:
        InvalidTransition: Code ``invalid_transition``; ``details`` holds ``from`` and ``to``.
    """
    if new == current or new in REPLICA_TRANSITIONS[current]:
        return
    raise InvalidTransition(
        f'a {current.value} replica cannot become "{new.value}"', details={"from": current.value, "to": new.value}
    )


def stop_reason(requested: bool, requested_by: int | None, failure_reason: str | None) -> FailureReason | None:
    """Why a job must stop now, from its stop-request fields; ``None`` when nobody asked.

    The scheduler marks a preemption (and the billing meter an exhausted balance) as a stop request by nobody
    with reason ``preempted`` (``arrears``); a person's request records ``stopped`` or ``stopped_by_admin``.
    A person's request replaces a marker (``services.jobs.request_stop``), so it is never lost to a requeue.
    """
    if not requested:
        return None
    if requested_by is None and failure_reason in (FailureReason.PREEMPTED.value, FailureReason.ARREARS.value):
        return FailureReason(failure_reason)
    if failure_reason == FailureReason.STOPPED_BY_ADMIN.value:
        return FailureReason.STOPPED_BY_ADMIN
    return FailureReason.STOPPED


def check_transition(current: JobStatus, new: JobStatus, *, resumable: bool = False) -> None:
    """Raise unless a job may change from ``current`` to ``new``.

    ``resumable`` (a notebook) also allows ``RESUMABLE`` -> queued.

    Raises:
        InvalidTransition: Code ``invalid_transition`` (HTTP 409); ``details`` holds ``from``, ``to`` and
            ``allowed``.
    """
    allowed = TRANSITIONS[current]
    if new in allowed or (resumable and current in RESUMABLE and new == JobStatus.QUEUED):
        return
    if current.is_finished():
        text = f'the job is {current.value}, which is final; it cannot become "{new.value}"'
    else:
        names = ", ".join(s.value for s in JobStatus if s in allowed)
        text = f'a {current.value} job cannot become "{new.value}" (it can become: {names})'
    raise InvalidTransition(
        text, details={"from": current.value, "to": new.value, "allowed": sorted(s.value for s in allowed)}
    )


@dataclass(frozen=True, slots=True)
class StatusChange:
    """One checked status change: what the service writes to the job and, as an event, to its history.

    Attributes:
        from_status: The status before (``None`` for the event that creates the job).
        to_status: The status after.
        at: When (UTC).
        actor_id: The user who caused it; ``None`` for the system (scheduler, reconciler).
        actor_name: A readable name of the actor (``system``, ``scheduler``, a user name).
        reason: A failure reason or another short word (``scheduled``, ``placement_undone``).
        message: A sentence for people (an exit code, a pending reason, a node name).
    """

    from_status: JobStatus | None
    to_status: JobStatus
    at: datetime
    actor_id: int | None = None
    actor_name: str = "system"
    reason: str | None = None
    message: str = ""


def transition(
    current: JobStatus | None,
    new: JobStatus,
    *,
    at: datetime,
    actor_id: int | None = None,
    actor_name: str = "system",
    reason: str | None = None,
    message: str = "",
    resumable: bool = False,
) -> StatusChange:
    """Check a status change and describe it as an event. ``current=None`` creates a job, which must start
    ``pending`` (or ``queued`` when there is nothing to resolve). ``resumable``: see ``check_transition``.

    Raises:
        InvalidTransition: The table does not allow it.
    """
    if current is None:
        if new not in (JobStatus.PENDING, JobStatus.QUEUED):
            raise InvalidTransition(
                f'a new job starts pending or queued, not "{new.value}"',
                details={"from": None, "to": new.value, "allowed": ["pending", "queued"]},
            )
    else:
        check_transition(current, new, resumable=resumable)
    return StatusChange(current, new, at, actor_id, actor_name, reason, message)
