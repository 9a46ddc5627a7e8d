"""Expanding an uploaded archive (tar, tar.gz, zip) into the store, refusing anything unsafe.

Two passes. The first reads headers only and refuses links, devices, fifos, unsafe or duplicate paths, too many
entries and a declared size over the limit or over what the caller's check allows (the workspace's remaining
storage quota), before a byte is written. The second streams every regular file into
a private directory of the store's tmp area, hashing and counting real bytes (a header that lies about a size still
stops at the limit), and only when every entry passed are the files moved into the store: a refused archive leaves
no blob behind, and no blob another upload relies on is ever deleted by a refusal.
"""

from __future__ import annotations

import contextlib
import gzip
import hashlib
import shutil
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, cast

from aicenter.core.errors import UnsafeArchive, ValidationFailed
from aicenter.storage.blobs import READ_SIZE, BlobStore
from aicenter.storage.manifest import FileEntry, check_manifest
from aicenter.storage.paths import path_problem

FORMATS = ("tar", "tar.gz", "zip")
# tarfile reads a pax or GNU long-name header in one read of its declared size; a gzip bomb could declare
# gigabytes. No legitimate header comes near this, and our own data reads are READ_SIZE.
_MAX_SINGLE_READ = 16 << 20
_READ_ERRORS = (tarfile.TarError, zipfile.BadZipFile, zlib.error, EOFError, gzip.BadGzipFile, NotImplementedError)


@dataclass(frozen=True, slots=True)
class _Planned:
    path: str
    size: int
    mode: int


def expand_archive(
    path: Path,
    fmt: str,
    store: BlobStore,
    *,
    max_bytes: int,
    max_entries: int,
    check_declared: Callable[[int], None] | None = None,
    created: set[str] | None = None,
) -> list[FileEntry]:
    """Store every regular file of the archive at ``path``; return the manifest (``check_manifest`` order).

    Args:
        fmt: ``tar``, ``tar.gz`` or ``zip`` (tar and tar.gz are told apart by their content, either name works).
        max_bytes: the most bytes the files may expand to (declared and actually written).
        max_entries: the most entries (files and directories) the archive may hold.
        check_declared: called with the running total of the sizes the headers declare, at every file entry of
            the first pass, before a byte is written (a storage quota); whatever it raises ends the expansion with
            nothing written.
        created: receives the sha256 of every blob this call adds to the store (not those it found stored), so
            that a caller whose commit then fails can delete them at once.

    Raises:
        UnsafeArchive: naming the entry, for a symlink, hard link, device, fifo, unsafe or duplicate path, a file
            that is also a directory, more than ``max_entries`` entries, or more than ``max_bytes`` bytes.
        ValidationFailed: an unknown format or an archive that cannot be read (field ``archive``).
    """
    if fmt not in FORMATS:
        raise ValidationFailed(f"unknown archive format {fmt!r}; use one of {', '.join(FORMATS)}", field="archive")
    work = store.tmp_path("archive-")
    try:
        expand = _expand_zip if fmt == "zip" else _expand_tar
        staged = expand(path, work, max_bytes=max_bytes, max_entries=max_entries, check_declared=check_declared)
        entries = []
        for planned, tmp, sha in staged:
            if store.refresh(sha) is None:
                store.adopt(tmp, sha, planned.size)
                if created is not None:
                    created.add(sha)
            entries.append(FileEntry(planned.path, planned.size, sha, planned.mode))
        return check_manifest(entries)
    except _READ_ERRORS as e:
        raise ValidationFailed(f"cannot read the {fmt} archive: {e}", field="archive") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- checks shared by the formats ------------------------------------------------------------------------------
