"""Resumable uploads: declare the files, send the bytes the store lacks in parts or bundles, commit a version.

No database transaction is held while bytes move. Starting an upload writes one row; the router authorizes
each part or bundle with a short read (``part_target`` / ``bundle_target``) and writes the bytes into the
staging area outside any transaction (``receive_part`` / ``receive_bundle``). The commit verifies and moves the
staged files into the store first, then adds the version in one short write transaction. A crash between the
two leaves blobs that a retried commit references, or that garbage collection removes after the grace period;
a retried commit of a committed session answers with its version.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.core.catalog import ItemKind, UploadState, version_metadata
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound, UploadIncomplete, ValidationFailed
from aicenter.core.names import check_text
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion, UploadSession
from aicenter.services import audit
from aicenter.services.catalog._access import check_storage_quota, load_item_for_write
from aicenter.services.catalog._discard import discard_refused_blobs
from aicenter.services.catalog._quota import StorageRoom, storage_room
from aicenter.services.catalog._versions import add_version
from aicenter.services.catalog._views import VersionView, version_view
from aicenter.services.context import Actor
from aicenter.storage import BlobStore, FileEntry, Staging, check_manifest, check_path, expand_archive, part_count

__all__ = [
    "ARCHIVE_FORMATS",
    "BundleTarget",
    "PartTarget",
    "UploadView",
    "abort_upload",
    "bundle_target",
    "commit_upload",
    "expire_uploads",
    "get_upload",
    "part_target",
    "receive_bundle",
    "receive_part",
    "start_upload",
    "touch_blobs",
]

log = logging.getLogger(__name__)

ARCHIVE_FORMATS = ("tar", "tar.gz", "zip")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_FILE_FIELDS = frozenset({"path", "size", "sha256", "mode"})
# Stands in for an undeclared hash when check_manifest validates paths and sizes; never stored.
_NO_HASH = "0" * 64
# A staging directory without any upload row is removed once it has been idle this long: younger ones may
# belong to an upload whose row is not committed yet (start_upload creates the directory in its transaction).
ORPHAN_STAGING_AGE_S = 3600.0


@dataclass(frozen=True)
class UploadView:
    id: int
    item_id: int
    kind: str
    state: str
    part_size: int
    expires_at: datetime
    file_count: int
    total_bytes: int
    needed: list[int]
    # Parts not yet received of the needed files: [{"index", "path", "parts": [n, ...]}]; empty once closed.
    missing: list[dict[str, Any]]
    version_id: int | None


@dataclass(frozen=True, slots=True)
class PartTarget:
    """An authorized part: where ``receive_part`` writes it. ``sha256`` is the whole file's declared hash."""

    upload_id: int
    index: int
    part: int
    part_size: int
    file_size: int
    sha256: str | None


@dataclass(frozen=True, slots=True)
class BundleTarget:
    """An authorized bundle: the needed files it may carry, index -> (size, declared sha256 or None)."""

    upload_id: int
    files: dict[int, tuple[int, str | None]]


def touch_blobs(store: BlobStore, hashes: Iterable[str]) -> set[str]:
    """Refresh the mtime of the stored blobs among ``hashes`` (``BlobStore.refresh``); return those the store
    does not have.

    Sync (run it in a thread). Whoever is about to reference existing blobs calls it, so that a garbage
    collection already past its reference scan sees them as young and keeps them for the grace period.
    """
    return {sha for sha in set(hashes) if store.refresh(sha) is None}


# --- start ---------------------------------------------------------------------------------------------------


