"""Pools (sets of nodes chosen by a label selector) and which workspaces may use them.

Pools overlap: a node is in every pool whose selector matches it (``aicenter.core.pools``), so the node count of
the default pool is every node, and a node of an ``a100`` pool is counted there as well.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict, NotFound
from aicenter.core.names import check_name, check_text
from aicenter.core.pools import DEFAULT_POOL, is_member
from aicenter.db.models import Membership, Node, Pool, PoolGrant, Quota, ResourceSpec, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor
from aicenter.services.inventory._common import UNSET, Unset, check_labels

__all__ = ["DEFAULT_POOL"]  # re-exported by the package


@dataclass(frozen=True)
class PoolView:
    """A pool with what the API shows beside it. ``workspace_ids`` is None for non-admins."""

    pool: Pool
    node_count: int
    workspace_ids: list[int] | None


async def ensure_default_pool(session: AsyncSession) -> Pool:
    """The pool that selects every node and that new workspaces may use; created on first start."""
    pool = await session.scalar(select(Pool).where(Pool.is_default.is_(True)))
    if pool is None:
        pool = Pool(name=DEFAULT_POOL, description="Every node.", selector={}, is_default=True)
        session.add(pool)
        await session.flush()
    return pool


def granted_pool_ids(actor: Actor, workspace_id: int | None = None) -> Select[Any]:
    """Ids of the pools granted to ``workspace_id``, or to any workspace the actor belongs to."""
    stmt = select(PoolGrant.pool_id)
    if workspace_id is not None:
        return stmt.where(PoolGrant.workspace_id == workspace_id)
    return stmt.where(
        PoolGrant.workspace_id.in_(select(Membership.workspace_id).where(Membership.user_id == actor.user_id))
    )


async def _node_labels(session: AsyncSession) -> list[dict[str, Any]]:
    # Selectors are matched here rather than in SQL: JSON containment differs between SQLite and PostgreSQL,
    # and one narrow scan of the labels column serves every pool on a page.
    return [dict(labels or {}) for labels in (await session.scalars(select(Node.labels))).all()]


async def _views(session: AsyncSession, actor: Actor, pools: Sequence[Pool]) -> list[PoolView]:
    labels = await _node_labels(session) if pools else []
    grants: dict[int, list[int]] = {p.id: [] for p in pools}
    if actor.is_platform_admin and pools:
        rows = await session.execute(
            select(PoolGrant.pool_id, PoolGrant.workspace_id)
            .where(PoolGrant.pool_id.in_(list(grants)))
            .order_by(PoolGrant.workspace_id)
        )
        for pool_id, workspace_id in rows:
            grants[pool_id].append(workspace_id)
    return [
        PoolView(
            pool,
            sum(1 for node_labels in labels if is_member(node_labels, pool)),
            grants[pool.id] if actor.is_platform_admin else None,
        )
        for pool in pools
    ]


async def list_pools(
    session: AsyncSession, actor: Actor, *, limit: int = 50, cursor: str | None = None, workspace_id: int | None = None
) -> Page[PoolView]:
    """Platform admins see every pool; members the pools granted to their workspaces.

    Args:
        workspace_id: Only the pools granted to this workspace (the actor must belong to it; otherwise
            NotFound).
    """
    stmt = select(Pool)
    if workspace_id is not None:
        await get_visible_workspace(session, actor, workspace_id)
        stmt = stmt.where(Pool.id.in_(granted_pool_ids(actor, workspace_id)))
    elif not actor.is_platform_admin:
        stmt = stmt.where(Pool.id.in_(granted_pool_ids(actor)))
    page = await paginate(session, stmt, Pool.id, limit=limit, cursor=cursor)
    return Page(await _views(session, actor, page.items), page.next_cursor)


async def _visible_pool(session: AsyncSession, actor: Actor, pool_id: int) -> Pool:
    pool = await session.get(Pool, pool_id)
    if pool is not None and not actor.is_platform_admin:
        granted = await session.scalar(granted_pool_ids(actor).where(PoolGrant.pool_id == pool_id).limit(1))
        if granted is None:
            pool = None
    if pool is None:
        raise NotFound(f"pool {pool_id} not found")
    return pool


async def get_pool(session: AsyncSession, actor: Actor, pool_id: int) -> PoolView:
    """A pool the actor may see (members: granted to one of their workspaces); others read as NotFound."""
    return (await _views(session, actor, [await _visible_pool(session, actor, pool_id)]))[0]


async def _check_unique_name(session: AsyncSession, name: str, pool_id: int | None = None) -> None:
    existing = await session.scalar(select(Pool.id).where(Pool.name == name))
    if existing is not None and existing != pool_id:
        raise Conflict(f'a pool named "{name}" already exists', details={"field": "name"})


async def create_pool(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    description: str = "",
    selector: Mapping[str, Any] | None = None,
) -> PoolView:
    """Create a pool of the nodes whose labels match ``selector`` (empty: every node). Admins only."""
    require_platform_admin(actor, "pool creation")
    check_name(name)
    check_text(description, "description", 512)
    clean = check_labels(selector or {}, "selector")
    await _check_unique_name(session, name)
    pool = Pool(name=name, description=description, selector=clean, is_default=False)
    session.add(pool)
    await session.flush()
    audit.record(session, actor, "pool.create", "pool", pool.id, details={"name": name, "selector": clean})
    return (await _views(session, actor, [pool]))[0]


async def update_pool(
    session: AsyncSession,
    actor: Actor,
    pool_id: int,
    *,
    name: str | Unset = UNSET,
    description: str | Unset = UNSET,
    selector: Mapping[str, Any] | Unset = UNSET,
) -> PoolView:
    """Rename a pool, or change its description or selector. Admins only."""
    require_platform_admin(actor, "pool changes")
    pool = await _visible_pool(session, actor, pool_id)
    changes: dict[str, Any] = {}
    if name is not UNSET:
        check_name(name)
        await _check_unique_name(session, name, pool.id)
        changes["name"] = name
    if description is not UNSET:
        changes["description"] = check_text(description, "description", 512)
    if selector is not UNSET:
        changes["selector"] = check_labels(selector, "selector")
    for key, value in changes.items():
        setattr(pool, key, value)
    if changes:
        await session.flush()
        audit.record(session, actor, "pool.update", "pool", pool.id, details=changes)
    return (await _views(session, actor, [pool]))[0]


async def delete_pool(session: AsyncSession, actor: Actor, pool_id: int) -> None:
    """Delete a pool nothing refers to. Admins only.

    Raises:
        Conflict: the pool is the default pool, or quotas, specs or workspace grants refer to it
            (``details`` lists them, so the admin knows what to remove first).
    """
    require_platform_admin(actor, "pool deletion")
    pool = await _visible_pool(session, actor, pool_id)
    if pool.is_default:
        raise Conflict(f'"{pool.name}" is the default pool and cannot be deleted', details={"pool": pool.name})
    quotas = list(
        (
            await session.scalars(
                select(Workspace.name).join(Quota, Quota.workspace_id == Workspace.id).where(Quota.pool_id == pool.id)
            )
        ).all()
    )
    specs = list((await session.scalars(select(ResourceSpec.name).where(ResourceSpec.pool_id == pool.id))).all())
    granted = list(
        (
            await session.scalars(
                select(Workspace.name)
                .join(PoolGrant, PoolGrant.workspace_id == Workspace.id)
                .where(PoolGrant.pool_id == pool.id)
            )
        ).all()
    )
    if quotas or specs or granted:
        parts = []
        if quotas:
            parts.append("quotas of workspaces " + ", ".join(sorted(quotas)))
        if specs:
            parts.append("specs " + ", ".join(sorted(specs)))
        if granted:
            parts.append("grants to workspaces " + ", ".join(sorted(granted)))
        raise Conflict(
            f'pool "{pool.name}" is in use by ' + "; ".join(parts) + "; remove them first",
            details={"quotas": sorted(quotas), "specs": sorted(specs), "workspaces": sorted(granted)},
        )
    await session.delete(pool)
    audit.record(session, actor, "pool.delete", "pool", pool.id, details={"name": pool.name})


async def _grant_target(session: AsyncSession, actor: Actor, pool_id: int, workspace_id: int) -> tuple[Pool, Workspace]:
    require_platform_admin(actor, "pool grants")
    pool = await _visible_pool(session, actor, pool_id)
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    return pool, workspace


async def grant_pool(session: AsyncSession, actor: Actor, pool_id: int, workspace_id: int) -> None:
    """Let a workspace run work in a pool. Idempotent. Admins only."""
    pool, workspace = await _grant_target(session, actor, pool_id, workspace_id)
    if await session.get(PoolGrant, (pool.id, workspace.id)) is not None:
        return
    session.add(PoolGrant(pool_id=pool.id, workspace_id=workspace.id))
    audit.record(
        session,
        actor,
        "pool.grant",
        "pool",
        pool.id,
        workspace_id=workspace.id,
        details={"pool": pool.name, "workspace": workspace.name},
    )


async def revoke_pool(session: AsyncSession, actor: Actor, pool_id: int, workspace_id: int) -> None:
    """Stop a workspace from using a pool. Admins only.

    Raises:
        NotFound: the pool or workspace does not exist, or the workspace has no grant to the pool.
    """
    pool, workspace = await _grant_target(session, actor, pool_id, workspace_id)
    grant = await session.get(PoolGrant, (pool.id, workspace.id))
    if grant is None:
        raise NotFound(f'workspace "{workspace.name}" has no grant to pool "{pool.name}"')
    await session.delete(grant)
    audit.record(
        session,
        actor,
        "pool.revoke",
        "pool",
        pool.id,
        workspace_id=workspace.id,
        details={"pool": pool.name, "workspace": workspace.name},
    )


async def list_pool_workspaces(session: AsyncSession, actor: Actor, pool_id: int) -> list[Workspace]:
    """The workspaces that may use a pool, by name. Admins only."""
    require_platform_admin(actor, "reading pool grants")
    pool = await _visible_pool(session, actor, pool_id)
    stmt = (
        select(Workspace)
        .join(PoolGrant, PoolGrant.workspace_id == Workspace.id)
        .where(PoolGrant.pool_id == pool.id)
        .order_by(Workspace.name)
    )
    return list((await session.scalars(stmt)).all())


async def pools_by_name(session: AsyncSession) -> list[Pool]:
    """Every pool, for matching nodes against selectors (pools are few: tens, not thousands)."""
    return list((await session.scalars(select(Pool).order_by(Pool.name))).all())


async def pool_nodes(session: AsyncSession, pool: Pool) -> list[Node]:
    """Every node of ``pool``, whatever its state or schedule (a cordoned or down node comes back), by name.

    Selectors are matched in Python (``aicenter.core.pools``), as everywhere: JSON containment differs between
    SQLite and PostgreSQL, and nodes are hundreds, not millions.
    """
    nodes = (await session.scalars(select(Node).order_by(Node.name))).all()
    return [n for n in nodes if is_member(n.labels, pool)]
