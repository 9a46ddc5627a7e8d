"""Pull: a version's files into a directory, small ones as tar batches, big ones with ``Range`` resume, all verified."""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path, PurePosixPath
from typing import IO, Any

from aicenter.client._catalog import CHUNK, CatalogMixin, collection, file_url
from aicenter.client.models import FileInfo, Version
from aicenter.client.transfer._common import Meter, Progress, PullReport, TransferError
from aicenter.client.transfer._files import sha256_file
from aicenter.client.transfer._parallel import bounded_map
from aicenter.client.transfer._retry import attempts

__all__ = ["PullMixin", "safe_target"]

LARGE_DOWNLOAD = 8 << 20  # files at least this big are pulled alone, with Range resume
# Paths per archive request, and requests at once: the server reads blobs and writes tar headers for one batch while
# this side extracts another (~5 syscalls and a hash per file); 500-file batches keep 3 streams busy.
ARCHIVE_BATCH_FILES = 500
ARCHIVE_BATCH_BYTES = 64 << 20
ARCHIVE_WORKERS = 3
PART_SUFFIX = ".aicenter-part"


class PullMixin(CatalogMixin):
    def pull(self, kind: str, ref: str, dest: str | Path, *, progress: Progress | None = None) -> PullReport:
        """Download a version into ``dest``, keeping files already there with the same size and sha256.

        Every file is written to ``<path>.aicenter-part``, checked against its sha256 and then renamed; an
        interrupted download of a big file resumes from its ``.aicenter-part``.

        Args:
            kind: The item kind.
            ref: ``name:3``, ``name``, ``owner/name:3``, ``preset/name:3`` or ``#<version id>``.
            dest: The directory to write into (created if missing).
            progress: ``progress(done_bytes, total_bytes, done_files, total_files)``.

        Raises:
            TransferError: ``unsafe_archive`` when the server names a path outside ``dest``, ``hash_mismatch``
                when a file's bytes do not match its hash.
        """
        version = self.resolve(kind, ref)
        files = list(self.list_files(kind, version.item_id, version.number))
        root = Path(dest).absolute()
        root.mkdir(parents=True, exist_ok=True)
        root = root.resolve()
        checked: set[Path] = set()
        targets = {f.path: safe_target(root, f.path, checked) for f in files}
        meter = Meter(progress, sum(f.size for f in files), len(files))
        todo: list[FileInfo] = []
        skipped_bytes = 0
        for f in files:
            if _present(targets[f.path], f):
                skipped_bytes += f.size
                meter.add(f.size, 1)
            else:
                todo.append(f)
        small = [f for f in todo if f.size < LARGE_DOWNLOAD]
        bounded_map(
            partial(self._fetch_archive, kind, version, targets=targets),
            _batches(small),
            workers=ARCHIVE_WORKERS,
            on_result=lambda batch, _: meter.add(sum(f.size for f in batch), len(batch)),
            name="aicenter-pull",
        )
        for f in todo:
            if f.size >= LARGE_DOWNLOAD:
                self._fetch_large(kind, version, f, targets[f.path], meter)
        return PullReport(
            version=version,
            downloaded_files=len(todo),
            downloaded_bytes=sum(f.size for f in todo),
            skipped_files=len(files) - len(todo),
            skipped_bytes=skipped_bytes,
        )

    def _fetch_archive(
        self, kind: str, version: Version, batch: Sequence[FileInfo], *, targets: Mapping[str, Path]
    ) -> None:
        """Fetch and write one batch of small files (in a worker thread)."""
        wanted = {f.path: f for f in batch}
        made: set[Path] = set()
        url = f"{collection(kind)}/{version.item_id}/versions/{version.number}/archive"
        with self._stream("POST", url, json={"paths": [f.path for f in batch]}) as response:
            reader = io.BufferedReader(_IterReader(response.iter_bytes(CHUNK)), CHUNK)
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                for member in tar:
                    if member.isdir():
                        continue
                    name = member.name.removeprefix("./")
                    f = wanted.pop(name, None)
                    if f is None or not member.isfile():
                        raise TransferError(
                            "unsafe_archive", f"the server's archive holds an unexpected entry {member.name!r}"
                        )
                    src = tar.extractfile(member)
                    assert src is not None  # a regular file always has a reader
                    _write_verified(src, f, targets[f.path], made)
        if wanted:
            example = next(iter(wanted))
            raise TransferError("upload_incomplete", f"the server's archive lacks {len(wanted)} files, e.g. {example}")

    def _fetch_large(self, kind: str, version: Version, f: FileInfo, target: Path, meter: Meter) -> None:
        part = target.with_name(target.name + PART_SUFFIX)
        target.parent.mkdir(parents=True, exist_ok=True)
        url = file_url(kind, version.item_id, version.number, f.path)
        base = meter.bytes
        digest: hashlib._Hash | None = None  # hashed while written; None: read the part file back
        for attempt in attempts():
            with attempt:
                meter.bytes = base  # a retry counts again what the part file holds
                digest = None
                offset = part.stat().st_size if part.exists() else 0
                if offset > f.size:
                    part.unlink()
                    offset = 0
                if offset < f.size:
                    headers = {"Range": f"bytes={offset}-"} if offset else {}
                    with self._stream("GET", url, headers=headers) as response:
                        append = offset > 0 and response.status_code == 206
                        meter.add(offset if append else 0)
                        with open(part, "ab" if append else "wb") as fh:
                            digest = hashlib.sha256()
                            if append:  # resumed: the bytes already there first
                                digest.update(_read_all(part, offset))
                            _write_hashed(response.iter_bytes(CHUNK), fh, digest, meter)
                else:
                    meter.add(offset)
        actual = digest.hexdigest() if digest is not None else sha256_file(part)
        if actual != f.sha256 or part.stat().st_size != f.size:
            part.unlink()
            raise TransferError("hash_mismatch", f"{f.path}: the downloaded bytes do not match its sha256; pull again")
        os.chmod(part, f.mode & 0o777)
        os.replace(part, target)
        meter.add(0, 1)