def _declare(files: Sequence[Mapping[str, Any]], *, max_files: int) -> list[list[Any]]:
    """Validate the declared files; their rows' JSON form ``[[path, size, sha256 or None, mode], ...]`` in order.

    Errors name the file by index (``files[3].path``), as the client's list does.
    """
    if isinstance(files, str | bytes) or not isinstance(files, Sequence):
        raise ValidationFailed("must be a list of files", field="files")
    if not files:
        raise ValidationFailed("must list at least one file", field="files")
    if len(files) > max_files:
        raise ValidationFailed(f"at most {max_files} files per upload", field="files")
    declared: list[list[Any]] = []
    for i, spec in enumerate(files):
        field = f"files[{i}]"
        if not isinstance(spec, Mapping):
            raise ValidationFailed("must be an object with path and size", field=field)
        for name in spec:
            if name not in _FILE_FIELDS:
                raise ValidationFailed("is not a field of a file (path, size, sha256, mode)", field=f"{field}.{name}")
        raw_path = spec.get("path")
        if not isinstance(raw_path, str):
            raise ValidationFailed("must be a relative path", field=f"{field}.path")
        path = check_path(raw_path, field=f"{field}.path")
        size = spec.get("size")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValidationFailed("must be a number of bytes, 0 or more", field=f"{field}.size")
        mode = spec.get("mode")
        if mode is None:
            mode = 0o644
        elif isinstance(mode, bool) or not isinstance(mode, int) or not 0 <= mode <= 0o7777:
            raise ValidationFailed("must be a permission mode between 0 and 0o7777", field=f"{field}.mode")
        sha = spec.get("sha256")
        if sha is not None:
            if not isinstance(sha, str) or not _HEX64.fullmatch(sha.lower()):
                raise ValidationFailed("must be 64 hexadecimal digits", field=f"{field}.sha256")
            sha = sha.lower()
        # Set-id and sticky bits are dropped, as check_manifest does: a pulled file never gains privileges.
        declared.append([path, size, sha, mode & 0o777])
    # Duplicate paths, and a path that is also another's directory.
    check_manifest([FileEntry(path, size, sha or _NO_HASH, mode) for path, size, sha, mode in declared], field="files")
    return declared


def _needed(files: Sequence[Sequence[Any]], absent: set[str]) -> list[int]:
    """Indices whose bytes must be sent: undeclared hashes, and the first file of each hash the store lacks."""
    needed: list[int] = []
    seen: set[str] = set()
    for i, (_path, _size, sha, _mode) in enumerate(files):
        if sha is None:
            needed.append(i)
        elif sha in absent and sha not in seen:
            seen.add(sha)
            needed.append(i)
    return needed


async def start_upload(
    session: AsyncSession,
    actor: Actor,
    store: BlobStore,
    settings: Settings,
    kind: ItemKind,
    item_id: int,
    *,
    files: Sequence[Mapping[str, Any]],
    archive: str | None = None,
    description: str = "",
    metadata: dict[str, Any] | None = None,
) -> UploadView:
    """Open an upload of a new version of the item; the answer's ``needed`` says which files to send.

    Args:
        files: ``[{"path", "size", "sha256"?, "mode"?}]``; a file's index in this list names it later.
        archive: ``"tar"``, ``"tar.gz"`` or ``"zip"``: the one declared file is an archive that the commit
            expands into the version's files.

    Raises:
        NotFound: the actor cannot see the item.
        Forbidden: the actor may not add versions to it (owner; platform admins for presets).
        ValidationFailed: a malformed file list (field ``files[3].path``), archive format or metadata.
        QuotaExceeded: the declared size does not fit the workspace's storage quota.
    """
    item = await load_item_for_write(session, actor, kind, item_id)
    if archive is not None and archive not in ARCHIVE_FORMATS:
        raise ValidationFailed(f"must be one of {', '.join(ARCHIVE_FORMATS)}", field="archive")
    check_text(description, "description", 4096)
    meta = version_metadata(kind, metadata, image_type=item.meta.get("image_type"))
    declared = _declare(files, max_files=settings.archive_max_entries)
    if archive is not None and len(declared) != 1:
        raise ValidationFailed("an archive upload declares exactly one file: the archive", field="files")
    total = sum(f[1] for f in declared)
    await check_storage_quota(session, item.workspace_id, total)
    if archive is None:
        absent = await asyncio.to_thread(touch_blobs, store, (f[2] for f in declared if f[2] is not None))
        needed = _needed(declared, absent)
    else:
        needed = [0]  # the archive itself is always sent: the commit expands it from the staging area
    row = UploadSession(
        item_id=item.id,
        user_id=actor.user_id,
        files=declared,
        needed=needed,
        part_size=settings.upload_part_size,
        archive={"format": archive} if archive else None,
        description=description,
        version_meta=meta,
        expires_at=utcnow() + timedelta(seconds=settings.upload_ttl_s),
    )
    session.add(row)
    await session.flush()
    # Inside the transaction: if it then fails, the directory is an orphan that expire_uploads removes later.
    await asyncio.to_thread(Staging(store).create, row.id)
    audit.record(
        session,
        actor,
        f"{kind.value}.upload.start",
        "upload",
        row.id,
        workspace_id=item.workspace_id,
        details={"item_id": item.id, "files": len(declared), "bytes": total, "needed": len(needed)},
    )
    return _view(row, item.kind, {})


