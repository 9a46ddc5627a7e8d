"""Per-node, per-workspace and per-lease numbers for ``/metrics``: capacity and allocation from the registry,
use from the samplers' newest values.

Reads whose cost follows the nodes, devices and running jobs, never the jobs ever run: the node table (hundreds
of rows), the replicas that hold resources (``ix_replicas_status``, grouped by node, workspace and type), the
named leases (a handful), the newest point of each node and device series (by name, one primary-key probe per
series), and the replica series of the jobs holding resources summed per workspace in SQL. A sampled value
older than ``USED_MAX_AGE_S`` is left out, so a node that stopped reporting drops out of the "used" families
instead of showing its last value forever. Measured by bench/monitoring_scrape.py (10,000 jobs, 22,000 series).
"""

from __future__ import annotations

import functools
import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import ScalarSelect, func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import ReplicaStatus
from aicenter.core.pools import pools_of
from aicenter.db.models import Job, Lease, MetricPoint, MetricSeries, Node, Pool, Replica, Workspace
from aicenter.services.monitoring._series import to_ms

# Replicas that hold their node's resources: planned on it, launching or running.
HOLDING = (ReplicaStatus.PENDING.value, ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value)
# Prometheus marks a series stale after 5 minutes without a sample; a sampled value older than that (the sampler
# writes every 15 s by default, so 20 missed rounds) is no longer "used", it is a node that stopped reporting.
USED_MAX_AGE_S = 300.0
UNKNOWN_TYPE = "unknown"


@dataclass(frozen=True, slots=True)
class UsedFamily:
    """How one sampled series becomes one gauge family at ``/metrics``.

    Attributes:
        series: The series name the samplers write (MONITORING.md).
        metric: The Prometheus family name.
        help: Its HELP text.
        labels: The series labels it keeps, in order (a label the sample lacks is exported empty).
    """

    series: str
    metric: str
    help: str
    labels: tuple[str, ...]


_NODE = ("node",)
_DEVICE = ("node", "device", "type")
# Ratios are exported as ``_ratio`` (0-1), everything else keeps its base unit suffix.
USED_FAMILIES: tuple[UsedFamily, ...] = (
    UsedFamily("node.cpu_utilization", "aicenter_node_cpu_utilization_ratio", "CPU busy share, 0-1.", _NODE),
    UsedFamily("node.memory_used_bytes", "aicenter_node_memory_used_bytes", "Memory in use on the node.", _NODE),
    UsedFamily("node.memory_total_bytes", "aicenter_node_memory_total_bytes", "Memory the node's OS reports.", _NODE),
    UsedFamily("node.disk_used_bytes", "aicenter_node_disk_used_bytes", "Disk in use (work dir).", _NODE),
    UsedFamily("node.disk_total_bytes", "aicenter_node_disk_total_bytes", "Disk size (work dir).", _NODE),
    UsedFamily(
        "node.network_receive_bytes_per_second",
        "aicenter_node_network_receive_bytes_per_second",
        "Bytes per second received by the node, over the last sampling interval.",
        _NODE,
    ),
    UsedFamily(
        "node.network_transmit_bytes_per_second",
        "aicenter_node_network_transmit_bytes_per_second",
        "Bytes per second sent by the node, over the last sampling interval.",
        _NODE,
    ),
    UsedFamily(
        "accelerator.utilization",
        "aicenter_accelerator_utilization_ratio",
        "Busy share of the accelerator, 0-1.",
        _DEVICE,
    ),
    UsedFamily(
        "accelerator.memory_used_bytes", "aicenter_accelerator_memory_used_bytes", "Accelerator memory in use.", _DEVICE
    ),
    UsedFamily(
        "accelerator.memory_total_bytes", "aicenter_accelerator_memory_total_bytes", "Accelerator memory.", _DEVICE
    ),
    UsedFamily(
        "accelerator.temperature_celsius",
        "aicenter_accelerator_temperature_celsius",
        "Accelerator temperature.",
        _DEVICE,
    ),
    UsedFamily("accelerator.power_watts", "aicenter_accelerator_power_watts", "Accelerator power draw.", _DEVICE),
)
# Replica series summed per workspace: per job or replica would be a label per job, unbounded for Prometheus.
WORKSPACE_USED: Mapping[str, tuple[str, str]] = {
    "replica.cpu_cores": ("aicenter_workspace_cpu_cores_used", "CPU cores the workspace's replicas use."),
    "replica.memory_bytes": ("aicenter_workspace_memory_used_bytes", "Resident memory of the workspace's replicas."),
    "replica.accelerator_memory_bytes": (
        "aicenter_workspace_accelerator_memory_used_bytes",
        "Accelerator memory the workspace's replicas use (where NVML reports it).",
    ),
}


