"""Quotas: guaranteed and maximum resources of a workspace in a pool, and what the workspace uses there.

Resource names, as stored in ``Quota.guaranteed`` / ``Quota.maximum`` and returned by :func:`quota_usage`:
``cpu`` (milli-cores), ``memory`` (bytes), ``accelerators`` (devices of any type) and the name of each
accelerator type (devices of that type). A name missing from ``maximum`` means no limit; missing from
``guaranteed`` means nothing guaranteed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.quantity import parse_cpu, parse_memory
from aicenter.db.models import AcceleratorType, Pool, PoolGrant, Quota, Workspace
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor

CPU, MEMORY, ACCELERATORS = "cpu", "memory", "accelerators"
BUILTIN_RESOURCES = (CPU, MEMORY, ACCELERATORS)

# Builds the statement that selects what one workspace holds in one pool, (workspace_id, pool_id) -> SELECT of
# rows (cpu milli-cores, memory bytes, accelerator devices, accelerator type name or None).
UsageQuery = Callable[[int, int], Select[int, int, int, str | None]]

# Everything that holds resources in a pool. Empty until the jobs issue adds the query of running replicas
# (one row per replica: its resource request and accelerator type); quota_usage sums whatever is listed here.
USAGE_QUERIES: list[UsageQuery] = []

QuantityIn = str | int | float
# Amounts are compared with BIGINT columns (node capacity, replica requests): keep them in range.
_MAX_AMOUNT = 2**63 - 1


@dataclass(frozen=True)
class QuotaView:
    """A quota with its pool's name and the workspace's current use in that pool."""

    quota: Quota
    pool_name: str
    used: dict[str, int]


async def quota_usage(session: AsyncSession, workspace_id: int, pool_id: int) -> dict[str, int]:
    """What the workspace uses now in the pool, in quota units.

    Always has ``cpu``, ``memory`` and ``accelerators``, plus one entry per accelerator type in use. Sums the
    rows of every query in :data:`USAGE_QUERIES`; the jobs issue fills it with the running replicas' requests,
    so nothing here changes when work starts to exist.
    """
    used = dict.fromkeys(BUILTIN_RESOURCES, 0)
    for build in USAGE_QUERIES:
        for cpu_milli, memory_bytes, devices, accelerator_type in await session.execute(build(workspace_id, pool_id)):
            used[CPU] += int(cpu_milli or 0)
            used[MEMORY] += int(memory_bytes or 0)
            used[ACCELERATORS] += int(devices or 0)
            if accelerator_type and devices:
                used[accelerator_type] = used.get(accelerator_type, 0) + int(devices)
    return used


def _parse_count(value: QuantityIn, field: str) -> int:
    """Accelerator counts are whole devices: ``8`` or ``"8"``."""
    if isinstance(value, bool):
        raise ValidationFailed(f"{value!r} is not a number of devices", field=field)
    if isinstance(value, float):
        if not value.is_integer():
            raise ValidationFailed(f"{value!r} is not a whole number of devices", field=field)
        value = int(value)
    if isinstance(value, str):
        if not value.strip().isdigit():
            raise ValidationFailed(f'"{value}" is not a whole number of devices', field=field)
        value = int(value.strip())
    if value < 0:
        raise ValidationFailed(f"{value} must not be negative", field=field)
    return value


def _normalize(resources: Mapping[str, QuantityIn], prefix: str, accelerator_types: set[str]) -> dict[str, int]:
    """Parse one resource map into quota units, naming ``<prefix>.<resource>`` in every error."""
    out: dict[str, int] = {}
    for name, value in resources.items():
        field = f"{prefix}.{name}"
        if name == CPU:
            out[name] = parse_cpu(value, field=field)
        elif name == MEMORY:
            out[name] = parse_memory(value, field=field)
        elif name == ACCELERATORS or name in accelerator_types:
            out[name] = _parse_count(value, field)
        else:
            known = ", ".join([*BUILTIN_RESOURCES, *sorted(accelerator_types)])
            raise ValidationFailed(f'"{name}" is not a resource; known ones: {known}', field=field)
        if out[name] > _MAX_AMOUNT:
            raise ValidationFailed(f"{value!r} is too large", field=field)
    return out


def _check_bounds(guaranteed: dict[str, int], maximum: dict[str, int]) -> None:
    for name, amount in guaranteed.items():
        # A type's devices are also accelerators, so they are bounded by maximum.accelerators too.
        bounds = [name] if name in (CPU, MEMORY, ACCELERATORS) else [name, ACCELERATORS]
        for bound in bounds:
            if bound in maximum and amount > maximum[bound]:
                raise ValidationFailed(
                    f"{amount} is more than maximum.{bound} ({maximum[bound]}); guaranteed must not exceed maximum",
                    field=f"guaranteed.{name}",
                    details={"guaranteed": amount, "maximum": maximum[bound]},
                )


async def _pool(session: AsyncSession, pool_id: int) -> Pool:
    pool = await session.get(Pool, pool_id)
    if pool is None:
        raise NotFound(f"pool {pool_id} not found", details={"pool_id": pool_id})
    return pool


async def list_quotas(session: AsyncSession, actor: Actor, workspace_id: int) -> list[QuotaView]:
    """The workspace's quotas by pool name, each with current use (members of the workspace, platform admins)."""
    await get_visible_workspace(session, actor, workspace_id)
    rows = await session.execute(
        select(Quota, Pool.name)
        .join(Pool, Pool.id == Quota.pool_id)
        .where(Quota.workspace_id == workspace_id)
        .order_by(Pool.name)
    )
    return [
        QuotaView(quota, pool_name, await quota_usage(session, workspace_id, quota.pool_id))
        for quota, pool_name in rows
    ]


