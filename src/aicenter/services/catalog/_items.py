"""Catalog items: list by scope, create (user or preset), read, rename/retag, delete."""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum
from typing import Any, Final, Literal

from sqlalchemy import delete, exists, func, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from aicenter.core.catalog import ItemKind, Scope, Visibility, item_metadata
from aicenter.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.db.models import CatalogItem, CatalogVersion, User, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.db.sqljson import json_array_contains
from aicenter.services import audit
from aicenter.services.access import require_platform_admin, workspace_role
from aicenter.services.catalog._access import (
    check_not_in_use,
    load_item,
    load_item_for_write,
    my_workspaces_subquery,
)
from aicenter.services.catalog._views import ItemView, item_view, item_views
from aicenter.services.context import Actor

PRESET_NAMESPACE = "preset"
MAX_TAGS = 32
SORTS: Final = ("-updated_at", "updated_at", "name", "-name", "created_at", "-created_at")
Sort = Literal["-updated_at", "updated_at", "name", "-name", "created_at", "-created_at"]


class _Unset(Enum):
    UNSET = 0


# "Leave as is" in partial updates.
UNSET: Final = _Unset.UNSET
Unset = Literal[_Unset.UNSET]


def user_namespace(user_id: int) -> str:
    return f"user:{user_id}"


def check_tags(tags: Sequence[str], field: str = "tags") -> list[str]:
    """Tags are names (lower-case, URL-safe); duplicates are dropped, order kept."""
    if isinstance(tags, str):
        raise ValidationFailed("must be a list of tags, not one string", field=field)
    if len(tags) > MAX_TAGS:
        raise ValidationFailed(f"has {len(tags)} tags; the limit is {MAX_TAGS}", field=field)
    out: list[str] = []
    for i, tag in enumerate(tags):
        if not isinstance(tag, str):
            raise ValidationFailed("must be a string", field=f"{field}[{i}]")
        check_name(tag, f"{field}[{i}]")
        if tag not in out:
            out.append(tag)
    return out


def _like_pattern(q: str) -> str:
    # Escaped, so that "a_b" and "50%" are text rather than patterns; lower() on both sides for case.
    return "%" + q.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


async def member_workspace(session: AsyncSession, actor: Actor, workspace_id: int | None, field: str) -> Workspace:
    """The workspace (default: the actor's default workspace) if the actor is a member of it.

    Platform admins who are not members get Forbidden (they can see the workspace, not act in it).
    """
    if workspace_id is None:
        workspace_id = await session.scalar(select(User.default_workspace_id).where(User.id == actor.user_id))
        if workspace_id is None:
            raise ValidationFailed("you have no default workspace: name one", field=field)
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    if await workspace_role(session, actor, workspace.id) is None:
        if actor.is_platform_admin:
            raise Forbidden(f"you are not a member of workspace {workspace.name}")
        raise NotFound(f"workspace {workspace_id} not found")
    return workspace


async def _check_free_name(
    session: AsyncSession, kind: ItemKind, namespace: str, name: str, item_id: int | None = None
) -> None:
    existing = await session.scalar(
        select(CatalogItem.id).where(
            CatalogItem.kind == kind.value, CatalogItem.namespace == namespace, CatalogItem.name == name
        )
    )
    if existing is not None and existing != item_id:
        owner = "a preset" if namespace == PRESET_NAMESPACE else "you already have a"
        raise Conflict(f'{owner} {kind.value} named "{name}" exists', details={"field": "name"})


async def _flush_unique(session: AsyncSession, kind: ItemKind, name: str) -> None:
    """Flush; a concurrent insert of the same name surfaces as the unique constraint, reported as Conflict."""
    try:
        await session.flush()
    except IntegrityError as exc:
        raise Conflict(f'a {kind.value} named "{name}" already exists', details={"field": "name"}) from exc


_SORT_COLUMNS: dict[str, InstrumentedAttribute[Any]] = {
    "updated_at": CatalogItem.updated_at,
    "created_at": CatalogItem.created_at,
    "name": CatalogItem.name,
}