class _Plan:
    """Pass one: what the headers declare, checked entry by entry."""

    def __init__(self, *, max_bytes: int, max_entries: int, check_declared: Callable[[int], None] | None) -> None:
        self.max_bytes = max_bytes
        self.max_entries = max_entries
        self.check_declared = check_declared
        self.files: list[_Planned] = []
        self._paths: set[str] = set()
        self._dirs: set[str] = set()
        self._entries = 0
        self._total = 0

    def count(self) -> None:
        self._entries += 1
        if self._entries > self.max_entries:
            raise UnsafeArchive(
                f"the archive has more than {self.max_entries} entries", details={"limit": self.max_entries}
            )

    def add_dir(self, name: str) -> None:
        path = _entry_path(name, is_dir=True)
        if path:
            self._dirs.add(path)

    def add_file(self, name: str, size: int, mode: int) -> None:
        path = _entry_path(name, is_dir=False)
        if not path:
            raise UnsafeArchive(f'archive entry "{name}" is a file without a name', details={"entry": name})
        if path in self._paths:
            raise UnsafeArchive(f'archive entry "{name}" is a duplicate of an earlier entry', details={"entry": name})
        self._paths.add(path)
        self._total += size
        if self._total > self.max_bytes:
            raise UnsafeArchive(
                f'the archive expands to more than {self.max_bytes} bytes (at entry "{name}")',
                details={"entry": name, "limit": self.max_bytes},
            )
        if self.check_declared is not None:
            # At every entry, not once at the end: a header declaring a terabyte is refused without reading on.
            self.check_declared(self._total)
        self.files.append(_Planned(path, size, mode & 0o777))

    def finish(self) -> list[_Planned]:
        """Refuse a path that is a file and also a directory (explicit, or the parent of another file)."""
        for d in sorted(self._dirs & self._paths):
            raise UnsafeArchive(f'archive entry "{d}" is both a file and a directory', details={"entry": d})
        checked: set[str] = set()
        for planned in self.files:
            end = planned.path.rfind("/")
            while end > 0:
                parent = planned.path[:end]
                if parent in checked:
                    break
                checked.add(parent)
                if parent in self._paths:
                    raise UnsafeArchive(
                        f'archive entry "{planned.path}" is inside "{parent}", which is a file',
                        details={"entry": planned.path},
                    )
                end = planned.path.rfind("/", 0, end)
        return self.files


def _entry_path(name: str, *, is_dir: bool) -> str:
    """The version path of an entry name ("" for the archive root), or UnsafeArchive naming the entry."""
    path = name
    while path.startswith("./"):
        path = path[2:]
    if is_dir:
        path = path.rstrip("/")
    if path in ("", "."):
        return ""
    problem = path_problem(path)
    if problem is not None:
        raise UnsafeArchive(f'archive entry "{name[:200]}" has an unsafe path: {problem}', details={"entry": name})
    return path


def _refuse_type(name: str, what: str) -> UnsafeArchive:
    return UnsafeArchive(
        f'archive entry "{name[:200]}" is a {what}; only files and directories are accepted',
        details={"entry": name, "type": what},
    )


class _Writer:
    """Pass two: stream entries into ``work``, counting real bytes against the plan and the limit."""

    def __init__(self, work: Path, max_bytes: int) -> None:
        work.mkdir()
        self.work = work
        self.max_bytes = max_bytes
        self.total = 0
        self.staged: list[tuple[_Planned, Path, str]] = []

    def write(self, planned: _Planned, src: IO[bytes]) -> None:
        tmp = self.work / str(len(self.staged))
        h = hashlib.sha256()
        written = 0
        with open(tmp, "wb") as out:
            while chunk := src.read(READ_SIZE):
                written += len(chunk)
                self.total += len(chunk)
                if written > planned.size or self.total > self.max_bytes:
                    raise UnsafeArchive(
                        f'archive entry "{planned.path}" holds more bytes than its header declares'
                        if written > planned.size
                        else f'the archive expands to more than {self.max_bytes} bytes (at entry "{planned.path}")',
                        details={"entry": planned.path},
                    )
                h.update(chunk)
                out.write(chunk)
        if written != planned.size:
            raise UnsafeArchive(
                f'archive entry "{planned.path}" holds {written} bytes; its header declares {planned.size}',
                details={"entry": planned.path},
            )
        self.staged.append((planned, tmp, h.hexdigest()))


