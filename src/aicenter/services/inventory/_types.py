"""Accelerator types: ``nvidia-a100``, ``ascend-910b``, ``cambricon-mlu370``, ... with vendor and memory."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.db.models import AcceleratorType, Node, Quota, ResourceSpec, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import require_platform_admin
from aicenter.services.context import Actor
from aicenter.services.inventory._common import UNSET, Unset, memory_bytes

# Resource names a quota may use besides accelerator types, so a type may never take one of them.
RESERVED_NAMES = frozenset({"cpu", "memory", "accelerators"})


async def list_accelerator_types(
    session: AsyncSession, actor: Actor, *, limit: int = 50, cursor: str | None = None, vendor: str | None = None
) -> Page[AcceleratorType]:
    """Every accelerator type (any signed-in user may read them: they name what specs offer)."""
    stmt = select(AcceleratorType)
    if vendor:
        stmt = stmt.where(AcceleratorType.vendor == vendor)
    return await paginate(session, stmt, AcceleratorType.id, limit=limit, cursor=cursor)


async def get_accelerator_type(session: AsyncSession, actor: Actor, type_id: int) -> AcceleratorType:
    row = await session.get(AcceleratorType, type_id)
    if row is None:
        raise NotFound(f"accelerator type {type_id} not found")
    return row


async def types_by_name(session: AsyncSession, names: Iterable[str]) -> dict[str, AcceleratorType]:
    """The existing accelerator types among ``names``."""
    wanted = set(names)
    if not wanted:
        return {}
    rows = await session.scalars(select(AcceleratorType).where(AcceleratorType.name.in_(wanted)))
    return {row.name: row for row in rows}


def _check_type_name(name: str) -> None:
    check_name(name)
    if name in RESERVED_NAMES:
        raise ValidationFailed(f'"{name}" is a reserved resource name', field="name")


async def _check_unique(session: AsyncSession, name: str, type_id: int | None = None) -> None:
    existing = await session.scalar(select(AcceleratorType.id).where(AcceleratorType.name == name))
    if existing is not None and existing != type_id:
        raise Conflict(f'an accelerator type named "{name}" already exists', details={"field": "name"})


async def create_accelerator_type(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    vendor: str,
    memory: str | int | float | None = None,
    description: str = "",
) -> AcceleratorType:
    """Create an accelerator type. Admins only.

    Args:
        name: e.g. ``nvidia-a100``; nodes and specs refer to the type by this name.
        vendor: e.g. ``nvidia``, ``huawei``, ``cambricon``.
        memory: Device memory as a quantity (``80Gi``) or bytes; unknown if omitted.
    """
    require_platform_admin(actor, "accelerator type creation")
    _check_type_name(name)
    check_name(vendor, "vendor")
    check_text(description, "description", 512)
    mem = 0 if memory is None else memory_bytes(memory, positive=False)
    await _check_unique(session, name)
    row = AcceleratorType(name=name, vendor=vendor, memory_bytes=mem, description=description)
    session.add(row)
    await session.flush()
    audit.record(session, actor, "accelerator_type.create", "accelerator_type", row.id, details={"name": name})
    return row


async def _users_of(session: AsyncSession, name: str) -> dict[str, list[str]]:
    """What refers to accelerator type ``name``: nodes, specs and quotas (by workspace)."""
    # Node accelerators and quota limits are JSON; scanning them here is portable and this runs only on an
    # admin's rename or delete.
    nodes = sorted(
        node_name
        for node_name, accelerators in (await session.execute(select(Node.name, Node.accelerators))).all()
        if any(isinstance(a, dict) and a.get("type") == name for a in accelerators or [])
    )
    specs = sorted(
        (await session.scalars(select(ResourceSpec.name).where(ResourceSpec.accelerator_type == name))).all()
    )
    quota_rows = await session.execute(
        select(Workspace.name, Quota.guaranteed, Quota.maximum).join(Workspace, Workspace.id == Quota.workspace_id)
    )
    quotas = sorted(
        {ws for ws, guaranteed, maximum in quota_rows if name in (guaranteed or {}) or name in (maximum or {})}
    )
    return {k: v for k, v in {"nodes": nodes, "specs": specs, "quotas": quotas}.items() if v}


def _in_use(name: str, users: dict[str, list[str]], doing: str) -> Conflict:
    said = "; ".join(f"{kind} {', '.join(names)}" for kind, names in users.items())
    return Conflict(f'cannot {doing} accelerator type "{name}": it is used by {said}', details=dict(users))


async def update_accelerator_type(
    session: AsyncSession,
    actor: Actor,
    type_id: int,
    *,
    name: str | Unset = UNSET,
    vendor: str | Unset = UNSET,
    memory: str | int | float | Unset | None = UNSET,
    description: str | Unset = UNSET,
) -> AcceleratorType:
    """Change an accelerator type. Admins only. Renaming one that nodes, specs or quotas use is a Conflict."""
    require_platform_admin(actor, "accelerator type changes")
    row = await get_accelerator_type(session, actor, type_id)
    changes: dict[str, Any] = {}
    if name is not UNSET and name != row.name:
        _check_type_name(name)
        await _check_unique(session, name, row.id)
        if users := await _users_of(session, row.name):
            raise _in_use(row.name, users, "rename")
        changes["name"] = name
    if vendor is not UNSET:
        changes["vendor"] = check_name(vendor, "vendor")
    if memory is not UNSET:
        changes["memory_bytes"] = 0 if memory is None else memory_bytes(memory, positive=False)
    if description is not UNSET:
        changes["description"] = check_text(description, "description", 512)
    for key, value in changes.items():
        setattr(row, key, value)
    if changes:
        await session.flush()
        audit.record(session, actor, "accelerator_type.update", "accelerator_type", row.id, details=changes)
    return row


async def delete_accelerator_type(session: AsyncSession, actor: Actor, type_id: int) -> None:
    """Delete an accelerator type. Admins only.

    Raises:
        Conflict: nodes, specs or quotas use it; ``details`` names them.
    """
    require_platform_admin(actor, "accelerator type deletion")
    row = await get_accelerator_type(session, actor, type_id)
    if users := await _users_of(session, row.name):
        raise _in_use(row.name, users, "delete")
    await session.delete(row)
    audit.record(session, actor, "accelerator_type.delete", "accelerator_type", row.id, details={"name": row.name})