async def list_items(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    *,
    scope: Scope = Scope.MINE,
    workspace_id: int | None = None,
    q: str | None = None,
    tag: str | None = None,
    sort: str = "-updated_at",
    limit: int = 50,
    cursor: str | None = None,
) -> Page[ItemView]:
    """Items of ``kind`` in one tab of the catalog.

    Args:
        scope: ``mine`` (I own them), ``workspace`` (a version is shared to ``workspace_id``, or to any of my
            workspaces), ``public`` (a version is public), ``preset``, ``all`` (platform admins only).
        workspace_id: With ``mine`` and ``all``: items of that workspace; with ``workspace``: shared to it
            (the actor must be a member; platform admins may name any).
        q: Case-insensitive substring of the name or description.
        tag: Only items carrying this tag.
        sort: ``[-]updated_at``, ``[-]created_at`` or ``[-]name``; ties broken by id.

    Raises:
        Forbidden: ``all`` by someone who is not a platform admin.
        ValidationFailed: an unknown sort, a bad limit or cursor.
    """
    if sort not in SORTS:
        raise ValidationFailed(f"must be one of {', '.join(SORTS)}", field="sort")
    stmt = select(CatalogItem).where(CatalogItem.kind == kind.value)
    if scope is Scope.MINE:
        # By namespace rather than owner_id: the unique index (kind, namespace, name) serves it; no presets.
        stmt = stmt.where(CatalogItem.namespace == user_namespace(actor.user_id))
    elif scope is Scope.PRESET:
        stmt = stmt.where(CatalogItem.is_preset.is_(True))
    elif scope is Scope.PUBLIC:
        stmt = stmt.where(
            exists().where(
                CatalogVersion.item_id == CatalogItem.id, CatalogVersion.visibility == Visibility.PUBLIC.value
            )
        )
    elif scope is Scope.WORKSPACE:
        if workspace_id is not None:
            if not actor.is_platform_admin and await workspace_role(session, actor, workspace_id) is None:
                raise NotFound(f"workspace {workspace_id} not found")
            targets: Any = [workspace_id]
        else:
            targets = my_workspaces_subquery(actor)
        stmt = stmt.where(
            exists().where(
                CatalogVersion.item_id == CatalogItem.id,
                CatalogVersion.visibility == Visibility.WORKSPACE.value,
                CatalogVersion.shared_workspace_id.in_(targets),
            )
        )
    else:
        require_platform_admin(actor, "listing every catalog item")
    if workspace_id is not None and scope in (Scope.MINE, Scope.ALL):
        stmt = stmt.where(CatalogItem.workspace_id == workspace_id)
    if q:
        pattern = _like_pattern(q)
        stmt = stmt.where(
            or_(
                func.lower(CatalogItem.name).like(pattern, escape="\\"),
                func.lower(CatalogItem.description).like(pattern, escape="\\"),
            )
        )
    if tag:
        stmt = stmt.where(json_array_contains(CatalogItem.tags, tag))
    column = _SORT_COLUMNS[sort.lstrip("-")]
    page = await paginate(
        session,
        stmt,
        column,
        CatalogItem.id,
        sort=sort,
        limit=limit,
        cursor=cursor,
        descending=sort.startswith("-"),
    )
    return Page(await item_views(session, actor, page.items), page.next_cursor)


async def create_item(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    *,
    name: str,
    workspace_id: int | None = None,
    description: str = "",
    tags: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
    preset: bool = False,
) -> ItemView:
    """Create an item owned by the actor in a workspace they belong to (default: their default workspace).

    ``preset=True`` (platform admins only) creates a preset item: no workspace, no quota, visible to everyone.

    Raises:
        ValidationFailed: a bad name, description, tag or metadata (``metadata.image_type``), or no workspace.
        NotFound: the workspace does not exist or the actor is not a member.
        Forbidden: a platform admin outside the workspace, or ``preset`` by a non-admin.
        Conflict: the actor (or the presets) already has an item of this kind and name.
    """
    check_name(name)
    check_text(description, "description", 4096)
    clean_tags = check_tags(tags)
    meta = item_metadata(kind, metadata)
    owner_id = actor.user_id or None
    if preset:
        require_platform_admin(actor, "creating preset items")
        if workspace_id is not None:
            raise ValidationFailed("preset items belong to no workspace", field="workspace_id")
        namespace, ws_id = PRESET_NAMESPACE, None
    else:
        if owner_id is None:
            raise ValidationFailed("the system can only create preset items", field="preset")
        workspace = await member_workspace(session, actor, workspace_id, "workspace_id")
        namespace, ws_id = user_namespace(owner_id), workspace.id
    item = await insert_item(
        session,
        actor,
        kind,
        name=name,
        namespace=namespace,
        workspace_id=ws_id,
        description=description,
        tags=clean_tags,
        meta=meta,
    )
    return await item_view(session, actor, item)


