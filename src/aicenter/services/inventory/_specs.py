"""Resource specs: named, priced bundles of CPU, memory and accelerators (whole devices or a share of one)."""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

from sqlalchemy import and_, exists, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.db.models import Pool, ResourceSpec
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor
from aicenter.services.inventory._common import UNSET, Unset, cpu_milli, memory_bytes
from aicenter.services.inventory._pools import granted_pool_ids
from aicenter.services.inventory._types import types_by_name

MAX_ACCELERATORS = 1024
MAX_PRICE = Decimal("1e15")  # Numeric(20, 4) holds 16 integer digits
# Prices are in the currency's smallest unit (core.billing.MINOR_UNIT): a price finer than a coin's cent could
# not be shown or checked by hand, and the issue refuses it as bad input. The column keeps 4 places (older rows).
PRICE_STEP = billing.MINOR_UNIT


def _price(value: Decimal | str | int | float) -> Decimal:
    try:
        price = value if isinstance(value, Decimal) else Decimal(str(value))
    except InvalidOperation as exc:
        raise ValidationFailed(f'"{value}" is not a decimal number', field="price_per_hour") from exc
    if not price.is_finite() or price < 0:
        raise ValidationFailed("must be a number of coins, 0 or more", field="price_per_hour")
    if price >= MAX_PRICE:
        raise ValidationFailed(f"must be less than {MAX_PRICE:f}", field="price_per_hour")
    if price != price.quantize(PRICE_STEP):
        raise ValidationFailed("has more than 2 decimal places (the smallest unit is 0.01)", field="price_per_hour")
    return price.quantize(PRICE_STEP)


def _weight(value: float) -> float:
    if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value < 1e6:
        raise ValidationFailed("must be a number more than 0 (and less than 1000000)", field="billing_weight")
    return float(value)


async def _check_devices(
    session: AsyncSession, accelerators: int, accelerator_share: int, accelerator_type: str | None
) -> None:
    if not 0 <= accelerators <= MAX_ACCELERATORS:
        raise ValidationFailed(f"must be between 0 and {MAX_ACCELERATORS}", field="accelerators")
    if accelerator_share:
        if not 1 <= accelerator_share <= 999:
            raise ValidationFailed(
                "is thousandths of one device: 1..999 (use accelerators for whole devices)", field="accelerator_share"
            )
        if accelerators:
            raise ValidationFailed(
                "a spec has either whole accelerators or a share of one, not both", field="accelerator_share"
            )
    if accelerator_type is not None:
        if not accelerators and not accelerator_share:
            raise ValidationFailed("is set but the spec has no accelerators", field="accelerator_type")
        if accelerator_type not in await types_by_name(session, [accelerator_type]):
            raise ValidationFailed(f'accelerator type "{accelerator_type}" does not exist', field="accelerator_type")


async def _check_pool(session: AsyncSession, pool_id: int | None) -> int | None:
    if pool_id is not None and await session.get(Pool, pool_id) is None:
        raise ValidationFailed(f"pool {pool_id} does not exist", field="pool_id")
    return pool_id


async def _check_unique(session: AsyncSession, name: str, spec_id: int | None = None) -> None:
    existing = await session.scalar(select(ResourceSpec.id).where(ResourceSpec.name == name))
    if existing is not None and existing != spec_id:
        raise Conflict(f'a spec named "{name}" already exists', details={"field": "name"})


def _usable(actor: Actor, workspace_id: int | None) -> Any:
    """Specs usable by the actor's workspaces (or one of them): in a granted pool, or in any pool if granted one."""
    granted = granted_pool_ids(actor, workspace_id)
    any_grant = exists(granted)
    return and_(
        ResourceSpec.enabled.is_(True),
        or_(and_(ResourceSpec.pool_id.is_(None), any_grant), ResourceSpec.pool_id.in_(granted)),
    )


async def list_specs(
    session: AsyncSession,
    actor: Actor,
    *,
    limit: int = 50,
    cursor: str | None = None,
    workspace_id: int | None = None,
    accelerator_type: str | None = None,
) -> Page[ResourceSpec]:
    """Specs the actor may use.

    Platform admins see every spec; members the enabled specs usable in pools granted to their workspaces
    (a spec without a pool is usable in every pool).

    Args:
        workspace_id: Only specs usable by this workspace (the actor must belong to it; otherwise NotFound).
        accelerator_type: Only specs of this accelerator type.
    """
    stmt = select(ResourceSpec)
    if workspace_id is not None:
        await get_visible_workspace(session, actor, workspace_id)
        stmt = stmt.where(_usable(actor, workspace_id))
    elif not actor.is_platform_admin:
        stmt = stmt.where(_usable(actor, None))
    if accelerator_type:
        stmt = stmt.where(ResourceSpec.accelerator_type == accelerator_type)
    return await paginate(session, stmt, ResourceSpec.id, limit=limit, cursor=cursor)


