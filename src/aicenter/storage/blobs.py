"""The content-addressed blob store: every file of every version, stored once under its sha256."""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import BinaryIO, cast

from aicenter.core.errors import HashMismatch, ValidationFailed
from aicenter.storage.manifest import SHA256_RE

READ_SIZE = 1 << 20
# Read-only for everyone, behind a 0700 store root (``aicenter.storage.private``): no other Unix account can
# reach a blob through the store, while the hard link of an input file staged into a job's tree (bound read-only
# into its sandbox) stays readable by the job's own uid. Nobody but the server, its owner, may chmod it.
BLOB_MODE = 0o444
# A blob moved or deduplicated into the store gets a fresh mtime when its own is older than this, so garbage
# collection (which keeps unreferenced blobs younger than its grace period) cannot take it before the commit
# that references it. Skipping the utime for fresh files saves a syscall per small file.
FRESH_S = 60.0


def hash_file(path: Path | str) -> tuple[str, int]:
    """sha256 and size of a file, read 1 MiB at a time (hashlib releases the GIL on large updates)."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(READ_SIZE)
        view = memoryview(buf)
        while n := f.readinto(buf):
            h.update(view[:n])
            size += n
    return h.hexdigest(), size


class BlobStore:
    """Blobs under ``root/blobs/ab/cd/<sha256>``, written read-only and atomically.

    Every write goes to a temporary file in ``root/tmp`` (the same filesystem) and is renamed into place, so a
    reader never sees a partial blob and a crash leaves at most a stray temporary file (garbage collection removes
    old ones). Writing the same content twice stores it once.

    Durability: writes are *not* fsynced one by one. An fsync costs milliseconds, which caps a store at a few
    hundred files per second where the goal is 10,000 small files per second. Instead a caller that is about to
    record blobs in the database calls :meth:`sync` once (one ``syncfs`` of the store's filesystem), so a row never
    points at a blob that a power loss could take away. With ``fsync=False`` (tests, scratch stores) it is a no-op.

    Thread safety: every method may be called from several threads and processes at once (several API replicas
    on one shared filesystem); the only shared state is the filesystem and renames are atomic.
    """

    def __init__(self, root: Path, *, fsync: bool = True) -> None:
        self.root = Path(root)
        self.fsync = fsync
        self.blobs_dir = self.root / "blobs"
        self.staging_dir = self.root / "staging"
        self.quarantine_dir = self.root / "quarantine"
        self.envs_dir = self.root / "envs"
        self.logs_dir = self.root / "logs"
        self.tmp_dir = self.root / "tmp"
        for d in (self.blobs_dir, self.staging_dir, self.quarantine_dir, self.envs_dir, self.logs_dir, self.tmp_dir):
            d.mkdir(parents=True, exist_ok=True)

    # -- naming ------------------------------------------------------------------------------------------------
    def path(self, sha256: str) -> Path:
        """``blobs/ab/cd/<sha256>``. ValueError for anything but 64 lower-case hex digits (no path tricks)."""
        if not SHA256_RE.fullmatch(sha256):
            raise ValueError(f"not a sha256: {sha256[:80]!r}")
        return self.blobs_dir / sha256[:2] / sha256[2:4] / sha256

    def tmp_path(self, hint: str = "") -> Path:
        """A fresh name in the store's temporary area (same filesystem as the blobs)."""
        return self.tmp_dir / f"{hint}{uuid.uuid4().hex}.tmp"

    # -- reading -----------------------------------------------------------------------------------------------
    def exists(self, sha256: str) -> bool:
        return self.path(sha256).is_file()

    def missing(self, hashes: Iterable[str]) -> set[str]:
        """The hashes of ``hashes`` that the store does not hold (one stat each)."""
        return {h for h in set(hashes) if not self.exists(h)}

    def open(self, sha256: str) -> BinaryIO:
        """The blob for reading. FileNotFoundError when it is not stored."""
        return open(self.path(sha256), "rb")

    def iter_blobs(self) -> Iterator[tuple[str, int, float]]:
        """(sha256, size, mtime) of every stored blob, in one walk of the two directory levels."""
        for level1 in _scandir_sorted(self.blobs_dir):
            if not level1.is_dir(follow_symlinks=False):
                continue
            for level2 in _scandir_sorted(level1.path):
                if not level2.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(level2.path) as it:
                    for entry in it:
                        name = entry.name
                        if not SHA256_RE.fullmatch(name) or name[:2] != level1.name or name[2:4] != level2.name:
                            continue
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except FileNotFoundError:  # deleted while we walk
                            continue
                        yield name, st.st_size, st.st_mtime

    # -- writing -----------------------------------------------------------------------------------------------
    def put_file(self, src: Path, *, sha256: str | None = None, move: bool = False) -> tuple[str, int]:
        """Store the file ``src`` and return ``(sha256, size)``.

        Args:
            src: a regular file.
            sha256: the hash the caller expects; the bytes are hashed anyway and HashMismatch is raised (and nothing
                stored) when they differ. When a blob of that hash is already stored, ``src`` is not read: only its
                size is compared.
            move: take ``src`` away: renamed into the store when it is on the same filesystem (no copy), deleted
                when its content is already stored. Otherwise ``src`` is left as it was.

        Raises:
            HashMismatch: the bytes do not hash to ``sha256``.
            ValidationFailed: ``src`` changed while it was being copied.
        """
        src = Path(src)
        if sha256 is not None and self.exists(sha256):
            size = os.stat(src).st_size
            stored = self.refresh(sha256)
            if stored is not None:
                if stored != size:
                    raise HashMismatch(
                        f"{src.name} has {size} bytes, but the stored content of sha256 {sha256} has {stored}",
                        details={"expected": sha256},
                    )
                if move:
                    src.unlink(missing_ok=True)
                return sha256, size
        before = os.stat(src)
        actual, size = hash_file(src)
        if sha256 is not None and actual != sha256:
            raise HashMismatch(
                f"{src.name} hashes to {actual}, not the declared {sha256}",
                details={"expected": sha256, "actual": actual},
            )
        if move:
            self.adopt(src, actual, size)
            return actual, size
        if self.refresh(actual) is not None:
            return actual, size
        tmp = self.tmp_path()
        try:
            shutil.copyfile(src, tmp)  # copy_file_range / sendfile: no bytes through Python
            after = os.stat(src)
            if (after.st_size, after.st_mtime_ns, after.st_ino) != (before.st_size, before.st_mtime_ns, before.st_ino):
                raise ValidationFailed(f"{src.name} changed while it was being stored; store it once it is complete")
            os.chmod(tmp, BLOB_MODE)
            self._rename_in(tmp, actual)
        finally:
            tmp.unlink(missing_ok=True)
        return actual, size

    def put_bytes(self, data: bytes) -> tuple[str, int]:
        """Store ``data`` and return ``(sha256, size)``."""
        sha = hashlib.sha256(data).hexdigest()
        if self.refresh(sha) is not None:
            return sha, len(data)
        tmp = self.tmp_path()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fchmod(fd, BLOB_MODE)
            finally:
                os.close(fd)
            self._rename_in(tmp, sha)
        finally:
            tmp.unlink(missing_ok=True)
        return sha, len(data)

    def adopt(self, src: Path, sha256: str, size: int) -> None:
        """Move ``src``, whose content the caller has *already verified* to hash to ``sha256``, into the store.

        For this package's staging and archive code, which hash bytes as they arrive: re-reading them would double
        the cost of a commit. Idempotent: a missing ``src`` whose blob is stored counts as done.
        """
        try:
            st = os.stat(src)
        except FileNotFoundError:
            if self.exists(sha256):
                return
            raise
        if st.st_size != size:
            raise HashMismatch(f"{src.name} has {st.st_size} bytes, expected {size}", details={"expected": sha256})
        # Fresh mtime *before* the rename: the blob must never appear with an old mtime that GC could act on.
        if time.time() - st.st_mtime > FRESH_S:
            os.utime(src)
        if st.st_mode & 0o7777 != BLOB_MODE:
            os.chmod(src, BLOB_MODE)
        try:
            self._rename_in(src, sha256)
        except OSError as e:
            if e.errno != errno.EXDEV:
                raise
            # Staging on another filesystem than the blobs: copy once, then drop the source.
            tmp = self.tmp_path()
            try:
                shutil.copyfile(src, tmp)
                os.chmod(tmp, BLOB_MODE)
                self._rename_in(tmp, sha256)
            finally:
                tmp.unlink(missing_ok=True)
            src.unlink(missing_ok=True)

    def link_in(self, src: Path, sha256: str) -> None:
        """Hard-link ``src``, verified by the caller to hash to ``sha256`` and already read-only, into the store.

        ``src`` keeps its name (an upload's staged file stays valid until the upload is removed). An existing blob
        wins and is refreshed (see :meth:`refresh`). Filesystems without hard links between the two places (EXDEV,
        EPERM) get a copy instead.
        """
        dest = self.path(sha256)
        try:
            os.link(src, dest)
        except FileExistsError:
            self.refresh(sha256)
        except FileNotFoundError:
            if not os.path.exists(src):
                raise
            dest.parent.mkdir(parents=True, exist_ok=True)
            self.link_in(src, sha256)
        except OSError as e:
            if e.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK):
                raise
            if self.refresh(sha256) is not None:
                return
            tmp = self.tmp_path()
            try:
                shutil.copyfile(src, tmp)
                os.chmod(tmp, BLOB_MODE)
                self._rename_in(tmp, sha256)
            finally:
                tmp.unlink(missing_ok=True)

    def delete(self, sha256: str) -> None:
        self.path(sha256).unlink(missing_ok=True)

    def quarantine(self, sha256: str) -> Path:
        """Move a damaged blob to ``quarantine/<sha256>.<unix time ns>`` and return that path."""
        dest = self.quarantine_dir / f"{sha256}.{time.time_ns()}"
        os.replace(self.path(sha256), dest)
        return dest

    def refresh(self, sha256: str) -> int | None:
        """Size of the stored blob after refreshing its mtime, or None when it is not stored.

        Refreshing keeps a deduplicated blob out of garbage collection's reach until the commit that references it
        (GC re-checks the mtime after taking a blob aside; see gc.collect_garbage).
        """
        path = self.path(sha256)
        try:
            st = os.stat(path)
            if time.time() - st.st_mtime > FRESH_S:
                os.utime(path)
        except FileNotFoundError:
            return None
        return st.st_size

    def sync(self) -> None:
        """Flush every write to the store's filesystem to stable storage, once for many files.

        Call it after the blobs of a commit are in place and before the database transaction that references them.
        One ``syncfs(2)`` of the filesystem holding ``root`` (falls back to ``sync(2)`` where syncfs is missing).
        A no-op when the store was opened with ``fsync=False``.
        """
        if not self.fsync:
            return
        fd = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if _syncfs(fd) != 0:
                os.sync()
        finally:
            os.close(fd)

    # -- internals ---------------------------------------------------------------------------------------------
    def _rename_in(self, src: Path, sha256: str) -> None:
        """Atomically rename ``src`` to the blob's path, creating the two directory levels on first use."""
        dest = self.path(sha256)
        try:
            os.replace(src, dest)
        except FileNotFoundError:
            if not os.path.exists(src):
                raise
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(src, dest)


def _scandir_sorted(path: str | Path) -> list[os.DirEntry[str]]:
    with os.scandir(path) as it:
        return sorted(it, key=lambda e: e.name)


@functools.cache
def _syncfs_function() -> Callable[[int], int] | None:
    try:
        func = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):  # not Linux, or a libc without syncfs
        return None
    func.argtypes = [ctypes.c_int]
    func.restype = ctypes.c_int
    return cast(Callable[[int], int], func)


def _syncfs(fd: int) -> int:
    """``syncfs(fd)`` through libc; -1 when unavailable or failed (the caller falls back to ``os.sync``)."""
    func = _syncfs_function()
    return -1 if func is None else func(fd)
