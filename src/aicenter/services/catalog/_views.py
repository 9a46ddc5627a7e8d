"""What catalog services return: immutable views built from rows for one actor.

The builders take whole pages: a page of any size costs a fixed number of queries (names of owners and
workspaces, version counts, the actor's memberships), never one per row.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models import CatalogItem, CatalogVersion, User, VersionFile, Workspace
from aicenter.services.catalog._access import can_read_content, my_workspace_ids, version_visible
from aicenter.services.catalog._quota import StorageUsage
from aicenter.services.context import Actor

__all__ = [
    "FileView",
    "ItemView",
    "Preview",
    "StorageUsage",
    "VersionView",
    "file_view",
    "item_view",
    "item_views",
    "version_ref",
    "version_view",
    "version_views",
]


@dataclass(frozen=True)
class ItemView:
    id: int
    kind: str
    name: str
    is_preset: bool
    owner_id: int | None
    owner_name: str
    workspace_id: int | None
    workspace_name: str | None
    description: str
    tags: list[str]
    metadata: dict[str, Any]
    # Versions this actor can see (owners and platform admins: all of them) and the highest of their numbers.
    version_count: int
    latest_version: int | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class VersionView:
    id: int
    item_id: int
    kind: str
    item_name: str
    owner_name: str
    number: int
    visibility: str
    shared_workspace_id: int | None
    shared_workspace_name: str | None
    state: str
    description: str
    metadata: dict[str, Any]
    file_count: int
    size_bytes: int
    manifest_sha256: str
    created_by_id: int | None
    created_by_name: str
    copied_from_id: int | None
    created_at: datetime
    updated_at: datetime
    # How this actor names the version for resolve_version: "name:2" (own), "preset/name:2", "owner/name:2".
    ref: str
    can_read_content: bool


@dataclass(frozen=True)
class FileView:
    path: str
    size: int
    sha256: str
    mode: int


@dataclass(frozen=True)
class Preview:
    kind: Literal["text", "csv", "image", "binary"]
    text: str | None = None
    rows: list[list[str]] | None = None
    media_type: str | None = None


def file_view(row: VersionFile) -> FileView:
    return FileView(row.path, row.size, row.sha256, row.mode)


async def _user_names(session: AsyncSession, ids: Iterable[int | None]) -> dict[int, str]:
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    rows = await session.execute(select(User.id, User.username).where(User.id.in_(wanted)))
    return dict(rows.all())


async def _workspace_names(session: AsyncSession, ids: Iterable[int | None]) -> dict[int, str]:
    wanted = {i for i in ids if i is not None}
    if not wanted:
        return {}
    rows = await session.execute(select(Workspace.id, Workspace.name).where(Workspace.id.in_(wanted)))
    return dict(rows.all())


async def item_views(session: AsyncSession, actor: Actor, items: Sequence[CatalogItem]) -> list[ItemView]:
    """Views of a page of items in three queries (owners, workspaces, version counts) whatever its size."""
    if not items:
        return []
    ids = [item.id for item in items]
    owners = await _user_names(session, (item.owner_id for item in items))
    workspaces = await _workspace_names(session, (item.workspace_id for item in items))
    stats_stmt = (
        select(CatalogVersion.item_id, func.count(), func.max(CatalogVersion.number))
        .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
        .where(CatalogVersion.item_id.in_(ids))
        .group_by(CatalogVersion.item_id)
    )
    if not actor.is_platform_admin:
        stats_stmt = stats_stmt.where(version_visible(actor))
    stats = {item_id: (int(count), latest) for item_id, count, latest in (await session.execute(stats_stmt)).all()}
    views = []
    for item in items:
        count, latest = stats.get(item.id, (0, None))
        views.append(
            ItemView(
                id=item.id,
                kind=item.kind,
                name=item.name,
                is_preset=item.is_preset,
                owner_id=item.owner_id,
                owner_name=owners.get(item.owner_id, "") if item.owner_id is not None else "",
                workspace_id=item.workspace_id,
                workspace_name=workspaces.get(item.workspace_id) if item.workspace_id is not None else None,
                description=item.description,
                tags=list(item.tags),
                metadata=dict(item.meta),
                version_count=count,
                latest_version=latest,
                created_at=item.created_at,
                updated_at=item.updated_at,
            )
        )
    return views


async def item_view(session: AsyncSession, actor: Actor, item: CatalogItem) -> ItemView:
    return (await item_views(session, actor, [item]))[0]


def version_ref(actor: Actor, item: CatalogItem, version: CatalogVersion, owner_name: str) -> str:
    """The shortest unambiguous reference for this actor (``resolve_version`` accepts it)."""
    if item.is_preset:
        return f"preset/{item.name}:{version.number}"
    if item.owner_id is not None and item.owner_id == actor.user_id:
        return f"{item.name}:{version.number}"
    if owner_name:
        return f"{owner_name}/{item.name}:{version.number}"
    return f"#{version.id}"  # the owner was deleted


async def version_views(
    session: AsyncSession, actor: Actor, pairs: Sequence[tuple[CatalogItem, CatalogVersion]]
) -> list[VersionView]:
    """Views of a page of versions (each with its item) in at most three queries whatever its size."""
    if not pairs:
        return []
    users = await _user_names(session, [i.owner_id for i, _ in pairs] + [v.created_by_id for _, v in pairs])
    workspaces = await _workspace_names(session, (v.shared_workspace_id for _, v in pairs))
    shared = any(v.shared_workspace_id is not None for _, v in pairs)
    mine = await my_workspace_ids(session, actor) if shared else set()
    views = []
    for item, version in pairs:
        owner_name = users.get(item.owner_id, "") if item.owner_id is not None else ""
        views.append(
            VersionView(
                id=version.id,
                item_id=item.id,
                kind=item.kind,
                item_name=item.name,
                owner_name=owner_name,
                number=version.number,
                visibility=version.visibility,
                shared_workspace_id=version.shared_workspace_id,
                shared_workspace_name=(
                    workspaces.get(version.shared_workspace_id) if version.shared_workspace_id is not None else None
                ),
                state=version.state,
                description=version.description,
                metadata=dict(version.meta),
                file_count=version.file_count,
                size_bytes=version.size_bytes,
                manifest_sha256=version.manifest_sha256,
                created_by_id=version.created_by_id,
                created_by_name=users.get(version.created_by_id, "") if version.created_by_id is not None else "",
                copied_from_id=version.copied_from_id,
                created_at=version.created_at,
                updated_at=version.updated_at,
                ref=version_ref(actor, item, version, owner_name),
                can_read_content=can_read_content(actor, item, version, mine),
            )
        )
    return views


async def version_view(session: AsyncSession, actor: Actor, item: CatalogItem, version: CatalogVersion) -> VersionView:
    return (await version_views(session, actor, [(item, version)]))[0]
