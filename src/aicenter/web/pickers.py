"""Choices that console forms offer (pools, users by name, resource names), read through the services."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import ValidationFailed
from aicenter.db.models import AcceleratorType, Pool, User
from aicenter.services import inventory, tenancy
from aicenter.services.context import Actor
from aicenter.services.quotas import BUILTIN_RESOURCES

# Selects list at most this many; a platform has tens of pools and accelerator types, not thousands.
_MAX_CHOICES = 500


async def user_by_name(session: AsyncSession, actor: Actor, username: str, field: str = "admin_username") -> User:
    page = await tenancy.list_users(session, actor, username=username, limit=1)
    if not page.items:
        raise ValidationFailed(f'no user is named "{username}"', field=field)
    return page.items[0]


async def pools(session: AsyncSession, actor: Actor) -> list[Pool]:
    """The pools the actor may see, by name."""
    page = await inventory.list_pools(session, actor, limit=_MAX_CHOICES)
    return sorted((v.pool for v in page.items), key=lambda p: p.name)


async def accelerator_types(session: AsyncSession, actor: Actor) -> list[AcceleratorType]:
    page = await inventory.list_accelerator_types(session, actor, limit=_MAX_CHOICES)
    return sorted(page.items, key=lambda t: t.name)


async def quota_resources(session: AsyncSession, actor: Actor) -> list[str]:
    """Resource names a quota may limit: cpu, memory, accelerators, then each accelerator type."""
    return [*BUILTIN_RESOURCES, *(t.name for t in await accelerator_types(session, actor))]
