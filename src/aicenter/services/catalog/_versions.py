"""Versions: numbering, creation (the one place that writes version and file rows), sharing, copy, delete."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any

from sqlalchemy import BigInteger, delete, insert, literal, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind, VersionState, Visibility, version_metadata
from aicenter.core.errors import Conflict, ValidationFailed
from aicenter.core.names import check_name, check_text
from aicenter.db.models import CatalogItem, CatalogVersion, ImageBuild, VersionFile
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.catalog._access import (
    check_not_in_use,
    check_storage_quota,
    load_item,
    load_item_for_write,
    load_version,
    version_visible,
)
from aicenter.services.catalog._items import UNSET, Unset, insert_item, member_workspace, user_namespace
from aicenter.services.catalog._views import VersionView, version_view, version_views
from aicenter.services.context import Actor
from aicenter.storage import FileEntry, manifest_sha256


def env_hash(spec: dict[str, Any]) -> str:
    """The cache key of a venv build: equal inputs (python, requirement set, options) share one env."""
    canonical = {
        "python": spec.get("python", "3"),
        "requirements": sorted(spec.get("requirements", [])),
        "system_site_packages": bool(spec.get("system_site_packages", False)),
    }
    return hashlib.sha256(json.dumps(canonical, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


async def _allocate_number(session: AsyncSession, item: CatalogItem) -> int:
    """Take the item's next version number. The UPDATE row-locks the item on PostgreSQL until commit, so
    concurrent commits to one item get consecutive numbers; SQLite serializes write transactions anyway."""
    taken = await session.scalar(
        update(CatalogItem)
        .where(CatalogItem.id == item.id)
        .values(next_version=CatalogItem.next_version + 1)
        .returning(CatalogItem.next_version)
        .execution_options(synchronize_session=False)
    )
    assert taken is not None
    return int(taken) - 1


async def _insert_version(
    session: AsyncSession,
    actor: Actor,
    item: CatalogItem,
    *,
    description: str,
    metadata: dict[str, Any] | None,
    file_count: int,
    size_bytes: int,
    manifest: str,
    copied_from_id: int | None,
) -> CatalogVersion:
    """Check the quota, take a number and insert the version row (and an image build for a venv spec)."""
    kind = ItemKind(item.kind)
    check_text(description, "description", 4096)
    meta = version_metadata(kind, metadata, image_type=item.meta.get("image_type"))
    venv = kind is ItemKind.IMAGE and meta.get("image_type") == "venv"
    await check_storage_quota(session, item.workspace_id, size_bytes)
    version = CatalogVersion(
        item_id=item.id,
        number=await _allocate_number(session, item),
        visibility=Visibility.PRESET.value if item.is_preset else Visibility.PRIVATE.value,
        state=VersionState.PENDING.value if venv else VersionState.READY.value,
        description=description,
        meta=meta,
        file_count=file_count,
        size_bytes=size_bytes,
        manifest_sha256=manifest,
        created_by_id=actor.user_id or None,
        copied_from_id=copied_from_id,
    )
    session.add(version)
    await session.flush()
    if venv:
        session.add(ImageBuild(version_id=version.id, env_hash=env_hash(meta)))
    return version


async def add_version(
    session: AsyncSession,
    actor: Actor,
    item: CatalogItem,
    *,
    entries: Sequence[FileEntry],
    description: str = "",
    metadata: dict[str, Any] | None = None,
    copied_from_id: int | None = None,
) -> CatalogVersion:
    """Create a version of ``item`` with these files: THE single place that writes version and file rows.

    Call it inside the write transaction that commits the version (upload commit, directory import, job
    outputs, create_version). It checks the workspace's storage quota on the logical size, takes the next
    number (concurrent commits to one item get consecutive numbers), inserts the version and its
    ``version_files`` rows in one bulk statement, computes file_count / size_bytes / manifest_sha256, and
    audits ``<kind>.version.create``. Image items: ``metadata`` is the build spec; a venv spec queues an
    ImageBuild (state pending), a container reference is ready at once. Versions of preset items are
    ``preset``, others ``private``.

    Args:
        item: The target, already authorized by the caller (``load_item_for_write``, or the jobs area).
        entries: A checked manifest (``aicenter.storage.check_manifest``): unique, safe paths whose blobs
            are in the store. They are not re-checked here.

    Raises:
        QuotaExceeded: the workspace has no room for the version's size.
        ValidationFailed: bad description or metadata.
    """
    files = list(entries)
    version = await _insert_version(
        session,
        actor,
        item,
        description=description,
        metadata=metadata,
        file_count=len(files),
        size_bytes=sum(e.size for e in files),
        manifest=manifest_sha256(files),
        copied_from_id=copied_from_id,
    )
    if files:
        # One executemany (batched multi-row VALUES): 10,000 rows in one round trip set, not 10,000 flushes.
        await session.execute(
            insert(VersionFile),
            [
                {"version_id": version.id, "path": e.path, "size": e.size, "sha256": e.sha256, "mode": e.mode}
                for e in files
            ],
        )
    audit.record(
        session,
        actor,
        f"{item.kind}.version.create",
        f"{item.kind}_version",
        version.id,
        workspace_id=item.workspace_id,
        details={"item": item.name, "number": version.number, "files": version.file_count, "bytes": version.size_bytes},
    )
    return version


async def list_versions(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    *,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[VersionView]:
    """The versions of an item the actor can see (owner and platform admins: all), newest first."""
    item = await load_item(session, actor, kind, item_id)
    stmt = select(CatalogVersion).where(CatalogVersion.item_id == item.id)
    if not actor.is_platform_admin and item.owner_id != actor.user_id:
        stmt = stmt.where(version_visible(actor, owner_sees_all=False))
    page = await paginate(session, stmt, CatalogVersion.number, limit=limit, cursor=cursor, descending=True)
    return Page(await version_views(session, actor, [(item, v) for v in page.items]), page.next_cursor)


async def get_version(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int, number: int) -> VersionView:
    """A version the actor can see (metadata: platform admins see every version)."""
    item, version = await load_version(session, actor, kind, item_id, number)
    return await version_view(session, actor, item, version)


async def create_version(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    *,
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> VersionView:
    """A version without files: an image build spec (venv: queued for building; container: ready) or an
    empty version of another kind. Owner only (presets: platform admins)."""
    item = await load_item_for_write(session, actor, kind, item_id)
    version = await add_version(session, actor, item, entries=(), description=description, metadata=metadata)
    return await version_view(session, actor, item, version)


async def update_version(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    description: str | Unset = UNSET,
    metadata: dict[str, Any] | Unset = UNSET,
) -> VersionView:
    """Change a version's description or metadata (its files never change).

    Raises:
        Conflict: a different build spec for an image version (it was built from the old one).
    """
    item, version = await load_version(session, actor, kind, item_id, number, write=True)
    changed: dict[str, Any] = {}
    if description is not UNSET:
        check_text(description, "description", 4096)
        version.description = description
        changed["description"] = True
    if metadata is not UNSET:
        meta = version_metadata(kind, metadata, image_type=item.meta.get("image_type"))
        if kind is ItemKind.IMAGE and meta != version.meta:
            raise Conflict(
                f"the build spec of image {item.name}:{number} cannot change: create a new version",
                details={"field": "metadata"},
            )
        version.meta = meta
        changed["metadata"] = meta
    if changed:
        await session.flush()
        audit.record(
            session,
            actor,
            f"{kind.value}.version.update",
            f"{kind.value}_version",
            version.id,
            workspace_id=item.workspace_id,
            details={"item": item.name, "number": number, **changed},
        )
    return await version_view(session, actor, item, version)


async def delete_version(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int, number: int) -> None:
    """Delete a version's rows (its blobs stay until the store's GC finds them unreferenced).

    Raises:
        InUse: a job or service uses it (the message names them).
    """
    item, version = await load_version(session, actor, kind, item_id, number, write=True)
    await check_not_in_use(session, item, [version])
    audit.record(
        session,
        actor,
        f"{kind.value}.version.delete",
        f"{kind.value}_version",
        version.id,
        workspace_id=item.workspace_id,
        details={"item": item.name, "number": number, "bytes": version.size_bytes},
    )
    await session.execute(delete(CatalogVersion).where(CatalogVersion.id == version.id))


def _no_preset_sharing(item: CatalogItem) -> None:
    if item.is_preset:
        raise Conflict(f"versions of preset {item.kind} {item.name} are visible to everyone; they are not shared")


async def share_version(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    visibility: Visibility | str,
    workspace_id: int | None = None,
) -> VersionView:
    """Share a version with a workspace (default: the item's) or publicly. Owner only.

    Raises:
        ValidationFailed: a visibility other than ``workspace`` or ``public``.
        NotFound / Forbidden: the owner is not a member of the target workspace.
        Conflict: the item is a preset.
    """
    item, version = await load_version(session, actor, kind, item_id, number, write=True)
    _no_preset_sharing(item)
    if visibility not in (Visibility.WORKSPACE.value, Visibility.PUBLIC.value):
        raise ValidationFailed(
            f'"{visibility}" cannot be shared to: use workspace or public (unshare makes it private)',
            field="visibility",
        )
    target: int | None = None
    if visibility == Visibility.WORKSPACE.value:
        target = (await member_workspace(session, actor, workspace_id or item.workspace_id, "workspace_id")).id
    elif workspace_id is not None:
        raise ValidationFailed("is only for visibility workspace", field="workspace_id")
    version.visibility = Visibility(visibility).value
    version.shared_workspace_id = target
    await session.flush()
    audit.record(
        session,
        actor,
        f"{kind.value}.version.share",
        f"{kind.value}_version",
        version.id,
        workspace_id=item.workspace_id,
        details={"item": item.name, "number": number, "visibility": version.visibility, "shared_workspace_id": target},
    )
    return await version_view(session, actor, item, version)


async def unshare_version(
    session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int, number: int
) -> VersionView:
    """Make a version private again. Owner only; presets cannot be unshared (Conflict)."""
    item, version = await load_version(session, actor, kind, item_id, number, write=True)
    _no_preset_sharing(item)
    previous = version.visibility
    version.visibility = Visibility.PRIVATE.value
    version.shared_workspace_id = None
    await session.flush()
    audit.record(
        session,
        actor,
        f"{kind.value}.version.unshare",
        f"{kind.value}_version",
        version.id,
        workspace_id=item.workspace_id,
        details={"item": item.name, "number": number, "previous": previous},
    )
    return await version_view(session, actor, item, version)


async def _copy_target(
    session: AsyncSession, actor: Actor, source: CatalogItem, name: str, workspace_id: int | None
) -> CatalogItem:
    """The actor's item ``name`` of the source's kind, created in the target workspace if missing."""
    kind = ItemKind(source.kind)
    if not actor.user_id:
        raise ValidationFailed("the system cannot own copies", field="name")
    namespace = user_namespace(actor.user_id)
    target = await session.scalar(
        select(CatalogItem).where(
            CatalogItem.kind == kind.value, CatalogItem.namespace == namespace, CatalogItem.name == name
        )
    )
    if target is not None:
        if workspace_id is not None and target.workspace_id != workspace_id:
            raise Conflict(
                f"your {kind.value} {name} belongs to another workspace: copy into it or choose another name",
                details={"field": "workspace_id"},
            )
        if target.workspace_id is not None:
            await member_workspace(session, actor, target.workspace_id, "workspace_id")
        if kind is ItemKind.IMAGE and target.meta.get("image_type") != source.meta.get("image_type"):
            raise Conflict(
                f"your image {name} is of type {target.meta.get('image_type')}, the source of type "
                f"{source.meta.get('image_type')}: choose another name",
                details={"field": "name"},
            )
        return target
    workspace = await member_workspace(session, actor, workspace_id, "workspace_id")
    return await insert_item(
        session,
        actor,
        kind,
        name=name,
        namespace=namespace,
        workspace_id=workspace.id,
        description=source.description,
        tags=list(source.tags),
        meta=dict(source.meta),
    )


async def copy_version(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    name: str | None = None,
    workspace_id: int | None = None,
    description: str | None = None,
) -> VersionView:
    """Copy a version the actor may read into a new private version of their own item ``name`` (default:
    the source item's name), created if missing in ``workspace_id`` (default: their default workspace).

    No bytes move: the copy's file rows point at the same blobs (one INSERT ... SELECT). The copy counts in
    full against the target workspace's storage quota.

    Raises:
        Forbidden: a platform admin without content access; NotFound: an invisible source.
        QuotaExceeded: no room in the target workspace.
        Conflict: the actor's item ``name`` is in another workspace or of another image type.
    """
    source_item, source = await load_version(session, actor, kind, item_id, number, content=True)
    target_name = check_name(name if name is not None else source_item.name)
    target = await _copy_target(session, actor, source_item, target_name, workspace_id)
    version = await _insert_version(
        session,
        actor,
        target,
        description=source.description if description is None else description,
        metadata=source.meta,
        file_count=source.file_count,
        size_bytes=source.size_bytes,
        manifest=source.manifest_sha256,
        copied_from_id=source.id,
    )
    columns = [VersionFile.path, VersionFile.size, VersionFile.sha256, VersionFile.mode]
    await session.execute(
        insert(VersionFile).from_select(
            ["version_id", *(c.key for c in columns)],
            select(literal(version.id, BigInteger()), *columns).where(VersionFile.version_id == source.id),
        )
    )
    audit.record(
        session,
        actor,
        f"{kind.value}.version.copy",
        f"{kind.value}_version",
        version.id,
        workspace_id=target.workspace_id,
        details={
            "item": target.name,
            "number": version.number,
            "source_version_id": source.id,
            "source": f"{source_item.name}:{source.number}",
            "bytes": version.size_bytes,
        },
    )
    return await version_view(session, actor, target, version)
