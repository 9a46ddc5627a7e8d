"""Hosts that executors find: registration, heartbeats, and marking silent nodes not ready.

These run in controllers, not for a person, so they act as the system. A heartbeat is not audited (one row per
node every 15 s would drown the log); registration and every change of a node's state are.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import Severity
from aicenter.core.clock import utcnow
from aicenter.core.roles import NodeSchedule, NodeState
from aicenter.db.models import AcceleratorType, Node
from aicenter.executors import EXECUTOR_LABEL, TOPOLOGY_LABELS, AcceleratorInfo, HostInfo
from aicenter.services import audit
from aicenter.services.alerts import record_event
from aicenter.services.context import Actor
from aicenter.services.inventory._common import check_labels
from aicenter.services.inventory._types import types_by_name

SYSTEM = Actor.system("system")


def _topology(labels: dict[str, str]) -> dict[str, str]:
    # What an engine reports of a host's place in the network (executors.TOPOLOGY_LABELS) becomes its topology.
    return {column: labels[label] for label, column in TOPOLOGY_LABELS.items() if labels.get(label)}


async def _ensure_types(session: AsyncSession, accelerators: tuple[AcceleratorInfo, ...]) -> None:
    """Create the accelerator types a host reports that do not exist yet (vendor and memory from the driver)."""
    first: dict[str, AcceleratorInfo] = {}
    for acc in accelerators:
        first.setdefault(acc.type, acc)
    missing = set(first) - set(await types_by_name(session, first))
    for name in sorted(missing):
        acc = first[name]
        row = AcceleratorType(name=name, vendor=acc.vendor, memory_bytes=acc.memory_bytes, description=acc.model)
        try:
            async with session.begin_nested():  # another replica may create it at the same moment
                session.add(row)
                await session.flush()
        except IntegrityError:
            continue
        audit.record(
            session, SYSTEM, "accelerator_type.create", "accelerator_type", row.id, details={"name": name, "auto": True}
        )


def _devices(host: HostInfo, previous: list[Any]) -> list[dict[str, Any]]:
    # An admin may have set NVLink domains that the driver does not report; keep them per device index.
    domains = {a.get("index"): a.get("nvlink_domain") for a in previous if isinstance(a, dict)}
    return [
        {
            "index": a.index,
            "type": a.type,
            "model": a.model,
            "memory_bytes": a.memory_bytes,
            "nvlink_domain": a.nvlink_domain or domains.get(a.index),
        }
        for a in sorted(host.accelerators, key=lambda a: a.index)
    ]


async def register_host(session: AsyncSession, host: HostInfo, *, now: datetime | None = None) -> Node:
    """Create or refresh the node of a host an executor found, and mark it ready with a fresh heartbeat.

    Hardware, address and executor come from the host; its labels are added to the node's (labels an admin set
    are kept); schedule (cordon/drain) and topology stay as the admin left them. Missing accelerator types are
    created from what the driver reports. Safe when several replicas register the same host at once.

    Args:
        session: A write session; the caller commits.
        host: What the executor detected.
        now: The heartbeat time (default: now).

    Returns:
        The node row.
    """
    now = now or utcnow()
    labels = check_labels({EXECUTOR_LABEL: host.executor, **host.labels})
    topology = _topology(labels)
    await _ensure_types(session, host.accelerators)
    node = await session.scalar(select(Node).where(Node.name == host.name))
    if node is None:
        node = Node(
            name=host.name,
            address=host.address,
            executor=host.executor,
            cpu_milli=host.cpu_milli,
            memory_bytes=host.memory_bytes,
            accelerators=_devices(host, []),
            labels=labels,
            **topology,
            schedule=NodeSchedule.SCHEDULABLE.value,
            state=NodeState.READY.value,
            last_heartbeat_at=now,
        )
        try:
            async with session.begin_nested():
                session.add(node)
                await session.flush()
        except IntegrityError:  # another replica registered it meanwhile: refresh theirs below
            node = await session.scalar(select(Node).where(Node.name == host.name))
            assert node is not None
        else:
            audit.record(
                session,
                SYSTEM,
                "node.register",
                "node",
                node.id,
                details={"name": node.name, "executor": node.executor, "accelerators": len(node.accelerators)},
            )
            record_event(
                session,
                "node.joined",
                f"node {node.name} joined ({node.executor}, {len(node.accelerators)} accelerators)",
                node_id=node.id,
            )
            return node
    wanted: dict[str, Any] = {
        "address": host.address,
        "executor": host.executor,
        "cpu_milli": host.cpu_milli,
        "memory_bytes": host.memory_bytes,
        "accelerators": _devices(host, list(node.accelerators or [])),
        "labels": {**(node.labels or {}), **labels},
        **topology,
    }
    changes = {k: v for k, v in wanted.items() if getattr(node, k) != v}
    for key, value in changes.items():
        setattr(node, key, value)
    previous_state = node.state
    node.state = NodeState.READY.value
    node.last_heartbeat_at = now
    await session.flush()
    if changes or previous_state != NodeState.READY.value:
        details = {k: v for k, v in changes.items() if k != "accelerators"}
        if "accelerators" in changes:
            details["accelerators"] = len(changes["accelerators"])
        if previous_state != NodeState.READY.value:
            details["state"] = {"from": previous_state, "to": NodeState.READY.value}
        audit.record(session, SYSTEM, "node.register", "node", node.id, details=details)
    if previous_state != NodeState.READY.value:
        record_event(session, "node.ready", f"node {node.name} is ready again (was {previous_state})", node_id=node.id)
    return node


async def heartbeat(session: AsyncSession, name: str, *, now: datetime | None = None) -> bool:
    """Record that the host of node ``name`` is alive; a node that was not ready becomes ready.

    Returns:
        False if no such node exists (an admin deleted it): the caller registers the host again.
    """
    node = await session.scalar(select(Node).where(Node.name == name))
    if node is None:
        return False
    node.last_heartbeat_at = now or utcnow()
    if node.state != NodeState.READY.value:
        audit.record(session, SYSTEM, "node.ready", "node", node.id, details={"name": name, "from": node.state})
        record_event(session, "node.ready", f"node {name} is ready again (was {node.state})", node_id=node.id)
        node.state = NodeState.READY.value
    await session.flush()
    return True


async def mark_lost_nodes(session: AsyncSession, *, lost_after_s: float, now: datetime | None = None) -> list[str]:
    """Mark ready nodes whose last heartbeat is older than ``lost_after_s`` as not ready.

    Idempotent, so every replica may run it: a node already marked is not touched again, and on PostgreSQL a
    row another replica is marking is skipped (SKIP LOCKED). Nodes registered by hand have no heartbeat and
    are never marked.

    Returns:
        The names of the nodes this call marked.
    """
    now = now or utcnow()
    cutoff = now - timedelta(seconds=lost_after_s)
    stmt = (
        select(Node)
        .where(
            Node.state == NodeState.READY.value,
            Node.last_heartbeat_at.is_not(None),
            Node.last_heartbeat_at < cutoff,
        )
        .with_for_update(skip_locked=True)
    )
    marked: list[str] = []
    for node in (await session.scalars(stmt)).all():
        node.state = NodeState.NOT_READY.value
        marked.append(node.name)
        audit.record(
            session,
            SYSTEM,
            "node.not_ready",
            "node",
            node.id,
            details={
                "name": node.name,
                "last_heartbeat_at": node.last_heartbeat_at.isoformat() if node.last_heartbeat_at else None,
                "lost_after_s": lost_after_s,
            },
        )
        record_event(
            session,
            "node.lost",
            f"node {node.name} lost: no heartbeat for {lost_after_s:.0f} s",
            severity=Severity.WARNING,
            node_id=node.id,
        )
    await session.flush()
    return marked


async def sync_engine_hosts(
    session: AsyncSession, executor: str, hosts: Sequence[HostInfo], *, now: datetime | None = None
) -> tuple[list[str], list[str]]:
    """Make the inventory agree with what an engine (Ray, Slurm) reports of its nodes.

    Every host reported is registered (created, refreshed and marked ready, as ``register_host``); every ready
    node of that executor the engine no longer reports (dead, down, drained, removed) becomes ``not_ready`` at
    once, without waiting for ``node_lost_after_s``: the engine's own health checks already waited.

    Args:
        session: A write session; the caller commits.
        executor: The engine's executor name; only its nodes are touched.
        hosts: The usable nodes the engine reports now (``Executor.nodes``).

    Returns:
        The names of the nodes that became ready (new or back) and of those that became not ready.
    """
    now = now or utcnow()
    before = {n.name: n.state for n in (await session.scalars(select(Node).where(Node.executor == executor))).all()}
    ready = []
    for host in hosts:
        await register_host(session, host, now=now)
        if before.get(host.name) != NodeState.READY.value:
            ready.append(host.name)
    reported = {h.name for h in hosts}
    gone = sorted(name for name, state in before.items() if name not in reported and state == NodeState.READY.value)
    for node in (await session.scalars(select(Node).where(Node.name.in_(gone)).with_for_update())).all():
        node.state = NodeState.NOT_READY.value
        audit.record(
            session,
            SYSTEM,
            "node.not_ready",
            "node",
            node.id,
            details={"name": node.name, "executor": executor, "why": "the engine no longer reports it usable"},
        )
        record_event(
            session,
            "node.lost",
            f"node {node.name} lost: {executor} no longer reports it usable",
            severity=Severity.WARNING,
            node_id=node.id,
        )
    await session.flush()
    return ready, gone


async def node_ids(session: AsyncSession) -> dict[str, int]:
    """Every node's id by name (internal: the sampler labels what executors report by node name)."""
    rows = await session.execute(select(Node.name, Node.id))
    return {str(row[0]): int(row[1]) for row in rows.all()}
