"""Training jobs, pure: the job spec, ``--set`` overrides, the lifecycle, the retry policy, machine time.

Services, the API and the CLI import from here; the modules behind it may move.
"""

from aicenter.core.jobs._yaml import load_document
from aicenter.core.jobs.accounting import (
    MachineTime,
    TimedReplica,
    job_machine_time,
    machine_time_s,
    replica_machine_time_s,
    task_machine_time_s,
)
from aicenter.core.jobs.lifecycle import (
    ACTIVE_STATUSES,
    TRANSITIONS,
    FailureReason,
    JobStatus,
    ReplicaStatus,
    StatusChange,
    check_transition,
    dominant_reason,
    status_after_failure,
    transition,
)
from aicenter.core.jobs.overrides import apply_overrides, parse_value
from aicenter.core.jobs.retry import (
    FREE_RESTARTS,
    NEVER_RESTART,
    RETRYABLE,
    RetryPolicy,
    counts_against_budget,
    should_restart,
)
from aicenter.core.jobs.spec import (
    MPI_LAUNCHER,
    PRIORITY_VALUES,
    TENSORFLOW_TASKS,
    Framework,
    JobKind,
    JobSpec,
    Priority,
    ResourceRequest,
    TaskSpec,
    parse_job_spec,
    priority_value,
    ref_name,
)

__all__ = [
    "ACTIVE_STATUSES",
    "FREE_RESTARTS",
    "MPI_LAUNCHER",
    "NEVER_RESTART",
    "PRIORITY_VALUES",
    "RETRYABLE",
    "TENSORFLOW_TASKS",
    "TRANSITIONS",
    "FailureReason",
    "Framework",
    "JobKind",
    "JobSpec",
    "JobStatus",
    "MachineTime",
    "Priority",
    "ReplicaStatus",
    "ResourceRequest",
    "RetryPolicy",
    "StatusChange",
    "TaskSpec",
    "TimedReplica",
    "apply_overrides",
    "check_transition",
    "counts_against_budget",
    "dominant_reason",
    "job_machine_time",
    "load_document",
    "machine_time_s",
    "parse_job_spec",
    "parse_value",
    "priority_value",
    "ref_name",
    "replica_machine_time_s",
    "should_restart",
    "status_after_failure",
    "task_machine_time_s",
    "transition",
]
