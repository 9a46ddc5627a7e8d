"""aicenter.scheduler: a pure, fast scheduler for an AI computing center.

``Scheduler(policy).cycle(state, pending, now) -> CycleResult``. No I/O, no clock; the server and the simulator
run the same code. See docs/dev/scheduler-contract.md.
"""

from .fgd import TaskDistribution
from .model import (
    FULL_MILLI,
    Admission,
    CycleResult,
    Decision,
    Device,
    EvictCache,
    Job,
    Node,
    NodeStatus,
    PendingReasons,
    Place,
    Preempt,
    Quota,
    ReplicaPlacement,
    ReplicaRequest,
    Reserve,
    RunningJob,
    Task,
)
from .policy import BUILTIN as BUILTIN_POLICIES
from .policy import PolicyConfig, TaskClass
from .queue import PendingQueue
from .scheduler import Scheduler
from .state import ClusterState, job_demand

__all__ = [
    "BUILTIN_POLICIES",
    "FULL_MILLI",
    "Admission",
    "ClusterState",
    "CycleResult",
    "Decision",
    "Device",
    "EvictCache",
    "Job",
    "Node",
    "NodeStatus",
    "PendingQueue",
    "PendingReasons",
    "Place",
    "PolicyConfig",
    "Preempt",
    "Quota",
    "ReplicaPlacement",
    "ReplicaRequest",
    "Reserve",
    "RunningJob",
    "Scheduler",
    "Task",
    "TaskClass",
    "TaskDistribution",
    "job_demand",
]
