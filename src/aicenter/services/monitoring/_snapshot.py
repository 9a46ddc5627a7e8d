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
from aicenter.core.jobs import JobStatus
from aicenter.db.models import Job, Pool, VersionFile, Workspace
from aicenter.services.monitoring._cluster import ClusterSnapshot, cluster_snapshot

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

    # The cluster totals are sums of the per-node and per-workspace numbers: one read of the nodes and of the
    # holding replicas for both (the replicas of a job not yet placed count in their workspace, as here).
    cluster = await cluster_snapshot(session)
    nodes: Counter[tuple[str, str]] = Counter()
    for _, executor, state in cluster.node_info:
        nodes[(state, executor)] += 1
    capacity: Counter[str] = Counter()
    for (_, kind), count in cluster.node_accelerators.items():
        capacity[kind] += count
    allocated: Counter[str] = Counter()
    for (_, kind), count in cluster.workspace_accelerators_allocated.items():
        allocated[kind] += count
    accelerators: dict[tuple[str, str], int] = {}
    for kind in sorted(set(capacity) | set(allocated)):
        accelerators[(kind, "allocated")] = allocated[kind]
        accelerators[(kind, "free")] = max(0, capacity[kind] - allocated[kind])
    cpu_cores = {
        "allocated": sum(cluster.workspace_cpu_cores_allocated.values()),
        "capacity": sum(cluster.node_cpu_cores.values()),
    }

    # A blob is stored once per content hash, whichever versions list it.
    blobs = select(VersionFile.sha256, func.max(VersionFile.size).label("size")).group_by(VersionFile.sha256).subquery()
    objects, stored = (await session.execute(select(func.count(), func.sum(blobs.c.size)).select_from(blobs))).one()
    return PlatformSnapshot(
        jobs=jobs,
        queued=queued,
        queue_wait_s=queue_wait_s,
        nodes=dict(nodes),
        accelerators=accelerators,
        cpu_cores=cpu_cores,
        store_bytes=int(stored or 0),
        store_objects=int(objects or 0),
        cluster=cluster,
    )
