"""The replicas running now, with what the sampler needs to label their telemetry (job, workspace, node)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.jobs import ReplicaStatus
from aicenter.db.models import Job, Replica
from aicenter.executors.base import ReplicaHandle


@dataclass(frozen=True, slots=True)
class RunningReplica:
    """A launched replica in status starting or running.

    Attributes:
        job_id: Its job.
        workspace_id: The job's workspace.
        task: The task name.
        index: The replica's index within its task.
        node_id: Its node row, if the node still exists.
        handle: The executor's handle (``handle.executor`` names the executor, ``handle.run_dir`` the attempt).
    """

    job_id: int
    workspace_id: int
    task: str
    index: int
    node_id: int | None
    handle: ReplicaHandle


async def running_replicas(session: AsyncSession) -> list[RunningReplica]:
    """Every replica that was launched and has not ended (internal: the sampler's view, no actor)."""
    rows = await session.execute(
        select(Replica, Job.workspace_id)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status.in_([ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value]))
        .order_by(Replica.id)
    )
    out = []
    for replica, workspace_id in rows.all():
        if not replica.handle:  # starting, the launch not recorded yet
            continue
        try:
            handle = ReplicaHandle.from_dict(replica.handle or {})
        except (KeyError, TypeError, ValueError):  # a handle written by another version: not sampled
            continue
        out.append(RunningReplica(replica.job_id, workspace_id, replica.task, replica.index, replica.node_id, handle))
    return out
