"""Nodes: hosts with CPUs, memory, accelerators, labels and topology; cordon, drain and uncordon."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.core.pools import pools_of
from aicenter.core.roles import NodeSchedule, NodeState
from aicenter.db.models import Node, Pool
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import require_platform_admin
from aicenter.services.alerts import record_event
from aicenter.services.context import Actor
from aicenter.services.inventory._common import (
    UNSET,
    Unset,
    check_labels,
    check_topology,
    cpu_milli,
    memory_bytes,
    parse_label_filter,
)
from aicenter.services.inventory._pools import pools_by_name
from aicenter.services.inventory._types import types_by_name

MAX_ACCELERATORS = 256
MANUAL_EXECUTOR = "manual"  # registered by an admin through the API; no executor heartbeats it


@dataclass(frozen=True)
class AcceleratorInput:
    """One device of a manually registered node. ``memory`` defaults to the memory of its type."""

    index: int
    type: str
    memory: str | int | float | None = None
    nvlink_domain: str | None = None


@dataclass(frozen=True)
class NodeView:
    """A node and the names of every pool it belongs to (``aicenter.core.pools.pools_of``; pools overlap)."""

    node: Node
    pools: list[str]


async def _view(session: AsyncSession, node: Node) -> NodeView:
    return NodeView(node, pools_of(node.labels, await pools_by_name(session)))


async def _get(session: AsyncSession, actor: Actor, node_id: int, doing: str) -> Node:
    require_platform_admin(actor, doing)
    node = await session.get(Node, node_id)
    if node is None:
        raise NotFound(f"node {node_id} not found")
    return node


async def list_nodes(
    session: AsyncSession,
    actor: Actor,
    *,
    limit: int = 50,
    cursor: str | None = None,
    state: NodeState | None = None,
    schedule: NodeSchedule | None = None,
    labels: Sequence[str] = (),
    pool: str | None = None,
) -> Page[NodeView]:
    """Nodes, filtered. Admins only.

    Args:
        labels: ``key=value`` filters; a node must carry every one.
        pool: The name of a pool; only its nodes (those its selector matches).
    """
    require_platform_admin(actor, "listing nodes")
    stmt = select(Node)
    if state is not None:
        stmt = stmt.where(Node.state == state.value)
    if schedule is not None:
        stmt = stmt.where(Node.schedule == schedule.value)
    wanted = dict(parse_label_filter(raw) for raw in labels)
    if pool is not None:
        # ``core.pools.selector_matches`` as label filters in SQL, so that pagination stays in the database: a
        # node is in the pool when it carries every label of the selector (labels and selectors are strings).
        selector = await session.scalar(select(Pool.selector).where(Pool.name == pool))
        if selector is None:
            raise ValidationFailed(f'pool "{pool}" does not exist', field="pool")
        for key, value in selector.items():
            if wanted.setdefault(key, value) != value:  # contradicts a label filter: nothing matches
                return Page([], None)
    for key, value in wanted.items():
        stmt = stmt.where(Node.labels[key].as_string() == value)
    page = await paginate(session, stmt, Node.id, limit=limit, cursor=cursor)
    pools = await pools_by_name(session) if page.items else []
    return Page([NodeView(n, pools_of(n.labels, pools)) for n in page.items], page.next_cursor)


async def get_node(session: AsyncSession, actor: Actor, node_id: int) -> NodeView:
    """One node. Admins only."""
    return await _view(session, await _get(session, actor, node_id, "reading nodes"))


async def check_accelerators(session: AsyncSession, accelerators: Sequence[AcceleratorInput]) -> list[dict[str, Any]]:
    """Validate devices against the known accelerator types; return them as stored on the node."""
    if len(accelerators) > MAX_ACCELERATORS:
        raise ValidationFailed(
            f"has {len(accelerators)} devices; the limit is {MAX_ACCELERATORS}", field="accelerators"
        )
    known = await types_by_name(session, (a.type for a in accelerators))
    seen: set[int] = set()
    out: list[dict[str, Any]] = []
    for i, acc in enumerate(accelerators):
        if acc.index < 0 or acc.index in seen:
            problem = "must not be negative" if acc.index < 0 else f"{acc.index} appears twice"
            raise ValidationFailed(problem, field=f"accelerators[{i}].index")
        seen.add(acc.index)
        kind = known.get(acc.type)
        if kind is None:
            raise ValidationFailed(
                f'accelerator type "{acc.type}" does not exist; an admin creates it under /api/v1/accelerator-types',
                field=f"accelerators[{i}].type",
            )
        mem = kind.memory_bytes if acc.memory is None else memory_bytes(acc.memory, f"accelerators[{i}].memory")
        out.append(
            {
                "index": acc.index,
                "type": acc.type,
                "model": None,
                "memory_bytes": mem,
                "nvlink_domain": check_topology(acc.nvlink_domain, f"accelerators[{i}].nvlink_domain"),
            }
        )
    return sorted(out, key=lambda a: int(a["index"]))


async def create_node(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    cpu: str | int | float,
    memory: str | int | float,
    address: str = "",
    accelerators: Sequence[AcceleratorInput] = (),
    labels: Mapping[str, Any] | None = None,
    rack: str | None = None,
    leaf: str | None = None,
    spine: str | None = None,
    nvlink_domain: str | None = None,
) -> NodeView:
    """Register a node by hand (executors register their own hosts). Admins only.

    Raises:
        ValidationFailed: a bad quantity, label, topology name, or an unknown accelerator type (the field
            names the device, e.g. ``accelerators[1].type``).
        Conflict: a node of that name exists.
    """
    require_platform_admin(actor, "node registration")
    check_name(name)
    node = Node(
        name=name,
        address=check_text(address, "address", 256),
        executor=MANUAL_EXECUTOR,
        cpu_milli=cpu_milli(cpu),
        memory_bytes=memory_bytes(memory),
        accelerators=await check_accelerators(session, accelerators),
        labels=check_labels(labels or {}),
        rack=check_topology(rack, "rack"),
        leaf=check_topology(leaf, "leaf"),
        spine=check_topology(spine, "spine"),
        nvlink_domain=check_topology(nvlink_domain, "nvlink_domain"),
        schedule=NodeSchedule.SCHEDULABLE.value,
        state=NodeState.READY.value,
    )
    if await session.scalar(select(Node.id).where(Node.name == name)) is not None:
        raise Conflict(f'a node named "{name}" already exists', details={"field": "name"})
    session.add(node)
    await session.flush()
    audit.record(session, actor, "node.create", "node", node.id, details={"name": name})
    record_event(session, "node.joined", f"node {name} added by {actor.username}", node_id=node.id)
    return await _view(session, node)


async def update_node(
    session: AsyncSession,
    actor: Actor,
    node_id: int,
    *,
    labels: Mapping[str, Any] | Unset = UNSET,
    address: str | Unset = UNSET,
    rack: str | Unset | None = UNSET,
    leaf: str | Unset | None = UNSET,
    spine: str | Unset | None = UNSET,
    nvlink_domain: str | Unset | None = UNSET,
) -> NodeView:
    """Change a node's labels (replaced as a whole), address or topology (None clears). Admins only."""
    node = await _get(session, actor, node_id, "node changes")
    changes: dict[str, Any] = {}
    if labels is not UNSET:
        changes["labels"] = check_labels(labels)
    if address is not UNSET:
        changes["address"] = check_text(address, "address", 256)
    for field, value in (("rack", rack), ("leaf", leaf), ("spine", spine), ("nvlink_domain", nvlink_domain)):
        if value is not UNSET:
            changes[field] = check_topology(value, field)
    for key, value in changes.items():
        setattr(node, key, value)
    if changes:
        await session.flush()
        audit.record(session, actor, "node.update", "node", node.id, details=changes)
    return await _view(session, node)


