"""The upload staging area: files of an open upload arrive here in parts or bundles, then move into the store.

Layout of ``staging/<upload_id>/`` (nothing is held in memory; it all survives a restart):

- ``<index>.<sha256>.data``: a *whole* file, verified. Written to a temporary name and renamed only after its size
  and hash were checked, so its name is its receipt: a bundled file or the only part of a small file. A resend
  with the same hash is read past; a broken stream leaves no such name.
- ``<index>.data``: a file of several parts, pre-sized (sparse) to its full size; each part is written at
  ``part * part_size`` with ``pwrite``, from several connections at once, and ``<index>.<part>.ok`` (empty) marks
  it received once its length and hash were checked. The whole file's hash is caught up over the received parts
  in this process as they arrive (``runhash.py``), so finalize reads back only what it did not see.
- ``<index>.taint``: a part of a multi-part file was written after it may have been hashed (a concurrent duplicate
  or a failed send); finalize then re-hashes the whole file from disk.
- ``<index>.<sha256>.done``: the whole-file hash of a multi-part file, recorded before it is linked into the store,
  so a finalize re-run after a crash does not hash it again.

Finalize *hard-links* each file into the store rather than renaming it: the staged name stays valid (archives are
expanded from it, a re-run finds everything in place) and costs no bytes; ``remove`` drops the staged names.

A multi-part file is sealed (read-only, BLOB_MODE) before it is linked. Part writers hold a shared ``flock`` on it and
finalize an exclusive one, and a writer that gets its lock on a sealed file or a received part writes nothing, so
no late or duplicate part can ever write into a stored blob.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import logging
import os
import shutil
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from aicenter.core.errors import HashMismatch, NotFound, UploadIncomplete, ValidationFailed
from aicenter.storage.blobs import BLOB_MODE, FRESH_S, BlobStore, hash_file
from aicenter.storage.bundle import BundleWriter
from aicenter.storage.manifest import is_sha256
from aicenter.storage.runhash import RUNNING, RunningHash

log = logging.getLogger(__name__)

WRITE_SIZE = 1 << 20  # incoming chunks (64-256 KiB from uvicorn) are gathered to at least this before each write
MAX_BATCH_CHUNKS = 512  # and to at most this many (pwritev takes up to IOV_MAX = 1024 buffers)
LINK_WORKERS = 4  # threads that link whole files into the store at finalize
LINK_PARALLEL_MIN = 64  # fewer whole files are linked in the calling thread (no pool to start)
# Catch-up runs of running hashes, fire-and-forget from the request that completed a part (the response need not
# wait ~10 ms per part for them); referenced here so that they are not garbage-collected mid-flight.
_BACKGROUND: set[asyncio.Future[None]] = set()


def part_count(size: int, part_size: int) -> int:
    """Parts of a file of ``size`` bytes: at least one, so an empty file has one empty part."""
    return max(1, -(-size // part_size))


@dataclass(slots=True)
class _Listing:
    """What one ``os.listdir`` of an upload's staging directory says."""

    whole: dict[int, list[str]] = field(default_factory=dict)  # index -> hashes of verified whole files
    parts: dict[int, set[int]] = field(default_factory=dict)  # index -> marked parts of a multi-part file
    done: dict[int, str] = field(default_factory=dict)  # index -> whole-file hash of a finalized multi-part file


def _scan(directory: Path) -> _Listing:
    listing = _Listing()
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return listing
    for name in names:
        pieces = name.split(".")
        if len(pieces) != 3 or not pieces[0].isdigit():
            continue  # "<index>.data", temporary files
        index, middle, kind = int(pieces[0]), pieces[1], pieces[2]
        if kind == "ok" and middle.isdigit():
            listing.parts.setdefault(index, set()).add(int(middle))
        elif kind == "data" and is_sha256(middle):
            listing.whole.setdefault(index, []).append(middle)
        elif kind == "done" and is_sha256(middle):
            listing.done[index] = middle
    for hashes in listing.whole.values():
        hashes.sort()
    return listing


async def _drain(chunks: AsyncIterator[bytes]) -> None:
    async for _ in chunks:
        pass


