"""The store's upkeep: which blobs the database references, garbage collection and integrity checks.

Deleting a blob is only safe if nothing may still reference it. Three things can: a version's files, an open
upload session that declared a hash the store already had (its ``needed`` left that file out), and a commit in
flight whose blobs were just written. The first two are read from the database (``referenced_blobs``); the
third is covered by the grace period: ``collect_garbage`` keeps unreferenced blobs younger than
``settings.gc_grace_s``, and whoever starts counting on an existing blob refreshes its mtime
(``_uploads.touch_blobs``) so a collection that read the references a moment earlier keeps it too.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.core.catalog import UploadState
from aicenter.db.engine import Database
from aicenter.db.models import UploadSession, VersionFile
from aicenter.services import audit
from aicenter.services.access import require_platform_admin
from aicenter.services.catalog._uploads import expire_uploads
from aicenter.services.context import Actor
from aicenter.storage import BlobStore, FsckReport, collect_garbage, fsck

__all__ = ["GcResult", "referenced_blobs", "run_fsck", "run_gc", "version_blobs"]

log = logging.getLogger(__name__)

# A venv build directory (<envs>/<hash>.tmp-<token>) older than the build timeout plus this margin belongs to a
# builder that died: no live build can still be writing it.
_STALE_BUILD_MARGIN_S = 3600.0


@dataclass(frozen=True)
class GcResult:
    """One garbage collection: the store's GcReport plus the upload sessions it expired first."""

    scanned: int
    deleted: int
    freed_bytes: int
    kept_young: int
    expired_uploads: int


async def version_blobs(session: AsyncSession) -> dict[str, int]:
    """sha256 -> size of every blob a version's files reference (one pass over version_files)."""
    rows = await session.execute(select(VersionFile.sha256, VersionFile.size).distinct())
    return {sha: int(size) for sha, size in rows}


async def referenced_blobs(session: AsyncSession) -> dict[str, int]:
    """sha256 -> size of every blob garbage collection must keep: versions' files and the declared hashes of
    open upload sessions (a session that found a blob already stored will reference it at commit)."""
    refs = await version_blobs(session)
    open_files = await session.scalars(select(UploadSession.files).where(UploadSession.state == UploadState.OPEN.value))
    for files in open_files:
        for _path, size, sha, *_ in files:
            if sha:
                refs.setdefault(sha, int(size))
    return refs


async def run_gc(
    db: Database, store: BlobStore, settings: Settings, *, actor: Actor | None = None, now: float | None = None
) -> GcResult:
    """Expire stale upload sessions, then delete unreferenced blobs older than ``settings.gc_grace_s``.

    Args:
        actor: Who asked (the admin API); None for the controller. An actor must be a platform admin and the
            run is audited.
        now: Epoch seconds to judge ages by (tests); the current time by default.

    Raises:
        Forbidden: ``actor`` is not a platform admin.
    """
    if actor is not None:
        require_platform_admin(actor, "store garbage collection")
    at = time.time() if now is None else now
    expired = await expire_uploads(db, store, now=datetime.fromtimestamp(at, UTC))
    async with db.read() as session:
        refs = await referenced_blobs(session)
    report = await asyncio.to_thread(collect_garbage, store, refs, grace_s=settings.gc_grace_s, now=at)
    stale = await asyncio.to_thread(_remove_stale_builds, store, settings.build_timeout_s + _STALE_BUILD_MARGIN_S, at)
    result = GcResult(report.scanned, report.deleted, report.freed_bytes, report.kept_young, expired)
    if result.deleted or result.expired_uploads or stale:
        log.info("store gc: %s; %d stale build directories removed", result, stale)
    if actor is not None:
        async with db.write() as session:
            audit.record(session, actor, "storage.gc", "store", details=asdict(result))
    return result


async def run_fsck(db: Database, actor: Actor, store: BlobStore, *, repair: bool) -> FsckReport:
    """Re-hash every blob that a version references; with ``repair`` move damaged ones to quarantine.

    Platform admins only; audited. Blobs of open uploads are not checked: they may not be written yet.

    Raises:
        Forbidden: the actor is not a platform admin.
    """
    require_platform_admin(actor, "store checks")
    async with db.read() as session:
        refs = await version_blobs(session)
    report = await asyncio.to_thread(fsck, store, refs, repair=repair)
    async with db.write() as session:
        audit.record(
            session,
            actor,
            "storage.fsck",
            "store",
            details={
                "repair": repair,
                "checked": report.checked,
                "missing": report.missing[:100],
                "damaged": report.damaged[:100],
                "quarantined": report.quarantined[:100],
            },
        )
    return report


def _remove_stale_builds(store: BlobStore, older_than_s: float, now: float) -> int:
    """Remove venv build directories left by builders that died mid-build."""
    removed = 0
    for path in store.envs_dir.glob("*.tmp-*"):
        try:
            if now - path.lstat().st_mtime > older_than_s:
                shutil.rmtree(path, ignore_errors=True)
                removed += 1
        except FileNotFoundError:
            continue
    return removed