# -- tar ---------------------------------------------------------------------------------------------------------
class _BoundedReader:
    """A file wrapper that refuses one read larger than _MAX_SINGLE_READ (see there)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw

    def read(self, size: int = -1) -> bytes:
        if size < 0 or size > _MAX_SINGLE_READ:
            raise UnsafeArchive("the archive has a header larger than 16 MiB")
        return self._raw.read(size)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self._raw.seek(offset, whence)

    def tell(self) -> int:
        return self._raw.tell()


@contextlib.contextmanager
def _open_tar(path: Path) -> Iterator[tarfile.TarFile]:
    with open(path, "rb") as raw:
        compressed = raw.read(2) == b"\x1f\x8b"
        raw.seek(0)
        with contextlib.ExitStack() as stack:
            source = cast(IO[bytes], stack.enter_context(gzip.GzipFile(fileobj=raw, mode="rb"))) if compressed else raw
            with tarfile.open(fileobj=_BoundedReader(source), mode="r:") as tf:  # type: ignore[call-overload]
                yield tf


def _members(tf: tarfile.TarFile) -> Iterator[tarfile.TarInfo]:
    while (member := tf.next()) is not None:
        # TarFile keeps every member it read (an attribute typeshed omits): a million entries would hold ~0.5 GB.
        cast(Any, tf).members.clear()
        yield member


def _expand_tar(
    path: Path, work: Path, *, max_bytes: int, max_entries: int, check_declared: Callable[[int], None] | None
) -> list[tuple[_Planned, Path, str]]:
    plan = _Plan(max_bytes=max_bytes, max_entries=max_entries, check_declared=check_declared)
    with _open_tar(path) as tf:
        for member in _members(tf):
            plan.count()
            if member.isreg():
                plan.add_file(member.name, member.size, member.mode)
            elif member.isdir():
                plan.add_dir(member.name)
            else:
                raise _refuse_type(member.name, _tar_type_name(member))
    files = plan.finish()
    writer = _Writer(work, max_bytes)
    position = 0
    with _open_tar(path) as tf:
        for member in _members(tf):
            if not member.isreg():
                continue
            planned = files[position] if position < len(files) else None
            if planned is None or _entry_path(member.name, is_dir=False) != planned.path:
                raise UnsafeArchive("the archive changed while it was being expanded")
            src = tf.extractfile(member)
            assert src is not None  # a regular member always has a file object
            with src:
                writer.write(planned, src)
            position += 1
    if position != len(files):
        raise UnsafeArchive("the archive changed while it was being expanded")
    return writer.staged


def _tar_type_name(member: tarfile.TarInfo) -> str:
    if member.issym():
        return "symbolic link"
    if member.islnk():
        return "hard link"
    if member.ischr() or member.isblk():
        return "device"
    if member.isfifo():
        return "fifo"
    return f"entry of unsupported type {member.type!r}"


# -- zip ---------------------------------------------------------------------------------------------------------
def _expand_zip(
    path: Path, work: Path, *, max_bytes: int, max_entries: int, check_declared: Callable[[int], None] | None
) -> list[tuple[_Planned, Path, str]]:
    plan = _Plan(max_bytes=max_bytes, max_entries=max_entries, check_declared=check_declared)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        planned_infos: list[zipfile.ZipInfo] = []
        for info in infos:
            plan.count()
            # Unix zips keep st_mode in the high 16 bits of external_attr; others have no file type there.
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            kind = stat.S_IFMT(mode)
            if info.is_dir() or kind == stat.S_IFDIR:
                plan.add_dir(info.filename)
                continue
            if kind == stat.S_IFLNK:
                raise _refuse_type(info.filename, "symbolic link")
            if kind in (stat.S_IFCHR, stat.S_IFBLK):
                raise _refuse_type(info.filename, "device")
            if kind == stat.S_IFIFO:
                raise _refuse_type(info.filename, "fifo")
            if kind not in (0, stat.S_IFREG):
                raise _refuse_type(info.filename, f"entry of unsupported type {kind:o}")
            if info.flag_bits & 0x1:
                raise ValidationFailed(f'archive entry "{info.filename}" is encrypted', field="archive")
            plan.add_file(info.filename, info.file_size, (mode & 0o777) or 0o644)
            planned_infos.append(info)
        files = plan.finish()
        writer = _Writer(work, max_bytes)
        for planned, info in zip(files, planned_infos, strict=True):
            try:
                with zf.open(info) as src:
                    writer.write(planned, src)
            except (zipfile.BadZipFile, zlib.error, EOFError) as e:
                # Lying sizes end in a CRC or length error once zipfile stops at the declared size.
                raise UnsafeArchive(
                    f'archive entry "{planned.path}" does not match its header: {e}', details={"entry": planned.path}
                ) from e
    return writer.staged
