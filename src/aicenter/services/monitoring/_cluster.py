"""Per-node, per-workspace and per-lease numbers for ``/metrics``: capacity and allocation from the registry,
use from the samplers' latest values.

Three reads, none that grows with the number of jobs ever run: the node table (hundreds of rows), the replicas
that hold resources (``ix_replicas_status``, grouped by node, workspace and type: at most one row per
combination), and the named leases (a handful). What the samplers measured comes from the series' latest values
(``latest_values``, one indexed read per prefix), no older than ``USED_MAX_AGE_S``, so a node that stopped
reporting drops out of the "used" families instead of showing its last value forever.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Protocol

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import ReplicaStatus
from aicenter.core.pools import pools_of
from aicenter.db.models import Job, Lease, Node, Pool, Replica, Workspace
from aicenter.services.monitoring._series_query import latest_values

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
USED_PREFIXES = ("node.", "accelerator.", "replica.")


class LatestValueLike(Protocol):
    """What is read of a series' latest value (``monitoring.LatestValue`` fits)."""

    @property
    def name(self) -> str: ...
    @property
    def labels(self) -> Mapping[str, str]: ...
    @property
    def value(self) -> float: ...
    @property
    def workspace_id(self) -> int | None: ...


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


async def cluster_snapshot(session: AsyncSession, latest: Sequence[LatestValueLike] | None = None) -> ClusterSnapshot:
    """Read the per-node, per-workspace and lease numbers, and the samplers' latest values.

    Args:
        session: A read session.
        latest: The latest values of the ``node.``, ``accelerator.`` and ``replica.`` series; None: read them
            (``latest_values``, no older than ``USED_MAX_AGE_S``).
    """
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

    if latest is None:
        latest = [
            value
            for prefix in USED_PREFIXES
            for value in await latest_values(session, None, prefix=prefix, max_age_s=USED_MAX_AGE_S)
        ]
    if latest:
        snap.used.update(await _used(session, latest))
    return snap


async def _used(session: AsyncSession, latest: Iterable[LatestValueLike]) -> dict[str, dict[tuple[str, ...], float]]:
    """The sampled values as families: node and accelerator series as they are, replica series per workspace."""
    families = {f.series: f for f in USED_FAMILIES}
    used: dict[str, dict[tuple[str, ...], float]] = defaultdict(dict)
    per_workspace: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
    for value in latest:
        family = families.get(value.name)
        if family is not None:
            used[family.metric][tuple(str(value.labels.get(k, "")) for k in family.labels)] = float(value.value)
        elif value.name in WORKSPACE_USED and value.workspace_id is not None:
            per_workspace[WORKSPACE_USED[value.name][0]][value.workspace_id] += float(value.value)
    if per_workspace:
        ids = {i for sums in per_workspace.values() for i in sums}
        names = dict((await session.execute(select(Workspace.id, Workspace.name).where(Workspace.id.in_(ids)))).all())
        for metric, sums in per_workspace.items():
            used[metric] = {(names[i],): total for i, total in sums.items() if i in names}
    return dict(used)