class Staging:
    """The staging area of ``store``: ``store.staging_dir/<upload_id>/``.

    Stateless apart from the filesystem: any number of instances, threads and processes (API replicas on a shared
    filesystem) may work on the same upload at once.
    """

    def __init__(self, store: BlobStore) -> None:
        self.store = store

    def _dir(self, upload_id: int) -> Path:
        if isinstance(upload_id, bool) or not isinstance(upload_id, int) or upload_id < 0:
            raise ValueError(f"not an upload id: {upload_id!r}")
        return self.store.staging_dir / str(upload_id)

    def create(self, upload_id: int) -> None:
        self._dir(upload_id).mkdir(exist_ok=True)

    def data_path(self, upload_id: int, index: int) -> Path:
        """The assembled file ``index`` (complete once received; still in place after ``finalize``)."""
        directory = self._dir(upload_id)
        listing = _scan(directory)
        done = listing.done.get(index)
        hashes = listing.whole.get(index)
        if hashes:
            sha = done if done in hashes else hashes[0]
            return directory / f"{index}.{sha}.data"
        return directory / f"{index}.data"

    def received(self, upload_id: int) -> dict[int, set[int]]:
        """index -> received part numbers (a whole file, bundled or single-part, shows as part 0). One listdir."""
        listing = _scan(self._dir(upload_id))
        out = {index: set(parts) for index, parts in listing.parts.items()}
        for index in listing.whole:
            out.setdefault(index, set()).add(0)
        return out

    def upload_ids(self) -> list[int]:
        """Uploads that have a staging directory (for expiry sweeps)."""
        return sorted(int(name) for name in os.listdir(self.store.staging_dir) if name.isdigit())

    def remove(self, upload_id: int) -> None:
        """Delete everything staged for the upload. Idempotent.

        The directory is renamed away first, so a concurrent writer sees either all of it or none of it.
        """
        directory = self._dir(upload_id)
        RUNNING.drop_under(directory)
        doomed = self.store.tmp_path(f"rm-{upload_id}-")
        try:
            os.rename(directory, doomed)
        except FileNotFoundError:
            return
        shutil.rmtree(doomed, ignore_errors=True)

    # -- receiving -----------------------------------------------------------------------------------------------
    async def write_part(
        self,
        upload_id: int,
        index: int,
        part: int,
        *,
        part_size: int,
        file_size: int,
        part_sha256: str,
        chunks: AsyncIterator[bytes],
    ) -> None:
        """Receive part ``part`` of file ``index``; see the module docstring for where the bytes go.

        Raises:
            ValidationFailed: a part number out of range, a malformed hash, or a body that is not exactly the part's
                length (nothing is marked received).
            HashMismatch: the body does not hash to ``part_sha256`` (nothing is marked received).
            NotFound: the upload has no staging directory (committed, aborted or expired).
        """
        if part_size <= 0 or file_size < 0:
            raise ValueError("part_size must be > 0 and file_size >= 0")
        count = part_count(file_size, part_size)
        if not 0 <= part < count:
            raise ValidationFailed(f"file {index} has parts 0..{count - 1}; there is no part {part}", field="part")
        if not is_sha256(part_sha256):
            raise ValidationFailed("must be 64 lower-case hex digits", field="part_sha256")
        length = min(part_size, file_size - part * part_size)
        directory = self._dir(upload_id)
        if count == 1:
            await self._write_whole(directory, upload_id, index, length, part_sha256, chunks)
        else:
            await self._write_shared(
                directory, upload_id, index, part, part_size, length, file_size, part_sha256, chunks
            )

    async def _write_whole(
        self, directory: Path, upload_id: int, index: int, length: int, sha: str, chunks: AsyncIterator[bytes]
    ) -> None:
        final = directory / f"{index}.{sha}.data"
        if final.exists():
            await _drain(chunks)
            return
        tmp = directory / f"{index}.{uuid.uuid4().hex}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, BLOB_MODE)  # the fd writes anyway
        except FileNotFoundError:
            raise _no_staging(upload_id) from None
        try:
            try:
                actual = await _receive(fd, 0, length, chunks, index, 0)
            finally:
                os.close(fd)
            _check_part_hash(index, 0, actual, sha)
            _rename_received(tmp, final, upload_id)
        finally:
            tmp.unlink(missing_ok=True)

    async def _write_shared(
        self,
        directory: Path,
        upload_id: int,
        index: int,
        part: int,
        part_size: int,
        length: int,
        file_size: int,
        sha: str,
        chunks: AsyncIterator[bytes],
    ) -> None:
        marker = directory / f"{index}.{part}.ok"
        if marker.exists():
            await _drain(chunks)
            return
        data = directory / f"{index}.data"
        try:
            fd = os.open(data, os.O_RDWR | os.O_CREAT, 0o600)
        except FileNotFoundError:
            raise _no_staging(upload_id) from None
        try:
            # Shared with other part writers, exclusive against finalize (which may hash a big file for seconds).
            await asyncio.to_thread(fcntl.flock, fd, fcntl.LOCK_SH)
            st = os.fstat(fd)
            if st.st_mode & 0o222 == 0 or marker.exists():
                await _drain(chunks)  # sealed by finalize (maybe already a blob) or received meanwhile
                return
            if st.st_size < file_size:
                os.ftruncate(fd, file_size)  # sparse; concurrent writers all extend to the same size
            running = RUNNING.get(data, part_size, file_size)
            try:
                actual = await _receive(fd, part * part_size, length, chunks, index, part)
                _check_part_hash(index, part, actual, sha)
            except BaseException:
                _taint(directory, index, running)  # bytes of this part may have changed after they were hashed
                raise
            try:
                os.close(os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            except FileExistsError:
                _taint(directory, index, running)  # a concurrent send of this part marked it while we wrote
                return
            except FileNotFoundError:
                raise _no_staging(upload_id) from None
            running.received(part)
            _in_background(running.advance)
        finally:
            os.close(fd)

    async def write_bundle(
        self, upload_id: int, files: Mapping[int, tuple[int, str | None]], chunks: AsyncIterator[bytes]
    ) -> list[int]:
        """Receive a bundle of whole files (format in ``aicenter.storage.bundle``) and return the indices received.

        Each file must be in ``files`` (index -> (size, declared sha256 or None)) with that size, else
        ValidationFailed; a declared hash must match, else HashMismatch naming the index. Files before a bad one stay
        received; the file being read when the stream broke or failed leaves nothing behind.
        """
        directory = self._dir(upload_id)
        if not directory.is_dir():
            raise _no_staging(upload_id)

        def commit(index: int, sha: str, tmp: Path) -> None:
            _rename_received(tmp, directory / f"{index}.{sha}.data", upload_id)

        listing: _Listing | None = None

        def received(index: int) -> bool:
            # A declared hash names the receipt: one stat. A listing of a directory that grows to 10,000 names
            # per bundle made a 10,000-file push quadratic (0.4 s of 8 s); it is read only for undeclared hashes.
            declared = files[index][1]
            if declared is not None:
                return os.path.exists(directory / f"{index}.{declared}.data")
            nonlocal listing
            if listing is None:
                listing = _scan(directory)
            return index in listing.whole

        writer = BundleWriter(
            files,
            done=received,
            tmp_path=lambda index: directory / f"{index}.{uuid.uuid4().hex}.tmp",
            commit=commit,
        )

        def feed(batch: list[bytes]) -> None:
            for chunk in batch:
                writer.feed(chunk)

        inflight: asyncio.Future[None] | None = None
        try:
            # One batch is written in a worker thread while the next one arrives (the socket is not paused).
            async with contextlib.aclosing(_batches(chunks)) as batches:
                async for batch in batches:
                    if inflight is not None:
                        await inflight
                    inflight = asyncio.ensure_future(asyncio.to_thread(feed, batch))
            if inflight is not None:
                await inflight
            return writer.close()
        finally:
            await _settle(inflight)
            writer.abort()

    # -- finalizing ----------------------------------------------------------------------------------------------
    def finalize(
        self, upload_id: int, files: Sequence[tuple[int, int, str | None]], *, part_size: int
    ) -> dict[int, str]:
        """Put every file of the upload into the store; return index -> sha256. Synchronous: run it in a thread.

        Args:
            files: (index, size, declared sha256 or None) of each file to store.
            part_size: the upload's part size.

        Raises:
            UploadIncomplete: files with parts not received; ``details["missing"]`` is
                ``[{"index": i, "parts": [...]}, ...]``. Nothing is stored.
            HashMismatch: a file does not hash to its declared sha256 (``details["index"]``); its staged bytes are
                dropped so that it shows as missing and can be sent again.

        Idempotent, and safe to re-run after a crash at any point: a second call answers the same.
        """
        directory = self._dir(upload_id)
        if not directory.is_dir():
            raise _no_staging(upload_id)
        listing = _scan(directory)
        missing = []
        for index, size, _ in files:
            if index in listing.whole:
                continue
            count = part_count(size, part_size)
            lacking = sorted(set(range(count)) - listing.parts.get(index, set())) if count > 1 else [0]
            if lacking:
                missing.append({"index": index, "parts": lacking})
        if missing:
            raise UploadIncomplete(
                f"{len(missing)} of {len(files)} files have parts that were not received; send them, then commit again",
                details={"missing": missing},
            )
        result: dict[int, str] = {}
        whole = [(index, size, declared) for index, size, declared in files if index in listing.whole]
        if len(whole) >= LINK_PARALLEL_MIN:
            # Linking a new blob mostly creates its blobs/ab/cd directory (~180 us a file on ext4, kernel time that
            # threads overlap: 10,000 files took 0.9 s serially and 0.6 s on 4 threads).
            with ThreadPoolExecutor(LINK_WORKERS, thread_name_prefix="aicenter-finalize") as pool:
                shas = pool.map(lambda w: self._finalize_whole(directory, w[0], w[1], w[2], listing), whole)
                result.update(zip((w[0] for w in whole), shas, strict=True))
        else:
            for index, size, declared in whole:
                result[index] = self._finalize_whole(directory, index, size, declared, listing)
        for index, size, declared in files:
            if index not in listing.whole:
                result[index] = self._finalize_parts(
                    directory, index, size, declared, listing.done.get(index), part_size
                )
        return result

    def _finalize_whole(self, directory: Path, index: int, size: int, declared: str | None, listing: _Listing) -> str:
        hashes = listing.whole[index]
        if declared is not None and declared not in hashes:
            for sha in hashes:
                (directory / f"{index}.{sha}.data").unlink(missing_ok=True)
            raise HashMismatch(
                f"file {index} hashes to {hashes[0]}, not the declared {declared}; send it again",
                details={"index": index, "expected": declared, "actual": hashes[0]},
            )
        sha = declared if declared is not None else listing.done.get(index, hashes[0])
        if len(hashes) > 1 and listing.done.get(index) != sha:
            # Contradictory resends left two versions: record the choice so data_path agrees with it.
            os.close(os.open(directory / f"{index}.{sha}.done", os.O_WRONLY | os.O_CREAT, 0o600))
        self._link_in(directory / f"{index}.{sha}.data", sha, size, index)
        return sha

    def _finalize_parts(
        self, directory: Path, index: int, size: int, declared: str | None, done: str | None, part_size: int
    ) -> str:
        data = directory / f"{index}.data"
        try:
            fd = os.open(data, os.O_RDONLY)
        except FileNotFoundError:  # markers without their data: the staging area was damaged
            self._reset_parts(directory, index)
            raise UploadIncomplete(
                f"the received parts of file {index} are lost; send the file again",
                details={"missing": [{"index": index, "parts": list(range(part_count(size, part_size)))}]},
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # waits for part writers still inside write_part
            if done is None:
                sha, actual_size = self._whole_hash(directory, index, data, fd, part_size)
                if actual_size != size or (declared is not None and sha != declared):
                    self._reset_parts(directory, index)
                    raise HashMismatch(
                        f"file {index} ({actual_size} bytes) hashes to {sha}, not the declared {declared} "
                        f"({size} bytes); send it again",
                        details={"index": index, "expected": declared, "actual": sha},
                    )
                os.fchmod(fd, BLOB_MODE)  # sealed: no part writer writes into it from now on
                os.close(os.open(directory / f"{index}.{sha}.done", os.O_WRONLY | os.O_CREAT, 0o600))
            else:
                sha = done
                if declared is not None and sha != declared:
                    raise HashMismatch(
                        f"file {index} hashes to {sha}, not the declared {declared}",
                        details={"index": index, "expected": declared, "actual": sha},
                    )
                os.fchmod(fd, BLOB_MODE)
            self._link_in(data, sha, size, index)
        finally:
            os.close(fd)
        return sha

    @staticmethod
    def _whole_hash(directory: Path, index: int, data: Path, fd: int, part_size: int) -> tuple[str, int]:
        """sha256 and size of a multi-part file: from its running hash when it is intact, else read in full."""
        running = RUNNING.pop(data)
        size = os.fstat(fd).st_size
        if (
            running is not None
            and running.part_size == part_size
            and running.file_size == size
            and not (directory / f"{index}.taint").exists()
            and (sha := running.finish(fd)) is not None
        ):
            return sha, size
        return hash_file(data)

    def _reset_parts(self, directory: Path, index: int) -> None:
        for name in os.listdir(directory):
            if name.startswith(f"{index}.") and name.endswith(".ok"):
                (directory / name).unlink(missing_ok=True)
        RUNNING.pop(directory / f"{index}.data")
        (directory / f"{index}.data").unlink(missing_ok=True)
        (directory / f"{index}.taint").unlink(missing_ok=True)

    def _link_in(self, src: Path, sha: str, size: int, index: int) -> None:
        """Hard-link a verified staged file into the store (a no-op when the blob is there already)."""
        st = os.stat(src)
        if st.st_size != size:
            raise HashMismatch(
                f"file {index} has {st.st_size} bytes; the upload declares {size}",
                details={"index": index, "expected_size": size, "actual_size": st.st_size},
            )
        if st.st_mode & 0o7777 != BLOB_MODE:
            os.chmod(src, BLOB_MODE)
        if time.time() - st.st_mtime > FRESH_S:
            os.utime(src)  # before the link: a blob never appears with an mtime old enough for GC to take it
        self.store.link_in(src, sha)


def _no_staging(upload_id: int) -> NotFound:
    return NotFound(f"upload {upload_id} has no staged files: it was committed, aborted or expired")


def _check_part_hash(index: int, part: int, actual: str, declared: str) -> None:
    if actual != declared:
        raise HashMismatch(
            f"part {part} of file {index} hashes to {actual}, not the declared {declared}; send it again",
            details={"index": index, "part": part, "expected": declared, "actual": actual},
        )


def _taint(directory: Path, index: int, running: RunningHash) -> None:
    running.invalidate()
    with contextlib.suppress(FileNotFoundError):  # the upload is gone: nothing to protect
        os.close(os.open(directory / f"{index}.taint", os.O_WRONLY | os.O_CREAT, 0o600))


def _in_background(work: Callable[[], None]) -> None:
    future = asyncio.get_running_loop().run_in_executor(None, work)
    _BACKGROUND.add(future)
    future.add_done_callback(_background_done)


def _background_done(future: asyncio.Future[None]) -> None:
    _BACKGROUND.discard(future)
    if not future.cancelled() and (exc := future.exception()) is not None:
        log.error("running hash catch-up failed", exc_info=exc)


async def _settle(future: asyncio.Future[None] | None) -> None:
    """Wait for a worker thread's write to end, even when cancelled: its descriptor must not close under it."""
    if future is None:
        return
    cancelled = False
    while not future.done():
        try:
            await asyncio.wait({future})
        except asyncio.CancelledError:
            cancelled = True
    if not future.cancelled():
        future.exception()  # retrieved: the caller is already raising its own error
    if cancelled:
        raise asyncio.CancelledError


async def _batches(chunks: AsyncIterator[bytes]) -> AsyncGenerator[list[bytes]]:
    """``chunks`` gathered into lists of >= WRITE_SIZE bytes (<= MAX_BATCH_CHUNKS chunks); the last may be less."""
    pending: list[bytes] = []
    pending_len = 0
    async for chunk in chunks:
        pending.append(chunk)
        pending_len += len(chunk)
        if pending_len >= WRITE_SIZE or len(pending) >= MAX_BATCH_CHUNKS:
            yield pending
            pending, pending_len = [], 0
    if pending:
        yield pending


def _rename_received(tmp: Path, final: Path, upload_id: int) -> None:
    try:
        os.rename(tmp, final)
    except FileNotFoundError:
        raise _no_staging(upload_id) from None


async def _receive(fd: int, offset: int, length: int, chunks: AsyncIterator[bytes], index: int, part: int) -> str:
    """Write exactly ``length`` bytes from ``chunks`` at ``offset``; return their sha256.

    Chunks are gathered into batches of about 1 MiB; each batch is hashed and written (``pwritev``: no join copy)
    in a worker thread (sha256 and pwrite release the GIL) *while the next batch arrives*: awaiting each write
    before reading on paused the socket for as long as the hash took, about half of a part's time.
    """
    h = hashlib.sha256()
    received = 0
    inflight: asyncio.Future[None] | None = None
    try:
        async with contextlib.aclosing(_batches(chunks)) as batches:
            async for batch in batches:
                size = sum(len(c) for c in batch)
                received += size
                if received > length:
                    raise ValidationFailed(
                        f"part {part} of file {index} must be {length} bytes; more arrived", details={"index": index}
                    )
                if inflight is not None:
                    await inflight
                inflight = asyncio.ensure_future(asyncio.to_thread(_hash_and_write, fd, h, batch, offset))
                offset += size
        if inflight is not None:
            await inflight
    finally:
        await _settle(inflight)
    if received != length:
        raise ValidationFailed(
            f"part {part} of file {index} must be {length} bytes; {received} arrived", details={"index": index}
        )
    return h.hexdigest()


def _hash_and_write(fd: int, h: hashlib._Hash, batch: list[bytes], offset: int) -> None:
    views = [memoryview(c) for c in batch if c]
    for view in views:
        h.update(view)
    while views:
        written = os.pwritev(fd, views, offset)
        offset += written
        while views and written >= len(views[0]):  # a short write (rare on regular files) resumes mid-buffer
            written -= len(views[0])
            views.pop(0)
        if views and written:
            views[0] = views[0][written:]