async def set_quota(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    pool_id: int,
    *,
    guaranteed: Mapping[str, QuantityIn],
    maximum: Mapping[str, QuantityIn],
) -> QuotaView:
    """Create or replace the quota of a workspace in a pool (platform admins).

    Quantities are parsed (``cpu: "16"``, ``memory: "64Gi"``, devices as whole numbers) and stored normalized.
    If the workspace is not yet granted the pool, setting the quota grants it: a quota in a pool the workspace
    may not use would mean nothing.

    Raises:
        NotFound: no such workspace or pool.
        ValidationFailed: an unknown resource name, a malformed or negative quantity, or guaranteed above
            maximum; ``details.field`` is e.g. ``maximum.memory``.
        Conflict: a maximum below what the workspace uses now; ``details.used`` has the current use.
    """
    require_platform_admin(actor, "setting quotas")
    # Locked on PostgreSQL so that two concurrent PUTs of a new quota do not both insert it.
    workspace = await session.get(Workspace, workspace_id, with_for_update=True)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    pool = await _pool(session, pool_id)
    types = set((await session.scalars(select(AcceleratorType.name))).all())
    guaranteed_n = _normalize(guaranteed, "guaranteed", types)
    maximum_n = _normalize(maximum, "maximum", types)
    _check_bounds(guaranteed_n, maximum_n)
    used = await quota_usage(session, workspace.id, pool.id)
    below = {name: used.get(name, 0) for name, limit in maximum_n.items() if limit < used.get(name, 0)}
    if below:
        name = next(iter(below))
        raise Conflict(
            f"maximum.{name} ({maximum_n[name]}) is below what workspace {workspace.name} uses now in pool "
            f"{pool.name} ({below[name]}); stop some work first or choose a higher maximum",
            details={"field": f"maximum.{name}", "used": used},
        )
    granted = await session.get(PoolGrant, (pool.id, workspace.id)) is not None
    if not granted:
        session.add(PoolGrant(pool_id=pool.id, workspace_id=workspace.id))
    quota = await session.scalar(select(Quota).where(Quota.workspace_id == workspace.id, Quota.pool_id == pool.id))
    action = "quota.update"
    if quota is None:
        quota = Quota(workspace_id=workspace.id, pool_id=pool.id)
        session.add(quota)
        action = "quota.create"
    quota.guaranteed = guaranteed_n
    quota.maximum = maximum_n
    await session.flush()
    details: dict[str, Any] = {"pool": pool.name, "guaranteed": guaranteed_n, "maximum": maximum_n}
    if not granted:
        details["granted_pool"] = True
    audit.record(session, actor, action, "quota", quota.id, workspace_id=workspace.id, details=details)
    return QuotaView(quota, pool.name, used)


async def delete_quota(session: AsyncSession, actor: Actor, workspace_id: int, pool_id: int) -> None:
    """Remove the quota of a workspace in a pool (platform admins). The pool grant stays."""
    require_platform_admin(actor, "deleting quotas")
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    pool = await _pool(session, pool_id)
    quota = await session.scalar(select(Quota).where(Quota.workspace_id == workspace.id, Quota.pool_id == pool.id))
    if quota is None:
        raise NotFound(f"workspace {workspace.name} has no quota in pool {pool.name}")
    audit.record(
        session,
        actor,
        "quota.delete",
        "quota",
        quota.id,
        workspace_id=workspace.id,
        details={"pool": pool.name, "guaranteed": quota.guaranteed, "maximum": quota.maximum},
    )
    await session.delete(quota)
    await session.flush()