# --- state ---------------------------------------------------------------------------------------------------


async def _load_own(session: AsyncSession, actor: Actor, upload_id: int, *, lock: bool = False) -> UploadSession:
    """The upload if the actor started it; anyone else gets NotFound (no existence leak)."""
    row = await session.get(UploadSession, upload_id, with_for_update=lock, populate_existing=lock)
    if row is None or row.user_id != actor.user_id:
        raise NotFound(f"upload {upload_id} not found")
    return row


def _check_open(row: UploadSession, now: datetime | None = None) -> None:
    if row.state != UploadState.OPEN.value:
        raise Conflict(f"upload {row.id} is {row.state}", details={"state": row.state})
    if row.expires_at <= (now or utcnow()):
        raise Conflict(f"upload expired at {row.expires_at.isoformat()}; start a new one", details={"state": "expired"})


def _missing(row: UploadSession, received: Mapping[int, set[int]]) -> list[dict[str, Any]]:
    if row.state != UploadState.OPEN.value:
        return []
    missing = []
    for index in row.needed:
        path, size = row.files[index][0], row.files[index][1]
        got = received.get(index, set())
        parts = [p for p in range(part_count(size, row.part_size)) if p not in got]
        if parts:
            missing.append({"index": index, "path": path, "parts": parts})
    return missing


def _view(row: UploadSession, kind: str, received: Mapping[int, set[int]]) -> UploadView:
    return UploadView(
        id=row.id,
        item_id=row.item_id,
        kind=kind,
        state=row.state,
        part_size=row.part_size,
        expires_at=row.expires_at,
        file_count=len(row.files),
        total_bytes=sum(int(f[1]) for f in row.files),
        needed=list(row.needed),
        missing=_missing(row, received),
        version_id=row.version_id,
    )


async def _item_kind(session: AsyncSession, item_id: int) -> str:
    return str(await session.scalar(select(CatalogItem.kind).where(CatalogItem.id == item_id)))


async def get_upload(session: AsyncSession, actor: Actor, store: BlobStore, upload_id: int) -> UploadView:
    """The upload and what is still missing (one listing of its staging directory). Its user only."""
    row = await _load_own(session, actor, upload_id)
    received = await asyncio.to_thread(Staging(store).received, row.id) if row.state == "open" else {}
    return _view(row, await _item_kind(session, row.item_id), received)


