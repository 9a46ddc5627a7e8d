"""The job reconciler's vocabulary, pure: what it reads of a job (``JobSnapshot``), what it learned from the
executors (``Observations``), and what it decided (``Decision``: ``Steps`` to write, ``Actions`` to take).

The reconciler (``aicenter.controllers.jobs``) loads snapshots, observes, calls its pure ``decide``, has the
jobs service apply the steps in one guarded transaction (``services.jobs.apply_steps``), then acts. Keeping these
types here, below both, lets the service apply what the controller decided without either importing the other,
and lets ``decide`` be table-tested with plain values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aicenter.core.jobs.lifecycle import FailureReason, JobStatus, ReplicaStatus
from aicenter.core.jobs.retry import RetryPolicy


@dataclass(frozen=True, slots=True)
class ReplicaRow:
    """One replica of the job's current attempt, as stored.

    Attributes:
        id: The row's id.
        task: The task name.
        index: The index within the task.
        status: Its status.
        node: The node it is placed on ("" before placement).
        intent: Its launch intent is recorded (status ``starting`` with a run dir): a launch may have happened.
        launched: The launch returned a handle (the executor can be asked about it).
        reason: Why it ended, once it did.
        exit_code: Its command's exit code, once known.
        started_at: When its command started.
    """

    id: int
    task: str
    index: int
    status: ReplicaStatus
    node: str = ""
    intent: bool = False
    launched: bool = False
    reason: FailureReason | None = None
    exit_code: int | None = None
    started_at: datetime | None = None

    @property
    def live(self) -> bool:
        """Not finished: it may hold a process or resources."""
        return not self.status.is_finished()

    @property
    def name(self) -> str:
        return f"{self.task}/{self.index}"


@dataclass(frozen=True, slots=True)
class JobSnapshot:
    """What the reconciler decides on for one job: its status, stop request, restart budget and replicas.

    Attributes:
        id: The job's id.
        status: Its status.
        stop: Why it must stop now (``core.jobs.stop_reason``); ``None`` when nobody asked.
        failure_reason: The failure recorded on the job (for a restarting or preempted job: why).
        restart_count: The current attempt.
        counted_restarts: Restarts that count against the retry budget.
        retry: The spec's retry policy.
        output_model: The model the output directory is saved as on success (``None``: not saved).
        output_model_version_id: The version saved already (a crash after saving, before succeeding).
        replicas: The current attempt's replicas, in (task, index) order.
        stamp: The fields a decision was made on; applying it is refused when they changed meanwhile (a
            person's stop arriving during a preemption must not be lost to a requeue).
    """

    id: int
    status: JobStatus
    stop: FailureReason | None = None
    failure_reason: FailureReason | None = None
    restart_count: int = 0
    counted_restarts: int = 0
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    output_model: str | None = None
    output_model_version_id: int | None = None
    replicas: tuple[ReplicaRow, ...] = ()
    stamp: tuple[Any, ...] = ()


@dataclass(frozen=True, slots=True)
class Outcome:
    """A replica row's fields after an executor observation (or a stop the reconciler made)."""

    status: ReplicaStatus
    reason: FailureReason | None = None
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Launch:
    """A launch's result: the handle to store (``None``: the launch failed, ``error`` says why)."""

    handle: Mapping[str, Any] | None
    error: str = ""


@dataclass(frozen=True, slots=True)
class Intent:
    """What a replica's launch intent records: its ports and an intent-only handle (run dir, no process)."""

    ports: tuple[int, ...]
    handle: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Observations:
    """What the reconciler learned outside the database since the snapshot.

    Attributes:
        outcomes: Replica id -> what its executor reports (launched, live replicas; or a stop's result).
        launches: Replica id -> the result of launching it.
        intents: For a scheduled job that was prepared: replica id -> its intent; ``None``: not prepared.
        prepare_error: Why the job could not be prepared (image not built, a bad manifest, no ports).
        saved_version_id: The output model version just saved.
        saved_as: Its reference as people write it (``linreg-model:2``).
        save_error: Why the output model could not be saved (the job still succeeds).
    """

    outcomes: Mapping[int, Outcome] = field(default_factory=dict)
    launches: Mapping[int, Launch] = field(default_factory=dict)
    intents: Mapping[int, Intent] | None = None
    prepare_error: str = ""
    saved_version_id: int | None = None
    saved_as: str = ""
    save_error: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaChange:
    """A change of one replica row. ``None`` fields are left as they are."""

    id: int
    status: ReplicaStatus | None = None
    reason: FailureReason | None = None
    exit_code: int | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    handle: Mapping[str, Any] | None = None
    ports: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class JobChange:
    """A status change of the job (through ``services.jobs.transition``)."""

    to: JobStatus
    reason: str = ""
    message: str = ""
    failure_reason: FailureReason | None = None
    exit_code: int | None = None


@dataclass(frozen=True, slots=True)
class Steps:
    """What one decision writes, in one transaction that still holds the job's lease.

    ``facts`` (what executors reported, launch results) are written whenever the lease is held; the rest only
    when the job's ``stamp`` is unchanged since the snapshot, else the decision is dropped and made again.

    Attributes:
        facts: Replica changes that record observations.
        replicas: Replica changes the decision makes (intents, replicas ended without a process).
        job: The job's status change.
        issue_token: Issue a new API token for the replicas about to be launched.
        next_attempt: Start the next attempt: new replica rows, restart counters, stop request cleared.
        counted: The next attempt counts against the retry budget.
        undo_placement: Clear the replicas' placement and the stop request (a preemption before launch).
        clear_stop: Clear a stop request that has nothing left to stop.
        output_model_version_id: Record the saved output model version.
    """

    facts: tuple[ReplicaChange, ...] = ()
    replicas: tuple[ReplicaChange, ...] = ()
    job: JobChange | None = None
    issue_token: bool = False
    next_attempt: bool = False
    counted: bool = False
    undo_placement: bool = False
    clear_stop: bool = False
    output_model_version_id: int | None = None

    def __bool__(self) -> bool:
        return bool(
            self.facts
            or self.replicas
            or self.job
            or self.issue_token
            or self.next_attempt
            or self.undo_placement
            or self.clear_stop
            or self.output_model_version_id is not None
        )


@dataclass(frozen=True, slots=True)
class Actions:
    """What the reconciler does outside the database after the steps committed.

    Attributes:
        launch: Replicas to launch (or adopt: a launch into a run dir that has a launcher adopts it).
        stop: Replicas to stop (SIGTERM, the grace period, SIGKILL); they end with ``stop_reason``.
        stop_reason: The reason recorded on the replicas stopped.
        save_output: Save the output directory as a version of the job's output model.
    """

    launch: tuple[int, ...] = ()
    stop: tuple[int, ...] = ()
    stop_reason: FailureReason = FailureReason.STOPPED
    save_output: bool = False

    def __bool__(self) -> bool:
        return bool(self.launch or self.stop or self.save_output)


@dataclass(frozen=True, slots=True)
class Decision:
    """One round of the reconciler for one job: steps to write, then actions to take."""

    steps: Steps = field(default_factory=Steps)
    actions: Actions = field(default_factory=Actions)
