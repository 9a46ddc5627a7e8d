"""Incremental parser and writer of upload bundles: many small files back to back in one request body.

The wire format (a 48-byte header per file, then its bytes) is :mod:`aicenter.core.bundle`, shared with the client.
Chunks of the stream may split a header or a body anywhere.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from aicenter.core.bundle import HEADER_SIZE, bundle_header, parse_bundle_header
from aicenter.core.errors import HashMismatch, ValidationFailed
from aicenter.storage.blobs import BLOB_MODE

__all__ = ["HEADER_SIZE", "BundleWriter", "bundle_header"]


class BundleWriter:
    """Feeds bundle bytes and writes each complete, verified file with ``commit(index, sha256, tmp_path)``.

    Synchronous (the caller runs ``feed`` in a worker thread, about 1 MiB at a time). A file's bytes go to a
    temporary file that ``commit`` renames into place only after the size and hash are checked, so a broken or
    lying stream never leaves a partial file where a verified one is expected. Files for which ``done(index)`` is
    true (already received) are read past and not written again.
    """

    def __init__(
        self,
        files: Mapping[int, tuple[int, str | None]],
        *,
        done: Callable[[int], bool],
        tmp_path: Callable[[int], Path],
        commit: Callable[[int, str, Path], None],
    ) -> None:
        self._files = files
        self._done = done
        self._written: set[int] = set()  # received by this bundle (a file twice in one bundle is read past)
        self._tmp_path = tmp_path
        self._commit = commit
        self.received: list[int] = []
        self._offset = 0  # bytes of the bundle consumed, for error messages
        self._header = bytearray()
        self._index = -1  # the file whose body is being read; -1 between files
        self._left = 0
        self._size = 0
        self._fd = -1
        self._tmp: Path | None = None
        self._hash = hashlib.sha256()

    def feed(self, data: bytes) -> None:
        view = memoryview(data)
        pos, end = 0, len(view)
        while pos < end:
            if self._index < 0:
                take = min(HEADER_SIZE - len(self._header), end - pos)
                self._header += view[pos : pos + take]
                pos += take
                if len(self._header) == HEADER_SIZE:
                    self._start_file(self._offset + pos - HEADER_SIZE)
            else:
                take = min(self._left, end - pos)
                self._write(view[pos : pos + take])
                pos += take
                self._left -= take
            if self._index >= 0 and self._left == 0:
                self._finish_file()
        self._offset += end

    def close(self) -> list[int]:
        """End of the stream: ValidationFailed when it stopped inside a header or a file."""
        if self._index >= 0:
            got = self._size - self._left
            index = self._index
            self.abort()
            raise ValidationFailed(
                f"the bundle ends inside file {index}: {got} of {self._size} bytes arrived; resend that file",
                details={"index": index},
            )
        if self._header:
            raise ValidationFailed(f"the bundle ends inside a file header ({len(self._header)} of {HEADER_SIZE} bytes)")
        return self.received

    def abort(self) -> None:
        """Drop the file in progress (no marker, no partial file). Safe to call more than once."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)
            self._tmp = None
        self._index = -1

    # -- internals ---------------------------------------------------------------------------------------------
    def _start_file(self, at: int) -> None:
        parsed = parse_bundle_header(bytes(self._header))
        if parsed is None:
            raise ValidationFailed(
                f"malformed bundle header at byte {at}: expected 48 characters (16 hex digits of the index, "
                "16 of the size, 16 zeros)"
            )
        index, size = parsed
        self._header.clear()
        if index not in self._files:
            raise ValidationFailed(f"file {index} is not expected in a bundle of this upload", details={"index": index})
        expected = self._files[index][0]
        if size != expected:
            raise ValidationFailed(
                f"file {index} has {size} bytes in the bundle, but the upload declares {expected}",
                details={"index": index},
            )
        self._index, self._size, self._left = index, size, size
        self._hash = hashlib.sha256()
        if index in self._written or self._done(index):
            return  # a resend of a received file: read past its bytes
        self._tmp = self._tmp_path(index)
        # Read-only from birth (the descriptor still writes): finalize links it into the store without a chmod.
        self._fd = os.open(self._tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, BLOB_MODE)

    def _write(self, piece: memoryview) -> None:
        if self._fd < 0:
            return
        self._hash.update(piece)
        while piece:
            piece = piece[os.write(self._fd, piece) :]

    def _finish_file(self) -> None:
        index = self._index
        if self._fd < 0:  # skipped resend
            self._index = -1
            self.received.append(index)
            return
        os.close(self._fd)
        self._fd = -1
        sha = self._hash.hexdigest()
        declared = self._files[index][1]
        tmp = self._tmp
        assert tmp is not None
        if declared is not None and sha != declared:
            self.abort()
            raise HashMismatch(
                f"file {index} of the bundle hashes to {sha}, not the declared {declared}; resend it",
                details={"index": index, "expected": declared, "actual": sha},
            )
        self._commit(index, sha, tmp)
        self._tmp = None
        self._index = -1
        self._written.add(index)
        self.received.append(index)
