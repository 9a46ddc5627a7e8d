"""The overview dashboard (the console's home page): what the center, or a member's workspaces, are doing now.

Platform admins see the whole center. Members see their workspaces' jobs and use, and the totals of the pools
granted to their workspaces (capacity, allocated, used: "the cluster totals"); which other workspace holds what
and which node is down by name stay with the admins (node pages are theirs).

Every number comes from a handful of aggregate queries plus one read of the nodes (hundreds, not millions) and
of the latest telemetry sample per node and device, so the page costs the same with 10 or 10,000 finished jobs.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import Select, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus, ReplicaStatus
from aicenter.core.pools import is_member
from aicenter.core.roles import NodeState
from aicenter.db.models import Job, Membership, Node, Pool, PoolGrant, Replica, Workspace
from aicenter.services.context import Actor
from aicenter.services.monitoring._series_query import latest_values

# Replicas that hold their node's resources: planned on it, launching or running.
_HOLDING = (ReplicaStatus.PENDING.value, ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value)
RUNNING = (JobStatus.SCHEDULED.value, JobStatus.STARTING.value, JobStatus.RUNNING.value, JobStatus.RESTARTING.value)
QUEUED = (JobStatus.PENDING.value, JobStatus.QUEUED.value, JobStatus.PREEMPTED.value)
FAILED_WINDOW = timedelta(hours=24)  # "failed" on the dashboard: jobs that failed in the last day
WAIT_WINDOW = timedelta(hours=24)  # the median queue wait is over jobs that started in the last day
_WAIT_SAMPLE = 5000  # at most this many recent starts feed the median: enough for a stable figure
TOP_WORKSPACES = 5
USED_SERIES = ("node.cpu_utilization", "accelerator.utilization")
# A sample older than 8 default intervals (15 s) is stale: its node stopped reporting, its use is unknown.
STALE_S = 120.0
CPU = "cpu"  # the resource name of CPU rows; accelerator rows carry the accelerator type


@dataclass(frozen=True, slots=True)
class ResourceUse:
    """One resource in one pool (``pool`` None: every node the viewer's pools hold, each counted once).

    ``resource`` is ``"cpu"`` (amounts in cores) or an accelerator type (amounts in devices). ``used`` is what
    the samplers measured (busy cores; devices' utilization summed), None when no node reported telemetry for
    it; ``mine`` what the viewer's workspaces hold (the same as ``allocated`` for a platform admin).
    """

    pool: str | None
    resource: str
    capacity: float
    allocated: float
    mine: float
    used: float | None

    @property
    def allocated_ratio(self) -> float:
        return self.allocated / self.capacity if self.capacity else 0.0

    @property
    def used_ratio(self) -> float | None:
        return None if self.used is None else (self.used / self.capacity if self.capacity else 0.0)


@dataclass(frozen=True, slots=True)
class QueueWait:
    """Jobs waiting in one pool (``"none"``: submitted without one) and how long jobs wait before they start."""

    pool: str
    queued: int
    oldest_wait_s: float
    median_wait_s: float | None  # of jobs that started in the last 24 h; None: none did


@dataclass(frozen=True, slots=True)
class WorkspaceUse:
    workspace_id: int
    name: str
    running_jobs: int
    cpu_cores: float
    accelerators: int


@dataclass(frozen=True, slots=True)
class NodeDown:
    node_id: int
    name: str
    state: str
    last_heartbeat_at: datetime | None


@dataclass(frozen=True, slots=True)
class Overview:
    """The dashboard. ``whole_center``: a platform admin's view; otherwise the viewer's workspaces'."""

    whole_center: bool
    workspace_ids: tuple[int, ...]
    jobs: dict[str, int]  # running, queued, failed (last 24 h)
    resources: list[ResourceUse] = field(default_factory=list)
    queue: list[QueueWait] = field(default_factory=list)
    top_workspaces: list[WorkspaceUse] = field(default_factory=list)
    nodes_total: int = 0
    nodes_down_count: int = 0
    nodes_down: list[NodeDown] = field(default_factory=list)  # names: admins only (empty for members)
    telemetry: bool = False  # whether any node reported a sample recently


def _aware(moment: datetime) -> datetime:
    """SQLite hands back naive datetimes; the platform stores UTC."""
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


S = TypeVar("S", bound="Select[*tuple[Any, ...]]")


def _scoped(stmt: S, workspace_ids: Sequence[int] | None) -> S:
    return stmt if workspace_ids is None else stmt.where(Job.workspace_id.in_(list(workspace_ids)))


async def _my_workspace_ids(session: AsyncSession, actor: Actor) -> list[int]:
    return list(await session.scalars(select(Membership.workspace_id).where(Membership.user_id == actor.user_id)))


async def _job_counts(session: AsyncSession, scope: Sequence[int] | None) -> dict[str, int]:
    counts = {"running": 0, "queued": 0, "failed": 0}
    rows = await session.execute(
        _scoped(select(Job.status, func.count()).where(Job.status.in_(RUNNING + QUEUED)), scope).group_by(Job.status)
    )
    for status, count in rows:
        counts["running" if status in RUNNING else "queued"] += int(count)
    since = utcnow() - FAILED_WINDOW
    failed = await session.scalar(
        _scoped(
            select(func.count()).select_from(Job).where(Job.status == JobStatus.FAILED.value, Job.finished_at >= since),
            scope,
        )
    )
    counts["failed"] = int(failed or 0)
    return counts


async def _queue(session: AsyncSession, scope: Sequence[int] | None) -> list[QueueWait]:
    now = utcnow()
    waiting: dict[str, tuple[int, float]] = {}
    for pool, count, oldest in await session.execute(
        _scoped(
            select(Pool.name, func.count(), func.min(Job.submitted_at))
            .select_from(Job)
            .outerjoin(Pool, Pool.id == Job.pool_id)
            .where(Job.status == JobStatus.QUEUED.value),
            scope,
        ).group_by(Pool.name)
    ):
        waiting[pool or "none"] = (int(count), max(0.0, (now - _aware(oldest)).total_seconds()) if oldest else 0.0)
    waits: dict[str, list[float]] = defaultdict(list)
    for pool, submitted, started in await session.execute(
        _scoped(
            select(Pool.name, Job.submitted_at, Job.started_at)
            .select_from(Job)
            .outerjoin(Pool, Pool.id == Job.pool_id)
            .where(Job.started_at >= now - WAIT_WINDOW),
            scope,
        )
        .order_by(Job.started_at.desc())
        .limit(_WAIT_SAMPLE)
    ):
        if started is not None:  # the WHERE says so; the type does not
            waits[pool or "none"].append(max(0.0, (_aware(started) - _aware(submitted)).total_seconds()))
    return [
        QueueWait(
            pool=name,
            queued=waiting.get(name, (0, 0.0))[0],
            oldest_wait_s=waiting.get(name, (0, 0.0))[1],
            median_wait_s=statistics.median(waits[name]) if waits.get(name) else None,
        )
        for name in sorted(set(waiting) | set(waits))
    ]


@dataclass(slots=True)
class _Held:
    """What holding replicas take, by (pool id of their job, resource): cores or devices."""

    total: defaultdict[tuple[int | None, str], float] = field(default_factory=lambda: defaultdict(float))
    mine: defaultdict[tuple[int | None, str], float] = field(default_factory=lambda: defaultdict(float))


async def _held(session: AsyncSession, mine: Sequence[int] | None) -> _Held:
    held = _Held()
    rows = await session.execute(
        select(Job.pool_id, Job.workspace_id, Replica.gpu_type, func.sum(Replica.gpu), func.sum(Replica.cpu_milli))
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status.in_(_HOLDING))
        .group_by(Job.pool_id, Job.workspace_id, Replica.gpu_type)
    )
    for pool_id, workspace_id, gpu_type, gpus, cpu_milli in rows:
        amounts = [(CPU, int(cpu_milli or 0) / 1000)]
        if gpus:
            amounts.append((gpu_type or "unknown", float(gpus)))
        for resource, amount in amounts:
            held.total[(pool_id, resource)] += amount
            if mine is None or workspace_id in mine:
                held.mine[(pool_id, resource)] += amount
    return held


async def _latest_used(session: AsyncSession, cores: dict[int, float]) -> dict[int, dict[str, float]]:
    """Node id -> resource -> what the latest fresh samples say is in use (busy cores; summed device utilization)."""
    out: dict[int, dict[str, float]] = defaultdict(dict)
    for v in await latest_values(session, None, names=USED_SERIES, max_age_s=STALE_S):
        if v.node_id is None or v.node_id not in cores:
            continue
        if v.name == "node.cpu_utilization":
            resource, amount = CPU, v.value * cores[v.node_id]
        else:
            resource, amount = str(v.labels.get("type") or "unknown"), v.value
        out[v.node_id][resource] = out[v.node_id].get(resource, 0.0) + amount
    return dict(out)


def _capacity(nodes: Iterable[Node]) -> defaultdict[str, float]:
    out: defaultdict[str, float] = defaultdict(float)
    for node in nodes:
        out[CPU] += node.cpu_milli / 1000
        for device in node.accelerators or []:
            out[str(device.get("type") or "unknown")] += 1
    return out


def _used(nodes: Iterable[Node], used: dict[int, dict[str, float]]) -> dict[str, float]:
    out: dict[str, float] = {}
    for node in nodes:
        for resource, amount in used.get(node.id, {}).items():
            out[resource] = out.get(resource, 0.0) + amount
    return out


def _resource_order(resource: str) -> tuple[bool, str]:
    return (resource != CPU, resource)  # CPU first, then accelerator types by name


async def _resources(
    session: AsyncSession, nodes: list[Node], pools: list[Pool], mine: Sequence[int] | None, whole_center: bool
) -> tuple[list[ResourceUse], bool]:
    held = await _held(session, mine)
    used = await _latest_used(session, {n.id: n.cpu_milli / 1000 for n in nodes})
    rows: list[ResourceUse] = []
    seen: dict[int, Node] = {}
    pool_ids = {p.id for p in pools}
    for pool in pools:
        members = [n for n in nodes if is_member(n.labels, pool)]
        seen.update({n.id: n for n in members})
        capacity, measured = _capacity(members), _used(members, used)
        resources = set(capacity) | {r for (pid, r) in held.total if pid == pool.id}
        rows.extend(
            ResourceUse(
                pool=pool.name,
                resource=resource,
                capacity=capacity.get(resource, 0),
                allocated=held.total[(pool.id, resource)],
                mine=held.mine[(pool.id, resource)],
                used=measured.get(resource),
            )
            for resource in sorted(resources, key=_resource_order)
        )
    # The totals count each node once (pools overlap); an admin's also take in jobs placed outside any pool.
    counted = nodes if whole_center else list(seen.values())
    capacity, measured = _capacity(counted), _used(counted, used)
    in_scope = {k for k in held.total if whole_center or k[0] in pool_ids}
    rows.extend(
        ResourceUse(
            pool=None,
            resource=resource,
            capacity=capacity.get(resource, 0),
            allocated=sum(v for k, v in held.total.items() if k in in_scope and k[1] == resource),
            mine=sum(v for k, v in held.mine.items() if k in in_scope and k[1] == resource),
            used=measured.get(resource),
        )
        for resource in sorted(set(capacity) | {r for (_, r) in in_scope}, key=_resource_order)
    )
    return rows, bool(used)


async def _top_workspaces(session: AsyncSession, scope: Sequence[int] | None) -> list[WorkspaceUse]:
    running: dict[int, int] = {
        int(wid): int(n)
        for wid, n in await session.execute(
            _scoped(select(Job.workspace_id, func.count()).where(Job.status.in_(RUNNING)), scope).group_by(
                Job.workspace_id
            )
        )
    }
    held: dict[int, tuple[float, int]] = {}
    for wid, cpu_milli, gpus in await session.execute(
        _scoped(
            select(Job.workspace_id, func.sum(Replica.cpu_milli), func.sum(Replica.gpu))
            .join(Job, Job.id == Replica.job_id)
            .where(Replica.status.in_(_HOLDING)),
            scope,
        ).group_by(Job.workspace_id)
    ):
        held[int(wid)] = (int(cpu_milli or 0) / 1000, int(gpus or 0))
    ids = set(running) | set(held)
    if not ids:
        return []
    names: dict[int, str] = {
        int(wid): name
        for wid, name in await session.execute(select(Workspace.id, Workspace.name).where(Workspace.id.in_(ids)))
    }
    uses = [WorkspaceUse(wid, names.get(wid, str(wid)), running.get(wid, 0), *held.get(wid, (0.0, 0))) for wid in ids]
    uses.sort(key=lambda u: (-u.accelerators, -u.cpu_cores, -u.running_jobs, u.name))
    return uses[:TOP_WORKSPACES]


async def overview(session: AsyncSession, actor: Actor) -> Overview:
    """The dashboard as ``actor`` may see it.

    Args:
        session: A read session.
        actor: A platform admin sees the whole center; anyone else their workspaces' jobs and use, and the
            capacity, allocation and measured use of the pools granted to their workspaces.

    Returns:
        The overview; ``used`` figures are None where no sampler reported (no telemetry).
    """
    whole_center = actor.is_platform_admin
    workspace_ids = await _my_workspace_ids(session, actor)
    scope = None if whole_center else workspace_ids
    nodes = list((await session.scalars(select(Node).order_by(Node.name))).all())
    if whole_center:
        pools = list((await session.scalars(select(Pool).order_by(Pool.name))).all())
    else:
        granted = select(PoolGrant.pool_id).where(PoolGrant.workspace_id.in_(workspace_ids))
        pools = list((await session.scalars(select(Pool).where(Pool.id.in_(granted)).order_by(Pool.name))).all())
        nodes = [n for n in nodes if any(is_member(n.labels, p) for p in pools)]
    resources, telemetry = await _resources(session, nodes, pools, scope, whole_center)
    down = [n for n in nodes if n.state != NodeState.READY.value]
    return Overview(
        whole_center=whole_center,
        workspace_ids=tuple(sorted(workspace_ids)),
        jobs=await _job_counts(session, scope),
        resources=resources,
        queue=await _queue(session, scope),
        top_workspaces=await _top_workspaces(session, scope),
        nodes_total=len(nodes),
        nodes_down_count=len(down),
        nodes_down=[NodeDown(n.id, n.name, n.state, n.last_heartbeat_at) for n in down] if whole_center else [],
        telemetry=telemetry,
    )