async def part_target(session: AsyncSession, actor: Actor, upload_id: int, index: int, part: int) -> PartTarget:
    """Authorize one part of a needed file before its bytes are read (a short read, no transaction held).

    Raises:
        NotFound: no such upload of this actor.
        Conflict: the upload is committed, aborted or expired.
        ValidationFailed: the file is not needed (field ``index``) or the part is out of range (``part``).
    """
    row = await _load_own(session, actor, upload_id)
    _check_open(row)
    if index not in row.needed:
        if 0 <= index < len(row.files):
            raise ValidationFailed(f"file {index} is not needed: the store has its content already", field="index")
        raise ValidationFailed(f"the upload has no file {index}", field="index")
    size = int(row.files[index][1])
    count = part_count(size, row.part_size)
    if not 0 <= part < count:
        raise ValidationFailed(f"file {index} has parts 0 to {count - 1}", field="part")
    return PartTarget(row.id, index, part, row.part_size, size, row.files[index][2])


async def bundle_target(session: AsyncSession, actor: Actor, upload_id: int) -> BundleTarget:
    """Authorize a bundle: the needed files it may carry (see ``Staging.write_bundle``)."""
    row = await _load_own(session, actor, upload_id)
    _check_open(row)
    files = row.files  # one attribute load: through the ORM descriptor per file it was 0.5 s per 10,000-file push
    return BundleTarget(row.id, {i: (int(files[i][1]), files[i][2]) for i in row.needed})


async def receive_part(store: BlobStore, target: PartTarget, part_sha256: str, chunks: AsyncIterator[bytes]) -> None:
    """Write an authorized part into the staging area (outside any transaction)."""
    await Staging(store).write_part(
        target.upload_id,
        target.index,
        target.part,
        part_size=target.part_size,
        file_size=target.file_size,
        part_sha256=part_sha256,
        chunks=chunks,
    )


async def receive_bundle(store: BlobStore, target: BundleTarget, chunks: AsyncIterator[bytes]) -> list[int]:
    """Write an authorized bundle into the staging area; returns the indices of the files it carried."""
    return await Staging(store).write_bundle(target.upload_id, target.files, chunks)


# --- commit --------------------------------------------------------------------------------------------------


async def commit_upload(
    db: Database, actor: Actor, store: BlobStore, settings: Settings, upload_id: int
) -> VersionView:
    """Turn a complete upload into a new version of its item.

    Runs in three steps so that no transaction is open while bytes move: a read that authorizes, the
    verification and move of the staged files into the store (archives: expansion) in a thread, then one
    write transaction that adds the version and marks the session committed. Retrying after any failure is
    safe; retrying after success answers with the same version. An archive's declared size is checked against
    the workspace's remaining quota before it expands, and a refused archive commit deletes the blobs it added at
    once (``_discard``); the session stays open.

    Raises:
        NotFound: no such upload of this actor.
        Conflict: the upload was aborted or expired, or blobs it counted on are gone from the store.
        UploadIncomplete: parts are missing (``details["missing"]``: ``[{"index", "path", "parts"}]``).
        HashMismatch: a file does not hash to its declared sha256.
        UnsafeArchive: the archive holds links, devices, unsafe paths, or expands beyond the limits.
        QuotaExceeded: the version (or the size an archive declares) does not fit the workspace's storage quota.
    """
    async with db.read() as session:
        row = await _load_own(session, actor, upload_id)
        if row.state == UploadState.COMMITTED.value and row.version_id is not None:
            return await _committed_view(session, actor, row.version_id)
        _check_open(row)
        files: list[list[Any]] = list(row.files)
        needed: list[int] = list(row.needed)
        part_size, archive = row.part_size, row.archive
        room = None
        if archive is not None:
            workspace_id = await session.scalar(select(CatalogItem.workspace_id).where(CatalogItem.id == row.item_id))
            room = await storage_room(session, workspace_id)

    # The blobs this commit adds to the store; deleted at once if the commit is then refused.
    created: set[str] = set()
    try:
        return await _commit(db, actor, store, settings, upload_id, files, needed, part_size, archive, room, created)
    except Exception:
        await discard_refused_blobs(db, store, created, upload_id=upload_id)
        raise


