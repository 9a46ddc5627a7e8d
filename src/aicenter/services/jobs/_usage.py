"""What jobs hold, for the areas that ask: quota usage (services/quotas.py) and catalog versions in use
(services/catalog). Registered once, when ``aicenter.services.jobs`` is imported."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, case, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.jobs import ACTIVE_STATUSES, ReplicaStatus
from aicenter.db.models import Job, Replica
from aicenter.services import catalog, quotas

# Replicas that hold resources on a node: placed (a node is named) and not ended. A planned replica of a
# queued job holds nothing yet.
_HOLDING = (ReplicaStatus.PENDING.value, ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value)


def replica_usage(workspace_id: int, pool_id: int) -> Select[Any]:
    """One row per replica holding resources in the pool: (cpu milli, memory bytes, devices, type).

    A share of a device counts as one device, as at submission (services/jobs/_submit.py, ``Amounts``).
    """
    devices = case((Replica.gpu_share.is_not(None), 1), else_=Replica.gpu)
    return (
        select(Replica.cpu_milli, Replica.memory_bytes, devices, Replica.gpu_type)
        .join(Job, Job.id == Replica.job_id)
        .where(
            Job.workspace_id == workspace_id,
            Job.pool_id == pool_id,
            Replica.node_name.is_not(None),
            Replica.status.in_(_HOLDING),
        )
    )


_ACTIVE = [s.value for s in ACTIVE_STATUSES]


async def versions_used_by_jobs(session: AsyncSession, version_ids: list[int]) -> dict[int, list[str]]:
    """Unfinished jobs using each version (image, algorithm, dataset): ``{version id: ["job 42 (running)"]}``.

    Dataset ids are a JSON list, matched here rather than in SQL (JSON containment differs between SQLite and
    PostgreSQL); the scan covers unfinished jobs only, through the status index.
    """
    wanted = set(version_ids)
    if not wanted:
        return {}
    rows = await session.execute(
        select(Job.id, Job.status, Job.image_version_id, Job.algorithm_version_id, Job.dataset_version_ids)
        .where(Job.status.in_(_ACTIVE))
        .order_by(Job.id)
    )
    users: dict[int, list[str]] = {}
    for job_id, status, image_id, algorithm_id, dataset_ids in rows:
        used = {image_id, algorithm_id, *(int(i) for i in dataset_ids or [])} & wanted
        for version_id in sorted(used):
            users.setdefault(version_id, []).append(f"job {job_id} ({status})")
    return users


def register() -> None:
    """Add the hooks to their lists, once (importing twice, or a reloaded module, adds nothing)."""
    if replica_usage not in quotas.USAGE_QUERIES:
        quotas.USAGE_QUERIES.append(replica_usage)
    if versions_used_by_jobs not in catalog.VERSION_USERS:
        catalog.VERSION_USERS.append(versions_used_by_jobs)