def safe_target(root: Path, path: str, checked: set[Path] | None = None) -> Path:
    """``root / path`` after checking that the server's path stays inside ``root`` (never trust it blindly).

    ``checked`` remembers parent directories already resolved: a pull of 10,000 files in 100 directories
    resolves 100 paths, not 10,000.
    """
    pure = PurePosixPath(path)
    if (
        not path
        or pure.is_absolute()
        or "\\" in path
        or "\x00" in path
        or any(part in ("", ".", "..") for part in path.split("/"))
    ):
        raise TransferError("unsafe_archive", f"the server named an unsafe path {path!r}; nothing was written there")
    target = root.joinpath(*pure.parts)
    parent = target.parent
    if checked is not None and parent in checked:
        return target
    if not parent.resolve().is_relative_to(root):
        raise TransferError("unsafe_archive", f"{path!r} leads outside {root} (through a symbolic link)")
    if checked is not None:  # later only this pull creates directories under it, and only real ones
        checked.add(parent)
    return target


class _IterReader(io.RawIOBase):
    """A file object over an iterator of byte chunks, for ``tarfile.open(mode="r|")``."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._buf = b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._buf = chunk
        n = min(len(b), len(self._buf))
        b[:n] = self._buf[:n]
        self._buf = self._buf[n:]
        return n


def _present(target: Path, f: FileInfo) -> bool:
    try:
        st = target.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(st.st_mode) and st.st_size == f.size and sha256_file(target) == f.sha256


def _batches(files: Sequence[FileInfo]) -> Iterator[list[FileInfo]]:
    batch: list[FileInfo] = []
    size = 0
    for f in files:
        batch.append(f)
        size += f.size
        if len(batch) >= ARCHIVE_BATCH_FILES or size >= ARCHIVE_BATCH_BYTES:
            yield batch
            batch, size = [], 0
    if batch:
        yield batch


def _read_all(path: Path, length: int) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(length)


def _hash_and_write(fh: IO[bytes], digest: hashlib._Hash, chunk: bytes) -> None:
    digest.update(chunk)
    fh.write(chunk)


def _write_hashed(chunks: Iterator[bytes], fh: IO[bytes], digest: hashlib._Hash, meter: Meter) -> None:
    """Hash and write ``chunks`` in a worker thread while the next chunk is received (two cores instead of one).

    A pipeline of one stage, not a map: chunks must be written in order, one at a time.
    """
    with ThreadPoolExecutor(1, thread_name_prefix="aicenter-pull") as pool:
        inflight: Future[None] | None = None
        try:
            for chunk in chunks:
                if inflight is not None:
                    inflight.result()
                inflight = pool.submit(_hash_and_write, fh, digest, chunk)
                meter.add(len(chunk))
        finally:
            if inflight is not None:
                inflight.result()


def _write_verified(src: IO[bytes], f: FileInfo, target: Path, made: set[Path]) -> None:
    """Copy ``src`` to ``<target>.aicenter-part``, check size and sha256, then give it its name and mode."""
    if target.parent not in made:
        target.parent.mkdir(parents=True, exist_ok=True)
        made.add(target.parent)
    part = target.with_name(target.name + PART_SUFFIX)
    digest = hashlib.sha256()
    written = 0
    with open(part, "wb") as fh:
        while chunk := src.read(CHUNK):
            digest.update(chunk)
            fh.write(chunk)
            written += len(chunk)
        if written != f.size or digest.hexdigest() != f.sha256:
            fh.close()
            part.unlink()
            raise TransferError("hash_mismatch", f"{f.path}: the downloaded bytes do not match its sha256; pull again")
        os.fchmod(fh.fileno(), f.mode & 0o777)
    os.replace(part, target)