async def _commit(
    db: Database,
    actor: Actor,
    store: BlobStore,
    settings: Settings,
    upload_id: int,
    files: Sequence[Sequence[Any]],
    needed: Sequence[int],
    part_size: int,
    archive: Mapping[str, Any] | None,
    room: StorageRoom | None,
    created: set[str],
) -> VersionView:
    entries = await _finalize(store, settings, upload_id, files, needed, part_size, archive, room, created)

    async with db.write() as session:
        # Re-read under the row lock: a concurrent commit of the same session may have won.
        row = await _load_own(session, actor, upload_id, lock=True)
        if row.state == UploadState.COMMITTED.value and row.version_id is not None:
            return await _committed_view(session, actor, row.version_id)
        if row.state != UploadState.OPEN.value:
            raise Conflict(f"upload {row.id} is {row.state}", details={"state": row.state})
        kind = ItemKind(await _item_kind(session, row.item_id))
        item = await load_item_for_write(session, actor, kind, row.item_id)
        version = await add_version(
            session, actor, item, entries=entries, description=row.description, metadata=row.version_meta
        )
        row.state = UploadState.COMMITTED.value
        row.version_id = version.id
        view = await version_view(session, actor, item, version)
    # After the commit: a failure here only leaves a directory that expire_uploads removes.
    await asyncio.to_thread(Staging(store).remove, upload_id)
    return view


async def _finalize(
    store: BlobStore,
    settings: Settings,
    upload_id: int,
    files: Sequence[Sequence[Any]],
    needed: Sequence[int],
    part_size: int,
    archive: Mapping[str, Any] | None,
    room: StorageRoom | None,
    created: set[str],
) -> list[FileEntry]:
    """Verify the staged files and move them into the store; the version's entries (expanded archives).

    ``room``: the workspace's quota, which an archive's declared size is checked against before it expands.
    ``created``: receives the blobs an archive commit adds (the expanded files, the archive's own link).
    """
    staging = Staging(store)
    try:
        hashes = await asyncio.to_thread(
            staging.finalize, upload_id, [(i, int(files[i][1]), files[i][2]) for i in needed], part_size=part_size
        )
    except UploadIncomplete as exc:
        raise _incomplete(exc, files) from None
    if archive is not None:
        # Expanded from the staged file, which finalize verified and linked into the store without moving it.
        data = staging.data_path(upload_id, 0)
        if await asyncio.to_thread(_same_file, data, store.path(hashes[0])):
            created.add(hashes[0])  # the link is this upload's, not a blob stored before
        entries = await asyncio.to_thread(
            expand_archive,
            data,
            str(archive["format"]),
            store,
            max_bytes=settings.archive_max_bytes,
            max_entries=settings.archive_max_entries,
            check_declared=room.check_archive if room is not None else None,
            created=created,
        )
    else:
        entries = [
            FileEntry(path, int(size), hashes.get(i) or str(sha), int(mode))
            for i, (path, size, sha, mode) in enumerate(files)
        ]
    # Files the upload did not send are blobs the store had at start; the session's declared hashes kept them
    # from garbage collection, but an admin's repair may have quarantined one. Those finalize just linked in are
    # fresh (a stat each would cost ~0.2 s per 10,000 files).
    linked = set(hashes.values()) if archive is None else set()
    lost = await asyncio.to_thread(touch_blobs, store, (e.sha256 for e in entries if e.sha256 not in linked))
    if lost:
        paths = sorted(e.path for e in entries if e.sha256 in lost)
        raise Conflict(
            f"the store no longer has the content of {', '.join(paths[:5])}"
            + (f" and {len(paths) - 5} more" if len(paths) > 5 else "")
            + "; abort this upload and upload again",
            details={"paths": paths[:100]},
        )
    await asyncio.to_thread(store.sync)
    return entries


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except FileNotFoundError:
        return False


