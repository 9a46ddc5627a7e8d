"""The platform's state as a few numbers for the Prometheus exposition at ``/metrics``.

A scrape reads the whole center's state in a handful of aggregate queries (GROUP BY, never a row per job), so
its cost does not grow with the number of finished jobs beyond what the indexes give. The API layer caches the
result for a few seconds so that several scrapers never hammer the database.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus, ReplicaStatus
from aicenter.db.models import Job, Node, Pool, Replica, VersionFile, Workspace
from aicenter.services.monitoring._cluster import ClusterSnapshot, cluster_snapshot

# Replicas that hold their node's resources: planned on it, launching or running.
_HOLDING = (ReplicaStatus.PENDING.value, ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value)
# The pool label of a job submitted without one.
NO_POOL = "none"


@dataclass(frozen=True, slots=True)
class PlatformSnapshot:
    """Counts at one instant. Keys are label values, in the order the metric declares its labels."""

    jobs: dict[tuple[str, str], int] = field(default_factory=dict)  # (status, workspace) -> jobs
    queued: dict[str, int] = field(default_factory=dict)  # pool -> queued jobs
    queue_wait_s: dict[str, float] = field(default_factory=dict)  # pool -> oldest queued job's wait
    nodes: dict[tuple[str, str], int] = field(default_factory=dict)  # (state, executor) -> nodes
    accelerators: dict[tuple[str, str], int] = field(default_factory=dict)  # (type, allocated|free) -> devices
    cpu_cores: dict[str, float] = field(default_factory=dict)  # allocated|capacity -> cores
    store_bytes: int = 0
    store_objects: int = 0
    cluster: ClusterSnapshot = field(default_factory=ClusterSnapshot)  # per node, workspace and lease


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; the platform stores UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def snapshot(session: AsyncSession) -> PlatformSnapshot:
    """The platform's counts, from aggregate queries only (nodes are read whole: they are few, and their
    accelerators are a JSON list)."""
    jobs = {
        (status, workspace): count
        for status, workspace, count in await session.execute(
            select(Job.status, Workspace.name, func.count())
            .join(Workspace, Workspace.id == Job.workspace_id)
            .group_by(Job.status, Workspace.name)
        )
    }
    now = utcnow()
    queued: dict[str, int] = {}
    queue_wait_s: dict[str, float] = {}
    for pool, count, oldest in await session.execute(
        select(Pool.name, func.count(), func.min(Job.submitted_at))
        .select_from(Job)
        .outerjoin(Pool, Pool.id == Job.pool_id)
        .where(Job.status == JobStatus.QUEUED.value)
        .group_by(Pool.name)
    ):
        name = pool or NO_POOL
        queued[name] = count
        queue_wait_s[name] = max(0.0, (now - _aware(oldest)).total_seconds()) if oldest is not None else 0.0

    nodes: Counter[tuple[str, str]] = Counter()
    capacity: Counter[str] = Counter()
    cpu_capacity_milli = 0
    for state, executor, devices, cpu_milli in await session.execute(
        select(Node.state, Node.executor, Node.accelerators, Node.cpu_milli)
    ):
        nodes[(state, executor)] += 1
        cpu_capacity_milli += cpu_milli
        for device in devices or []:
            capacity[str(device.get("type") or "unknown")] += 1
    allocated: Counter[str] = Counter()
    cpu_allocated_milli = 0
    for gpu_type, gpus, cpu_milli in await session.execute(
        select(Replica.gpu_type, func.sum(Replica.gpu), func.sum(Replica.cpu_milli))
        .where(Replica.status.in_(_HOLDING))
        .group_by(Replica.gpu_type)
    ):
        if gpus:
            allocated[gpu_type or "unknown"] += int(gpus)
        cpu_allocated_milli += int(cpu_milli or 0)
    accelerators: dict[tuple[str, str], int] = {}
    for kind in sorted(set(capacity) | set(allocated)):
        accelerators[(kind, "allocated")] = allocated[kind]
        accelerators[(kind, "free")] = max(0, capacity[kind] - allocated[kind])

    # A blob is stored once per content hash, whichever versions list it.
    blobs = select(VersionFile.sha256, func.max(VersionFile.size).label("size")).group_by(VersionFile.sha256).subquery()
    objects, stored = (await session.execute(select(func.count(), func.sum(blobs.c.size)).select_from(blobs))).one()
    return PlatformSnapshot(
        jobs=jobs,
        queued=queued,
        queue_wait_s=queue_wait_s,
        nodes=dict(nodes),
        accelerators=accelerators,
        cpu_cores={"allocated": cpu_allocated_milli / 1000, "capacity": cpu_capacity_milli / 1000},
        store_bytes=int(stored or 0),
        store_objects=int(objects or 0),
        cluster=await cluster_snapshot(session),
    )
