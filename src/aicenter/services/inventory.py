"""Nodes, accelerator types, resource specs and pools (platform admins), and what members may use."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models import Pool

DEFAULT_POOL = "default"


async def ensure_default_pool(session: AsyncSession) -> Pool:
    """The pool that selects every node and that new workspaces may use; created on first start."""
    pool = await session.scalar(select(Pool).where(Pool.is_default.is_(True)))
    if pool is None:
        pool = Pool(name=DEFAULT_POOL, description="Every node.", selector={}, is_default=True)
        session.add(pool)
        await session.flush()
    return pool
