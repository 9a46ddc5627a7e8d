"""From database rows to the scheduler's model (``aicenter.scheduler``): nodes, quotas, jobs and placements.

Pure conversions of rows already loaded (``_scheduling.py`` loads them). Pools are label selectors and overlap:
a node is in every pool whose selector matches it (``default`` holds every node), as
``aicenter.core.pools.pools_of`` says for the node and pool views and for admission too. A job of pool P may be
placed on any ready node of P.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from aicenter.core.pools import pools_of
from aicenter.core.roles import NodeSchedule, NodeState
from aicenter.db.models import Job, Node, Pool, Replica
from aicenter.db.models import Quota as QuotaRow
from aicenter.scheduler import Device, Quota, ReplicaPlacement, ReplicaRequest, Task
from aicenter.scheduler import Job as SchedJob
from aicenter.scheduler import Node as SchedNode
from aicenter.scheduler.model import NodeStatus

MIB = 1024 * 1024


def epoch(at: datetime | None) -> float | None:
    """Seconds since the epoch of a stored time (SQLite returns naive UTC)."""
    if at is None:
        return None
    return (at if at.tzinfo is not None else at.replace(tzinfo=UTC)).timestamp()


# -- nodes and quotas -----------------------------------------------------------------------------------------


def node_status(node: Node) -> NodeStatus:
    """``ready`` only when heartbeating and schedulable; cordoned and draining nodes keep their jobs."""
    if node.state != NodeState.READY.value:
        return "down"
    if node.schedule != NodeSchedule.SCHEDULABLE.value:
        return "cordoned"
    return "ready"


def to_node(node: Node, pools: Sequence[Pool]) -> SchedNode:
    """The scheduler's node, in every pool of ``pools`` whose selector matches it (``core.pools.pools_of``)."""
    devices = tuple(
        Device(
            index=int(acc["index"]),
            type=str(acc.get("type") or "unknown"),
            memory_mib=int(acc.get("memory_bytes") or 0) // MIB,
            nvlink_domain=acc.get("nvlink_domain") or node.nvlink_domain,
        )
        for acc in sorted(node.accelerators or [], key=lambda a: int(a["index"]))
    )
    return SchedNode(
        name=node.name,
        cpu_milli=int(node.cpu_milli),
        memory_mib=int(node.memory_bytes) // MIB,
        devices=devices,
        pools=frozenset(pools_of(node.labels, pools)),
        labels={str(k): str(v) for k, v in (node.labels or {}).items()},
        state=node_status(node),
        leaf=node.leaf,
        spine=node.spine,
    )


def _quota_amounts(amounts: Mapping[str, Any]) -> dict[str, float]:
    # Stored in quota units (memory in bytes); the scheduler counts memory in MiB.
    return {k: (float(v) / MIB if k == "memory" else float(v)) for k, v in (amounts or {}).items()}


def to_quota(row: QuotaRow, workspace: str, pool: str) -> Quota:
    return Quota(workspace, pool, _quota_amounts(row.guaranteed), _quota_amounts(row.maximum))


# -- jobs -----------------------------------------------------------------------------------------------------


def request_of(replica: Replica) -> ReplicaRequest:
    """A replica row's resources (spec names were replaced by amounts at submission) as a scheduler request."""
    share = replica.gpu_share
    return ReplicaRequest(
        cpu_milli=int(replica.cpu_milli),
        memory_mib=math.ceil(int(replica.memory_bytes) / MIB),
        accelerators=0 if share else int(replica.gpu or 0),
        accelerator_milli=round(share * 1000) if share else 0,
        accelerator_types=frozenset({replica.gpu_type}) if replica.gpu_type else frozenset(),
    )


def to_sched_job(
    job: Job,
    replicas: Sequence[Replica],
    *,
    workspace: str,
    user: str,
    pool: str,
    dataset_sizes: Mapping[int, int],
) -> SchedJob | None:
    """The scheduler's view of a job; None when its current attempt has no replica rows (nothing to place).

    Args:
        job: The job row.
        replicas: The current attempt's replica rows, in rank order.
        workspace: The job's workspace name.
        user: The job's user name.
        pool: The job's pool name.
        dataset_sizes: Dataset version id -> bytes, for the versions the job reads (cache affinity).
    """
    if not replicas:
        return None
    order = [str(t.get("name", "worker")) for t in (job.spec or {}).get("tasks", [])]
    by_task: dict[str, list[Replica]] = {}
    for replica in replicas:
        by_task.setdefault(replica.task, []).append(replica)
    names = [n for n in order if n in by_task] + sorted(n for n in by_task if n not in order)
    tasks = tuple(Task(name, len(by_task[name]), request_of(by_task[name][0])) for name in names)
    datasets = tuple(
        (str(int(v)), math.ceil(dataset_sizes.get(int(v), 0) / MIB)) for v in job.dataset_version_ids or []
    )
    return SchedJob(
        id=str(job.id),
        workspace=workspace,
        user=user,
        priority=int(job.priority),
        submit_time=epoch(job.submitted_at) or 0.0,
        tasks=tasks,
        datasets=datasets,
        pool=pool,
        started_at=epoch(job.started_at),
    )


def placements_of(replicas: Iterable[Replica]) -> tuple[ReplicaPlacement, ...] | None:
    """Where a placed job's replicas are, from their rows; None if any is not placed."""
    out = []
    for r in replicas:
        if r.node_name is None:
            return None
        milli = round(r.gpu_share * 1000) if r.gpu_share else int(r.gpu or 0) * 1000
        out.append(ReplicaPlacement(r.task, r.index, r.node_name, tuple(int(d) for d in r.devices or []), milli))
    return tuple(out)
