"""Deleting at once the blobs that a refused commit wrote, rather than leaving them to garbage collection.

A refused archive commit may already have expanded gigabytes into the store; garbage collection would keep them
for its grace period (hours), so a user retrying a refused bomb could fill the disk. What is deleted is only what
the commit itself added (``expand_archive``'s ``created``, the archive's own link) and what no version and no
other open upload references, read after the refusal.

A concurrent commit of the very same new bytes that found them stored is protected by its own presence check
(``touch_blobs``, just before its transaction: archive commits check every entry) except in the window between
that check and its transaction; fsck then reports the blob missing and uploading the file again restores it.
That window is the same one garbage collection's grace period closes, and needs two uploads of identical new
content, one of them refused after expansion, within milliseconds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Collection

from sqlalchemy import select

from aicenter.core.catalog import UploadState
from aicenter.db.engine import Database
from aicenter.db.models import UploadSession, VersionFile
from aicenter.storage import BlobStore

log = logging.getLogger(__name__)

# Bound on one IN (...) list (SQLite's default limit on bound parameters is 32766).
_IN_CHUNK = 1000


async def discard_refused_blobs(db: Database, store: BlobStore, hashes: Collection[str], *, upload_id: int) -> int:
    """Delete the blobs among ``hashes`` that no version and no open upload other than ``upload_id`` references.

    Never raises for a store or database problem: the refusal that called it is what the client must see, and
    garbage collection removes whatever is left. Returns how many blobs were deleted.
    """
    if not hashes:
        return 0
    try:
        async with db.read() as session:
            wanted = list(set(hashes))
            kept: set[str] = set()
            for start in range(0, len(wanted), _IN_CHUNK):
                chunk = wanted[start : start + _IN_CHUNK]
                kept.update(await session.scalars(select(VersionFile.sha256).where(VersionFile.sha256.in_(chunk))))
            open_files = await session.scalars(
                select(UploadSession.files).where(
                    UploadSession.state == UploadState.OPEN.value, UploadSession.id != upload_id
                )
            )
            for files in open_files:
                kept.update(sha for _path, _size, sha, *_ in files if sha in hashes)
        doomed = [sha for sha in wanted if sha not in kept]
        await asyncio.to_thread(_delete, store, doomed)
    except Exception:  # a cleanup must not hide the refusal; GC takes what is left
        log.exception("could not delete the blobs of refused upload %s; garbage collection will", upload_id)
        return 0
    if doomed:
        log.info("deleted %d blobs written by refused upload %s", len(doomed), upload_id)
    return len(doomed)


def _delete(store: BlobStore, hashes: Collection[str]) -> None:
    for sha in hashes:
        store.delete(sha)