async def get_spec(session: AsyncSession, actor: Actor, spec_id: int) -> ResourceSpec:
    """A spec the actor may use (admins: any); others read as NotFound."""
    stmt = select(ResourceSpec).where(ResourceSpec.id == spec_id)
    if not actor.is_platform_admin:
        stmt = stmt.where(_usable(actor, None))
    spec = await session.scalar(stmt)
    if spec is None:
        raise NotFound(f"spec {spec_id} not found")
    return spec


async def create_spec(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    cpu: str | int | float,
    memory: str | int | float,
    price_per_hour: Decimal | str | int | float,
    accelerators: int = 0,
    accelerator_share: int = 0,
    accelerator_type: str | None = None,
    billing_weight: float = 1.0,
    pool_id: int | None = None,
    description: str = "",
    enabled: bool = True,
) -> ResourceSpec:
    """Create a spec. Admins only.

    Args:
        accelerators: Whole devices.
        accelerator_share: Thousandths of one device (1..999) for a fractional spec; then ``accelerators`` is 0.
        accelerator_type: An existing type, or None for "any type".
        price_per_hour: Coins per machine-hour, at most 2 decimal places.
        billing_weight: Multiplies machine time; more than 0.
        pool_id: The only pool the spec is usable in; None for every pool.
    """
    require_platform_admin(actor, "spec creation")
    check_name(name)
    check_text(description, "description", 512)
    spec = ResourceSpec(
        name=name,
        description=description,
        cpu_milli=cpu_milli(cpu),
        memory_bytes=memory_bytes(memory),
        accelerators=accelerators,
        accelerator_share=accelerator_share,
        accelerator_type=accelerator_type,
        price_per_hour=_price(price_per_hour),
        billing_weight=_weight(billing_weight),
        pool_id=await _check_pool(session, pool_id),
        enabled=enabled,
    )
    await _check_devices(session, accelerators, accelerator_share, accelerator_type)
    await _check_unique(session, name)
    session.add(spec)
    await session.flush()
    audit.record(session, actor, "spec.create", "spec", spec.id, details={"name": name})
    return spec


async def update_spec(
    session: AsyncSession,
    actor: Actor,
    spec_id: int,
    *,
    name: str | Unset = UNSET,
    description: str | Unset = UNSET,
    cpu: str | int | float | Unset = UNSET,
    memory: str | int | float | Unset = UNSET,
    accelerators: int | Unset = UNSET,
    accelerator_share: int | Unset = UNSET,
    accelerator_type: str | Unset | None = UNSET,
    price_per_hour: Decimal | str | int | float | Unset = UNSET,
    billing_weight: float | Unset = UNSET,
    pool_id: int | Unset | None = UNSET,
    enabled: bool | Unset = UNSET,
) -> ResourceSpec:
    """Change a spec; the result is checked as a whole (e.g. a share and whole devices together fail). Admins only."""
    require_platform_admin(actor, "spec changes")
    spec = await get_spec(session, actor, spec_id)
    changes: dict[str, Any] = {}
    if name is not UNSET and name != spec.name:
        check_name(name)
        await _check_unique(session, name, spec.id)
        changes["name"] = name
    if description is not UNSET:
        changes["description"] = check_text(description, "description", 512)
    if cpu is not UNSET:
        changes["cpu_milli"] = cpu_milli(cpu)
    if memory is not UNSET:
        changes["memory_bytes"] = memory_bytes(memory)
    if accelerators is not UNSET:
        changes["accelerators"] = accelerators
    if accelerator_share is not UNSET:
        changes["accelerator_share"] = accelerator_share
    if accelerator_type is not UNSET:
        changes["accelerator_type"] = accelerator_type
    if price_per_hour is not UNSET:
        changes["price_per_hour"] = _price(price_per_hour)
    if billing_weight is not UNSET:
        changes["billing_weight"] = _weight(billing_weight)
    if pool_id is not UNSET:
        changes["pool_id"] = await _check_pool(session, pool_id)
    if enabled is not UNSET:
        changes["enabled"] = enabled
    await _check_devices(
        session,
        changes.get("accelerators", spec.accelerators),
        changes.get("accelerator_share", spec.accelerator_share),
        changes.get("accelerator_type", spec.accelerator_type),
    )
    for key, value in changes.items():
        setattr(spec, key, value)
    if changes:
        await session.flush()
        audit.record(
            session,
            actor,
            "spec.update",
            "spec",
            spec.id,
            details={k: str(v) if isinstance(v, Decimal) else v for k, v in changes.items()},
        )
    return spec


async def delete_spec(session: AsyncSession, actor: Actor, spec_id: int) -> None:
    """Delete a spec. Admins only."""
    require_platform_admin(actor, "spec deletion")
    spec = await get_spec(session, actor, spec_id)
    await session.delete(spec)
    audit.record(session, actor, "spec.delete", "spec", spec.id, details={"name": spec.name})