@dataclass(frozen=True, slots=True)
class ClusterSnapshot:
    """Per-node, per-workspace and per-lease numbers. Keys are label values in the metric's label order."""

    node_info: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (node, executor, state) -> 1
    node_pools: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, pool) -> 1
    node_cpu_cores: dict[str, float] = field(default_factory=dict)  # node -> capacity
    node_cpu_cores_allocated: dict[str, float] = field(default_factory=dict)
    node_memory_bytes: dict[str, int] = field(default_factory=dict)  # node -> capacity
    node_memory_allocated_bytes: dict[str, int] = field(default_factory=dict)
    node_accelerators: dict[tuple[str, str], int] = field(default_factory=dict)  # (node, type) -> devices
    node_accelerators_allocated: dict[tuple[str, str], int] = field(default_factory=dict)
    workspace_cpu_cores_allocated: dict[str, float] = field(default_factory=dict)  # workspace -> cores
    workspace_accelerators_allocated: dict[tuple[str, str], int] = field(default_factory=dict)  # (ws, type)
    leases: dict[str, str | None] = field(default_factory=dict)  # lease -> live holder, None: nobody
    used: dict[str, dict[tuple[str, ...], float]] = field(default_factory=dict)  # metric -> labels -> value


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


async def cluster_snapshot(session: AsyncSession) -> ClusterSnapshot:
    """Read the per-node, per-workspace and lease numbers, and the samplers' newest values."""
    snap = ClusterSnapshot()
    pools = list((await session.scalars(select(Pool))).all())
    names: dict[int, str] = {}
    for node_id, name, executor, state, labels, cpu_milli, memory, devices in await session.execute(
        select(
            Node.id,
            Node.name,
            Node.executor,
            Node.state,
            Node.labels,
            Node.cpu_milli,
            Node.memory_bytes,
            Node.accelerators,
        )
    ):
        names[node_id] = name
        snap.node_info[(name, executor, state)] = 1
        for pool in pools_of(labels, pools):
            snap.node_pools[(name, pool)] = 1
        snap.node_cpu_cores[name] = cpu_milli / 1000
        snap.node_memory_bytes[name] = memory
        snap.node_cpu_cores_allocated[name] = 0.0
        snap.node_memory_allocated_bytes[name] = 0
        for device in devices or []:
            key = (name, str(device.get("type") or UNKNOWN_TYPE))
            snap.node_accelerators[key] = snap.node_accelerators.get(key, 0) + 1
            snap.node_accelerators_allocated.setdefault(key, 0)

    ws_cpu: Counter[str] = Counter()
    for node_id, workspace, gpu_type, gpus, cpu_milli, memory in await session.execute(
        select(
            Replica.node_id,
            Workspace.name,
            Replica.gpu_type,
            func.sum(Replica.gpu),
            func.sum(Replica.cpu_milli),
            func.sum(Replica.memory_bytes),
        )
        .join(Job, Job.id == Replica.job_id)
        .join(Workspace, Workspace.id == Job.workspace_id)
        .where(Replica.status.in_(HOLDING))
        .group_by(Replica.node_id, Workspace.name, Replica.gpu_type)
    ):
        kind = gpu_type or UNKNOWN_TYPE
        ws_cpu[workspace] += int(cpu_milli or 0)
        if gpus:
            key = (workspace, kind)
            snap.workspace_accelerators_allocated[key] = snap.workspace_accelerators_allocated.get(key, 0) + int(gpus)
        node = names.get(node_id) if node_id is not None else None
        if node is None:
            continue  # not placed yet, or its node was deleted under it
        snap.node_cpu_cores_allocated[node] += int(cpu_milli or 0) / 1000
        snap.node_memory_allocated_bytes[node] += int(memory or 0)
        if gpus:
            snap.node_accelerators_allocated[(node, kind)] = snap.node_accelerators_allocated.get(
                (node, kind), 0
            ) + int(gpus)
    snap.workspace_cpu_cores_allocated.update({ws: milli / 1000 for ws, milli in ws_cpu.items()})

    now = utcnow()
    for lease, owner, expires in await session.execute(select(Lease.name, Lease.lock_owner, Lease.lock_expires_at)):
        live = owner is not None and expires is not None and _aware(expires) > now
        snap.leases[lease] = owner if live else None

    snap.used.update(await _used(session, to_ms(now) - int(USED_MAX_AGE_S * 1000)))
    return snap


