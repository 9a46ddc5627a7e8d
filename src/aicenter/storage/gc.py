"""Store maintenance: garbage collection of unreferenced blobs, and fsck of referenced ones."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from aicenter.core.errors import Damaged
from aicenter.storage.blobs import BlobStore, hash_file

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GcReport:
    scanned: int
    deleted: int
    freed_bytes: int
    kept_young: int


@dataclass(frozen=True, slots=True)
class FsckReport:
    checked: int
    missing: list[str] = field(default_factory=list)
    damaged: list[str] = field(default_factory=list)
    quarantined: list[str] = field(default_factory=list)


def collect_garbage(
    store: BlobStore, referenced: Collection[str], *, grace_s: float, now: float | None = None
) -> GcReport:
    """Delete blobs that nothing references and that are older than ``grace_s``; one walk of the store.

    Young blobs are kept because a commit may be about to reference them (uploads are finalized before their
    transaction; the store refreshes the mtime of a blob it deduplicates). The race with such a refresh is closed
    by taking a blob aside first and looking at its mtime again: a refresh that came before the rename shows, and
    one that comes after finds no blob and writes it again. Temporary files older than ``grace_s`` (left by a
    crash) are removed as well.
    """
    now = time.time() if now is None else now
    refs = referenced if isinstance(referenced, (set, frozenset, Mapping)) else set(referenced)
    scanned = deleted = freed = young = 0
    for sha, size, mtime in store.iter_blobs():
        scanned += 1
        if sha in refs:
            continue
        if now - mtime < grace_s:
            young += 1
            continue
        if _take(store, sha, now=now, grace_s=grace_s):
            deleted += 1
            freed += size
        else:
            young += 1
    _clean_tmp(store, now=now, grace_s=grace_s)
    return GcReport(scanned=scanned, deleted=deleted, freed_bytes=freed, kept_young=young)


def _take(store: BlobStore, sha: str, *, now: float, grace_s: float) -> bool:
    path = store.path(sha)
    aside = store.tmp_path(f"gc-{sha[:16]}-")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return False
    if now - os.stat(aside).st_mtime < grace_s:
        with contextlib.suppress(FileExistsError):  # refreshed meanwhile: put it back (unless written again)
            os.link(aside, path)
        os.unlink(aside)
        return False
    os.unlink(aside)
    return True


def _clean_tmp(store: BlobStore, *, now: float, grace_s: float) -> None:
    with os.scandir(store.tmp_dir) as it:
        stale = [e for e in it if now - e.stat(follow_symlinks=False).st_mtime >= grace_s]
    for entry in stale:
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(entry.path)


def fsck(store: BlobStore, referenced: Mapping[str, int], *, repair: bool) -> FsckReport:
    """Re-hash every referenced blob (sha256 -> expected size) and report the missing and damaged ones.

    ``checked`` counts the referenced blobs examined. With ``repair`` a damaged blob is moved to the quarantine
    directory, so that a later upload of the same content stores it again (the store then holds it as missing
    until then, which is the truth).
    """
    missing: list[str] = []
    damaged: list[str] = []
    quarantined: list[str] = []
    for sha in sorted(referenced):
        path = store.path(sha)
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            missing.append(sha)
            continue
        ok = size == referenced[sha] and hash_file(path)[0] == sha
        if ok:
            continue
        damaged.append(sha)
        if repair:
            try:
                store.quarantine(sha)
            except FileNotFoundError:
                continue
            quarantined.append(sha)
    return FsckReport(checked=len(referenced), missing=missing, damaged=damaged, quarantined=quarantined)


def checked_blob(store: BlobStore, sha256: str, size: int) -> os.stat_result:
    """The stat of a blob about to be served, after checking its length against the manifest's ``size``.

    A blob of another length is damaged (a bit of disk trouble, or someone wrote through a hard link): it is
    moved to quarantine, as ``fsck(repair=True)`` would, so the next upload of the same content stores it again.

    Raises:
        Damaged: the blob is missing, or has another length (then it is quarantined); the message says which.
    """
    try:
        st = os.stat(store.path(sha256))
    except FileNotFoundError:
        raise Damaged(
            f"the content {sha256} is missing from the store; an administrator's `aicenter admin fsck` lists "
            "such files, and uploading the same file again restores it",
            details={"sha256": sha256, "problem": "missing"},
        ) from None
    if st.st_size == size:
        return st
    quarantine_damaged(store, sha256, f"{st.st_size} bytes where its manifest says {size}")
    raise Damaged(
        f"the stored content {sha256} is damaged ({st.st_size} bytes, {size} expected) and was quarantined; "
        "nothing was sent. Uploading the same file again restores it",
        details={"sha256": sha256, "problem": "length", "size": st.st_size, "expected": size},
    )


def quarantine_damaged(store: BlobStore, sha256: str, problem: str) -> None:
    """Move a blob found damaged while it was served to quarantine (as ``fsck(repair=True)`` does) and log why.

    A blob already gone (a concurrent request quarantined it first) is fine.
    """
    with contextlib.suppress(FileNotFoundError):
        store.quarantine(sha256)
    log.warning("blob %s is damaged (%s): quarantined", sha256, problem)
