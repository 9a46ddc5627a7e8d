"""Streaming a version (or some of its files) as an uncompressed POSIX tar, in bounded memory."""

from __future__ import annotations

import errno
import os
import tarfile
from collections.abc import Iterator, Sequence

from aicenter.storage.blobs import BlobStore
from aicenter.storage.gc import quarantine_damaged
from aicenter.storage.manifest import FileEntry

BLOCK = tarfile.BLOCKSIZE  # 512
RECORD = tarfile.RECORDSIZE  # 10240: GNU tar and tarfile pad the archive to whole records


def tar_header(entry: FileEntry) -> bytes:
    """The header block(s) of one regular file: ustar, plus a pax header for long or non-ASCII names and sizes
    of 8 GiB and more. mtime, uid and gid are 0 so the same files always give the same bytes."""
    info = tarfile.TarInfo(entry.path)
    info.size = entry.size
    info.mode = entry.mode
    info.mtime = 0
    info.type = tarfile.REGTYPE
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")


def tar_size(entries: Sequence[FileEntry]) -> int:
    """Length in bytes of ``iter_tar(entries)`` (for a Content-Length), without reading a blob."""
    total = 0
    for e in entries:
        total += len(tar_header(e)) + -(-e.size // BLOCK) * BLOCK
    total += 2 * BLOCK
    return -(-total // RECORD) * RECORD


def iter_tar(store: BlobStore, entries: Sequence[FileEntry], *, chunk: int = 1 << 20) -> Iterator[bytes]:
    """Yield a tar of ``entries`` (in the given order) in pieces of at most ``chunk`` bytes.

    Memory stays at about one ``chunk`` whatever the file sizes: blobs are read ``chunk`` at a time, small files
    and headers are gathered into one piece. Directories are implied by the paths (tar creates them).

    Raises:
        FileNotFoundError: a blob is not stored (the stream breaks off; fsck reports such blobs).
        OSError: a blob has another length than its manifest entry says (it is quarantined first).
    """
    buf = bytearray()
    total = 0
    for entry in entries:
        buf += tar_header(entry)
        if len(buf) >= chunk:  # else the read below asks for chunk - len(buf) <= 0 bytes
            total += len(buf)
            yield bytes(buf)
            buf.clear()
        with store.open(entry.sha256) as f:
            if (stored := os.fstat(f.fileno()).st_size) != entry.size:
                # Damaged (written through a hard link, say): quarantined as fsck --repair would, and the stream
                # breaks off here rather than carry other bytes under this entry's name.
                quarantine_damaged(store, entry.sha256, f"{stored} bytes where its manifest says {entry.size}")
                raise OSError(errno.EIO, f"blob {entry.sha256} of {entry.path} is damaged and was quarantined")
            left = entry.size
            while left:
                data = f.read(min(chunk - len(buf), left) if buf else min(chunk, left))
                if not data:
                    raise OSError(errno.EIO, f"blob {entry.sha256} of {entry.path} is shorter than {entry.size} bytes")
                left -= len(data)
                if buf:
                    buf += data
                elif len(data) == chunk:
                    total += len(data)
                    yield data
                    continue
                else:
                    buf += data
                if len(buf) >= chunk:
                    total += len(buf)
                    yield bytes(buf)
                    buf.clear()
        buf += bytes(-entry.size % BLOCK)
        if len(buf) >= chunk:
            total += len(buf)
            yield bytes(buf)
            buf.clear()
    buf += bytes(2 * BLOCK)
    buf += bytes(-(total + len(buf)) % RECORD)
    for start in range(0, len(buf), chunk):
        yield bytes(buf[start : start + chunk])