def _newest_value(since_ms: int) -> ScalarSelect[float]:
    """A series' newest raw value if it is no older than ``since_ms``, else NULL: one backward probe of the
    points' primary key (series, time) per series. Half the work of joining the point at ``max(at_ms)`` (two
    probes): 8 ms against 36 ms for 2,350 series on PostgreSQL."""
    return (
        select(MetricPoint.value)
        .where(MetricPoint.series_id == MetricSeries.id, MetricPoint.at_ms >= since_ms)
        .order_by(MetricPoint.at_ms.desc())
        .limit(1)
        .correlate(MetricSeries)
        .scalar_subquery()
    )


@functools.lru_cache(maxsize=16384)
def _label_values(key: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The values of ``names`` in a series' canonical labels (sorted JSON); a node's and a device's label sets do
    not change, so each is parsed once per process, not once per scrape."""
    labels = json.loads(key) if key else {}
    return tuple(str(labels.get(n, "")) for n in names)


async def _used(session: AsyncSession, since_ms: int) -> dict[str, dict[tuple[str, ...], float]]:
    """The samplers' newest values as families: node and accelerator series as they are (their names through
    the name index: ~2,400 series for 50 nodes of 8 devices), replica series summed per workspace in SQL over the
    jobs that hold resources only (the replica series of every job ever run are 20,000 at 10,000 jobs).

    The same rule as ``latest_values`` (the newest raw point, no older than ``since_ms``), read as columns and
    aggregates: ``latest_values`` builds an object per series of the prefix, ~290 ms for the 22,000 series
    above on SQLite under load, where these two reads take ~25 ms.
    """
    families = {f.series: f for f in USED_FAMILIES}
    used: dict[str, dict[tuple[str, ...], float]] = {f.metric: {} for f in USED_FAMILIES}
    newest = _newest_value(since_ms).label("value")
    for name, key, value in await session.execute(
        select(MetricSeries.name, MetricSeries.labels_key, newest).where(MetricSeries.name.in_(list(families)))
    ):
        if value is not None:
            family = families[name]
            used[family.metric][_label_values(key, family.labels)] = float(value)

    # Driven from the jobs that hold resources through ix_metric_series_job_id (a derived table: with an IN
    # subquery SQLite walks the name index over every job's series instead, 70 ms against 16 ms at 10,000 jobs).
    holding = select(Replica.job_id).where(Replica.status.in_(HOLDING)).distinct().subquery()
    latest = (
        select(MetricSeries.workspace_id, MetricSeries.name, _newest_value(since_ms).label("value"))
        .select_from(holding)
        .join(MetricSeries, MetricSeries.job_id == holding.c.job_id)
        .where(MetricSeries.name.in_(list(WORKSPACE_USED)))
        .subquery()
    )
    for metric, _ in WORKSPACE_USED.values():
        used[metric] = {}
    for workspace, name, total in await session.execute(
        select(Workspace.name, latest.c.name, func.sum(latest.c.value))
        .join(Workspace, Workspace.id == latest.c.workspace_id)
        .where(latest.c.value.is_not(None))
        .group_by(Workspace.name, latest.c.name)
    ):
        used[WORKSPACE_USED[name][0]][(workspace,)] = float(total or 0.0)
    return used