def _incomplete(exc: UploadIncomplete, files: Sequence[Sequence[Any]]) -> UploadIncomplete:
    """The store's UploadIncomplete, with each missing file's path and a message that names them."""
    missing = [
        {"index": m["index"], "path": files[m["index"]][0], "parts": list(m["parts"])}
        for m in exc.details.get("missing", [])
    ]
    named = ", ".join(f"{m['path']} (parts {', '.join(map(str, m['parts'][:10]))})" for m in missing[:5])
    more = f" and {len(missing) - 5} more files" if len(missing) > 5 else ""
    return UploadIncomplete(f"parts are missing: {named}{more}", details={"missing": missing})


async def _committed_view(session: AsyncSession, actor: Actor, version_id: int) -> VersionView:
    version = await session.get(CatalogVersion, version_id)
    if version is None:  # the version was deleted after the commit
        raise Conflict("this upload was committed, and its version has been deleted since")
    item = await session.get(CatalogItem, version.item_id)
    assert item is not None
    return await version_view(session, actor, item, version)


# --- abort and expiry ----------------------------------------------------------------------------------------


async def abort_upload(session: AsyncSession, actor: Actor, store: BlobStore, upload_id: int) -> None:
    """Abandon an open upload and remove its staged parts. Aborting an aborted upload does nothing.

    Raises:
        NotFound: no such upload of this actor.
        Conflict: the upload is committed already.
    """
    row = await _load_own(session, actor, upload_id, lock=True)
    if row.state == UploadState.ABORTED.value:
        return
    if row.state == UploadState.COMMITTED.value:
        raise Conflict(f"upload {row.id} is committed; delete the version instead", details={"state": row.state})
    row.state = UploadState.ABORTED.value
    item = await session.get(CatalogItem, row.item_id)
    assert item is not None  # sessions are deleted with their item
    audit.record(session, actor, f"{item.kind}.upload.abort", "upload", row.id, workspace_id=item.workspace_id)
    await session.flush()
    # Removed now rather than after the commit: if the commit then fails the session stays open with its
    # parts gone, which get_upload reports as missing; nothing is lost that the client cannot send again.
    await asyncio.to_thread(Staging(store).remove, row.id)


async def expire_uploads(db: Database, store: BlobStore, *, now: datetime | None = None) -> int:
    """Abort open sessions past their expiry and remove their staging; also remove staging directories that
    no open session owns. Idempotent; run by the store GC controller. Returns how many sessions expired."""
    now = now or utcnow()
    async with db.write() as session:
        stmt = (
            update(UploadSession)
            .where(UploadSession.state == UploadState.OPEN.value, UploadSession.expires_at <= now)
            .values(state=UploadState.ABORTED.value)
            .returning(UploadSession.id)
            .execution_options(synchronize_session=False)
        )
        expired = list((await session.scalars(stmt)).all())
    staging = Staging(store)
    for upload_id in expired:
        await asyncio.to_thread(staging.remove, upload_id)
    swept = set(expired)
    present = [i for i in await asyncio.to_thread(staging.upload_ids) if i not in swept]
    states: dict[int, str] = {}
    async with db.read() as session:
        for start in range(0, len(present), 1000):
            chunk = present[start : start + 1000]
            rows = await session.execute(
                select(UploadSession.id, UploadSession.state).where(UploadSession.id.in_(chunk))
            )
            states.update((upload_id, state) for upload_id, state in rows)
    for upload_id in present:
        state = states.get(upload_id)
        if state == UploadState.OPEN.value:
            continue
        if state is None and not _idle_for(store.staging_dir / str(upload_id), ORPHAN_STAGING_AGE_S, now):
            continue
        await asyncio.to_thread(staging.remove, upload_id)
    if expired:
        log.info("expired %d upload sessions: %s", len(expired), expired[:20])
    return len(expired)


def _idle_for(path: Path, seconds: float, now: datetime) -> bool:
    try:
        return now.timestamp() - path.stat().st_mtime > seconds
    except FileNotFoundError:
        return False
