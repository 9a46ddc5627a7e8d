"""Versions made from a directory on the server: platform admins' imports into preset items, and job outputs.

The files are copied into the store (``scan_directory``) in a thread before any transaction opens; the version
is then added in one short write transaction. A failure in between leaves young unreferenced blobs that garbage
collection removes after the grace period.
"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aicenter.config import Settings
from aicenter.core.catalog import ItemKind, version_metadata
from aicenter.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem
from aicenter.services import audit
from aicenter.services.access import require_platform_admin
from aicenter.services.catalog._access import load_item, load_item_for_write
from aicenter.services.catalog._uploads import touch_blobs
from aicenter.services.catalog._versions import add_version
from aicenter.services.catalog._views import VersionView, version_view
from aicenter.services.context import Actor
from aicenter.storage import BlobStore, FileEntry, scan_directory

__all__ = ["create_version_from_directory", "import_directory"]


def _resolve_import_path(path: str, roots: list[Path]) -> Path:
    """The real path of ``path`` if it lies inside one of ``roots`` (after resolving symlinks and ``..``)."""
    if not roots:
        raise Forbidden("imports are off on this server: no import roots are configured (AICENTER_IMPORT_ROOTS)")
    if not path or "\x00" in path:
        raise ValidationFailed("must be a directory path on the server", field="path")
    if not os.path.isabs(path):
        raise ValidationFailed("must be an absolute path on the server", field="path")
    resolved = Path(os.path.realpath(path))
    real_roots = [Path(os.path.realpath(root)) for root in roots]
    if not any(resolved == root or resolved.is_relative_to(root) for root in real_roots):
        allowed = ", ".join(str(root) for root in real_roots)
        raise Forbidden(
            f"{path} is outside the import roots ({allowed})", details={"roots": [str(r) for r in real_roots]}
        )
    if not resolved.exists():
        raise ValidationFailed(f"{path} does not exist", field="path")
    if not resolved.is_dir():
        raise ValidationFailed(f"{path} is not a directory", field="path")
    return resolved


async def _store_directory(store: BlobStore, directory: Path) -> list[FileEntry]:
    """Copy every file under ``directory`` into the store and make it durable; the version's entries."""
    entries = await asyncio.to_thread(scan_directory, directory, store)
    # The copy refreshed blobs the store already had; this check (one stat each) makes sure none of them went
    # missing before the version references them, as the upload commit does.
    lost = await asyncio.to_thread(touch_blobs, store, (e.sha256 for e in entries))
    if lost:
        raise Conflict("the store lost files while importing them; try again")
    await asyncio.to_thread(store.sync)
    return entries


async def import_directory(
    db: Database,
    actor: Actor,
    store: BlobStore,
    settings: Settings,
    kind: ItemKind,
    item_id: int,
    *,
    path: str,
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> VersionView:
    """Import a server directory under one of ``settings.import_roots`` as a new version of a preset item.

    Raises:
        Forbidden: the actor is not a platform admin, the item is not a preset, imports are off, or ``path``
            resolves outside every import root (the message names the roots).
        NotFound: no such item.
        ValidationFailed: ``path`` does not exist, is not a directory, is empty, or holds a symlink or a
            special file (named); bad metadata.
    """
    require_platform_admin(actor, "imports")
    directory = _resolve_import_path(path, settings.import_roots)
    async with db.read() as session:
        item = await load_item(session, actor, kind, item_id)
        if not item.is_preset:
            raise Forbidden(f"imports go into preset items; {kind.value} {item.name} is not one")
        version_metadata(kind, metadata, image_type=item.meta.get("image_type"))
    entries = await _store_directory(store, directory)
    if not entries:
        raise ValidationFailed(f"{path} holds no files", field="path")
    async with db.write() as session:
        item = await load_item_for_write(session, actor, kind, item_id)
        version = await add_version(session, actor, item, entries=entries, description=description, metadata=metadata)
        audit.record(
            session,
            actor,
            f"{kind.value}.version.import",
            f"{kind.value}_version",
            version.id,
            workspace_id=item.workspace_id,
            details={"item": item.name, "number": version.number, "path": str(directory), "files": len(entries)},
        )
        return await version_view(session, actor, item, version)


async def create_version_from_directory(
    db: Database,
    actor: Actor,
    store: BlobStore,
    kind: ItemKind,
    item_id: int,
    directory: Path,
    *,
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> VersionView:
    """Save a directory the platform wrote (a job's output) as a new version of the item.

    No access check beyond the item existing: the caller (the jobs area) decided already that ``actor`` may
    save into it. The version is added under ``actor`` and counts against the item's workspace quota.

    Raises:
        NotFound: no such item of this kind.
        ValidationFailed: the directory holds a symlink or a special file; bad metadata.
        QuotaExceeded: the version does not fit the workspace's storage quota.
    """
    entries = await _store_directory(store, directory)
    async with db.write() as session:
        item = await session.scalar(
            select(CatalogItem).where(CatalogItem.id == item_id, CatalogItem.kind == kind.value)
        )
        if item is None:
            raise NotFound(f"{kind.value} {item_id} not found")
        version = await add_version(session, actor, item, entries=entries, description=description, metadata=metadata)
        return await version_view(session, actor, item, version)