async def set_node_schedule(session: AsyncSession, actor: Actor, node_id: int, schedule: NodeSchedule) -> NodeView:
    """Cordon (no new work), drain (no new work; running work is asked to leave) or uncordon. Admins only."""
    node = await _get(session, actor, node_id, "cordoning nodes")
    if node.schedule != schedule.value:
        previous = node.schedule
        node.schedule = schedule.value
        await session.flush()
        action = {
            NodeSchedule.SCHEDULABLE: "uncordon",
            NodeSchedule.CORDONED: "cordon",
            NodeSchedule.DRAINING: "drain",
        }[schedule]
        audit.record(
            session, actor, f"node.{action}", "node", node.id, details={"from": previous, "to": schedule.value}
        )
        record_event(
            session,
            {"cordon": "node.cordoned", "drain": "node.draining", "uncordon": "node.uncordoned"}[action],
            f"node {node.name}: {action} by {actor.username}",
            node_id=node.id,
        )
    return await _view(session, node)


async def delete_node(session: AsyncSession, actor: Actor, node_id: int) -> None:
    """Forget a node. Admins only. A host whose executor still runs registers itself again."""
    node = await _get(session, actor, node_id, "node deletion")
    await session.delete(node)
    audit.record(session, actor, "node.delete", "node", node.id, details={"name": node.name})
    record_event(session, "node.removed", f"node {node.name} removed by {actor.username}", node_id=node.id)
