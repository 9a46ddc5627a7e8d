"""The local side of a push: walking the source, hashing files in threads, reading ranges, the resume file."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aicenter.client.transfer._common import TransferError
from aicenter.client.transfer._parallel import bounded_map

__all__ = ["LocalFile", "ResumeState", "file_range", "hash_files", "sha256_file", "sha256_range", "walk"]

READ_CHUNK = 1 << 20  # bytes read per system call while hashing
SEND_CHUNK = 1 << 20  # a part's body is read from the file this much at a time: flat client memory
HASH_WORKERS = 4  # files (or parts of a big file) hashed at once: both cores busy, and reads overlap hashing


@dataclass
class LocalFile:
    """One regular file of a push's source."""

    path: str  # relative POSIX path, as in the manifest
    abspath: Path
    size: int
    mtime_ns: int
    mode: int
    sha256: str = ""
    part_hashes: dict[int, str] = field(default_factory=dict)  # by part number, for files of several parts


_buffers = threading.local()


def _buffer() -> memoryview:
    """This thread's read buffer: allocating (and zeroing) 1 MiB per file cost ~1 s over 10,000 small files."""
    view: memoryview | None = getattr(_buffers, "view", None)
    if view is None:
        view = _buffers.view = memoryview(bytearray(READ_CHUNK))
    return view


def sha256_file(path: Path) -> str:
    """sha256 of the whole file."""
    return sha256_range(path, 0, None)


def sha256_range(path: Path, offset: int, length: int | None) -> str:
    """sha256 of ``length`` bytes of ``path`` from ``offset`` (None: to the end)."""
    digest = hashlib.sha256()
    view = _buffer()
    fd = os.open(path, os.O_RDONLY)
    try:
        while length is None or length > 0:
            n = os.preadv(fd, [view if length is None else view[: min(len(view), length)]], offset)
            if not n:
                break
            digest.update(view[:n])
            offset += n
            if length is not None:
                length -= n
    finally:
        os.close(fd)
    if length:
        raise TransferError("validation_failed", f"{path} shrank while it was being pushed")
    return digest.hexdigest()


def hash_files(files: Sequence[LocalFile], part_size: int) -> None:
    """Set ``sha256`` of each file, and ``part_hashes`` of files of more than one part, hashing in threads.

    A big file's parts are hashed beside its whole-file pass (a second core), so sending them later costs no
    hashing. Biggest files first, so that the last one to finish is a small one.
    """
    tasks: list[tuple[LocalFile, int | None]] = [(f, None) for f in sorted(files, key=lambda f: -f.size)]
    for f in files:
        if f.size > part_size:
            tasks.extend((f, n) for n in range(-(-f.size // part_size)))

    def digest(task: tuple[LocalFile, int | None]) -> str:
        f, n = task
        if n is None:
            return sha256_file(f.abspath)
        offset = n * part_size
        return sha256_range(f.abspath, offset, min(part_size, f.size - offset))

    for (f, n), sha in zip(tasks, bounded_map(digest, tasks, workers=HASH_WORKERS, name="aicenter-hash"), strict=True):
        if n is None:
            f.sha256 = sha
        else:
            f.part_hashes[n] = sha


def file_range(path: Path, offset: int, length: int) -> Iterator[bytes]:
    """The bytes ``offset .. offset + length`` of ``path``, read SEND_CHUNK at a time (a request body)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        while length > 0:
            data = os.pread(fd, min(SEND_CHUNK, length), offset)
            if not data:
                raise TransferError("validation_failed", f"{path} shrank while it was being pushed")
            offset += len(data)
            length -= len(data)
            yield data
    finally:
        os.close(fd)


def walk(source: Path) -> list[LocalFile]:
    """Every regular file under ``source`` (or ``source`` itself), sorted by path; symlinks and specials refused."""
    try:
        st = source.lstat()
    except FileNotFoundError:
        raise TransferError("not_found", f"{source} does not exist", field="source") from None
    if stat.S_ISLNK(st.st_mode):
        raise TransferError(
            "validation_failed", f"{source} is a symbolic link; push the files it points to", field="source"
        )
    if stat.S_ISREG(st.st_mode):
        return [LocalFile(source.name, source, st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode))]
    if not stat.S_ISDIR(st.st_mode):
        raise TransferError("validation_failed", f"{source} is not a regular file or directory", field="source")
    out: list[LocalFile] = []
    stack = [(source, "")]
    while stack:
        directory, prefix = stack.pop()
        with os.scandir(directory) as entries:
            for entry in entries:
                rel = f"{prefix}{entry.name}"
                if entry.is_symlink():
                    raise TransferError(
                        "validation_failed",
                        f"{entry.path} is a symbolic link: symlinks cannot be pushed (copy the target or remove it)",
                        field="source",
                    )
                if entry.is_dir(follow_symlinks=False):
                    stack.append((Path(entry.path), rel + "/"))
                elif entry.is_file(follow_symlinks=False):
                    est = entry.stat(follow_symlinks=False)
                    out.append(
                        LocalFile(rel, Path(entry.path), est.st_size, est.st_mtime_ns, stat.S_IMODE(est.st_mode))
                    )
                else:
                    raise TransferError(
                        "validation_failed",
                        f"{entry.path} is not a regular file (device, socket or fifo)",
                        field="source",
                    )
    out.sort(key=lambda f: f.path)
    return out


def home() -> Path:
    """``$AICENTER_HOME`` (default ``~/.aicenter``), where resume files live."""
    return Path(os.environ.get("AICENTER_HOME") or "~/.aicenter").expanduser()


class ResumeState:
    """The resume file of one push: upload id, the manifest it was opened with, and the hash cache."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.data: dict[str, Any] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            self.data = {}
        self.hashes: dict[str, list[Any]] = dict(self.data.get("hashes") or {})

    def hash_of(self, f: LocalFile) -> str | None:
        """The cached sha256 of ``f`` if its size and mtime are unchanged."""
        cached = self.hashes.get(f.path)
        if cached and cached[0] == f.size and cached[1] == f.mtime_ns:
            return str(cached[2])
        return None

    def save(self) -> None:
        """Write the file atomically (a crash leaves the old or the new one, never half of one)."""
        self.data["hashes"] = self.hashes
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)

    def delete(self) -> None:
        """Forget the push (it committed)."""
        self.path.unlink(missing_ok=True)