async def insert_item(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    *,
    name: str,
    namespace: str,
    workspace_id: int | None,
    description: str,
    tags: list[str],
    meta: dict[str, Any],
) -> CatalogItem:
    """Insert a checked item row owned by the actor and audit it (create_item, and copy_version's target)."""
    await _check_free_name(session, kind, namespace, name)
    preset = namespace == PRESET_NAMESPACE
    item = CatalogItem(
        kind=kind.value,
        name=name,
        namespace=namespace,
        is_preset=preset,
        owner_id=actor.user_id or None,
        workspace_id=workspace_id,
        description=description,
        tags=tags,
        meta=meta,
    )
    session.add(item)
    await _flush_unique(session, kind, name)
    audit.record(
        session,
        actor,
        f"{kind.value}.create",
        kind.value,
        item.id,
        workspace_id=workspace_id,
        details={"name": name, "preset": preset},
    )
    return item


async def get_item(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int) -> ItemView:
    """An item the actor can see: owner, preset, a visible version, or a platform admin (metadata)."""
    return await item_view(session, actor, await load_item(session, actor, kind, item_id))


async def update_item(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    *,
    name: str | Unset = UNSET,
    description: str | Unset = UNSET,
    tags: Sequence[str] | Unset = UNSET,
    metadata: dict[str, Any] | Unset = UNSET,
) -> ItemView:
    """Rename, describe, retag or change the metadata of an item (owner; presets: platform admins).

    Raises:
        Conflict: the new name is taken, or an image with versions would change its ``image_type`` (its
            versions' build specs are of the old type).
    """
    item = await load_item_for_write(session, actor, kind, item_id)
    changed: dict[str, Any] = {}
    if name is not UNSET and name != item.name:
        check_name(name)
        await _check_free_name(session, kind, item.namespace, name, item.id)
        changed["name"] = {"from": item.name, "to": name}
        item.name = name
    if description is not UNSET:
        check_text(description, "description", 4096)
        item.description = description
        changed["description"] = True
    if tags is not UNSET:
        item.tags = check_tags(tags)
        changed["tags"] = item.tags
    if metadata is not UNSET:
        meta = item_metadata(kind, metadata)
        if kind is ItemKind.IMAGE and meta.get("image_type") != item.meta.get("image_type"):
            has_versions = await session.scalar(select(exists().where(CatalogVersion.item_id == item.id)))
            if has_versions:
                raise Conflict(
                    f"image {item.name} has versions built as {item.meta.get('image_type')}: "
                    "create another image for another type",
                    details={"field": "metadata.image_type"},
                )
        item.meta = meta
        changed["metadata"] = meta
    if changed:
        await _flush_unique(session, kind, item.name)
        audit.record(
            session,
            actor,
            f"{kind.value}.update",
            kind.value,
            item.id,
            workspace_id=item.workspace_id,
            details=changed,
        )
    return await item_view(session, actor, item)


async def delete_item(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int) -> None:
    """Delete an item and all its versions (rows only: unreferenced blobs go to the store's GC).

    Raises:
        InUse: a version is used by a job or service (message names them).
    """
    item = await load_item_for_write(session, actor, kind, item_id)
    versions = list((await session.scalars(select(CatalogVersion).where(CatalogVersion.item_id == item.id))).all())
    await check_not_in_use(session, item, versions)
    audit.record(
        session,
        actor,
        f"{kind.value}.delete",
        kind.value,
        item.id,
        workspace_id=item.workspace_id,
        details={"name": item.name, "versions": len(versions)},
    )
    # Versions, their file rows, uploads and builds go with the item (ON DELETE CASCADE).
    await session.execute(delete(CatalogItem).where(CatalogItem.id == item.id))


__all__ = [
    "PRESET_NAMESPACE",
    "SORTS",
    "UNSET",
    "Sort",
    "check_tags",
    "create_item",
    "delete_item",
    "get_item",
    "insert_item",
    "list_items",
    "member_workspace",
    "update_item",
    "user_namespace",
]
