"""The whole-file sha256 of a multi-part upload, advanced while its parts arrive, so finalize need not re-read it.

Each part is hashed by the request that carries it (against its ``X-Part-Sha256``), but the whole file's hash needs
the bytes in order, and parts arrive four at a time in any order. After a part is marked received, a worker thread
of this process catches the running hash up over the contiguous received parts, reading them back from the page
cache (about 10 ms per 16 MiB part at ~1.6 GB/s of sha256). Finalize then hashes only what was not caught up: for a
2 GiB file sent in order, nothing, where it used to re-read 2 GiB (1.3 s of CPU on the critical path of a commit).

Process memory only: after a restart, or for parts another replica received, finalize reads from disk whatever this
process did not hash. Bytes of a part written *after* it was marked received (a concurrent duplicate, a failed
resend) may differ from what was hashed: such a writer leaves ``<index>.taint`` (see ``staging.py``) and finalize
then re-hashes the whole file, as it always did.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections import OrderedDict
from pathlib import Path

READ_SIZE = 4 << 20  # catch-up reads: 4 MiB keeps the syscall count low and the buffer small
# Entries kept per process; beyond it the oldest upload's running hash is dropped (its finalize then reads the
# file). 4,096 concurrent multi-part files is far above what one replica serves; an entry is about 1 KiB.
MAX_ENTRIES = 4096


class RunningHash:
    """sha256 of the first ``position`` bytes of one multi-part staged file. Thread safe."""

    def __init__(self, path: Path, part_size: int, file_size: int) -> None:
        self.path = path
        self.part_size = part_size
        self.file_size = file_size
        self._cond = threading.Condition()
        self._hasher = hashlib.sha256()
        self._position = 0
        self._parts: set[int] = set()
        self._busy = False  # a thread is advancing; only it touches _hasher
        self._valid = True
        self._closed = False

    def received(self, part: int) -> None:
        """Part ``part`` is verified and marked; call :meth:`advance` (in a worker thread) to hash it."""
        with self._cond:
            self._parts.add(part)

    def invalidate(self) -> None:
        """Bytes already hashed may have changed: finalize must read the whole file."""
        with self._cond:
            self._valid = False

    def advance(self) -> None:
        """Hash every contiguous received part from the current position. Blocking; returns at once when another
        thread is advancing (it re-checks the received parts after each one, so none is left behind)."""
        with self._cond:
            if self._busy:
                return
            self._busy = True
        fd = -1
        try:
            while True:
                with self._cond:
                    start = self._position
                    if (
                        not self._valid
                        or self._closed
                        or start >= self.file_size
                        or start // self.part_size not in self._parts
                    ):
                        # Decided under the lock that marks parts: a part marked after this sees _busy False.
                        self._busy = False
                        self._cond.notify_all()
                        return
                if fd < 0:
                    fd = os.open(self.path, os.O_RDONLY)
                length = min(self.part_size, self.file_size - start)
                _hash_range(fd, self._hasher, start, length)
                with self._cond:
                    self._position = start + length
        except OSError:  # the upload was removed or committed meanwhile: nothing to keep
            with self._cond:
                self._valid = False
                self._busy = False
                self._cond.notify_all()
        finally:
            if fd >= 0:
                os.close(fd)

    def finish(self, fd: int) -> str | None:
        """The whole file's sha256, hashing from ``fd`` only what was not caught up; None when invalidated.

        The caller holds the file still (an exclusive flock: no part writer is inside). Consumes the hash.
        """
        with self._cond:
            self._closed = True
            while self._busy:
                self._cond.wait()
            if not self._valid:
                return None
            start = self._position
        _hash_range(fd, self._hasher, start, self.file_size - start)
        return self._hasher.hexdigest()


def _hash_range(fd: int, hasher: hashlib._Hash, offset: int, length: int) -> None:
    buf = bytearray(min(READ_SIZE, max(length, 1)))
    view = memoryview(buf)
    while length > 0:
        n = os.preadv(fd, [view[: min(len(buf), length)]], offset)
        if n <= 0:
            raise OSError(f"{length} bytes missing at offset {offset} of a staged file")
        hasher.update(view[:n])  # sha256 releases the GIL on updates over 2 KiB
        offset += n
        length -= n


class Registry:
    """The running hashes of this process, by staged file path, least recently used dropped first."""

    def __init__(self, max_entries: int = MAX_ENTRIES) -> None:
        self._lock = threading.Lock()
        self._entries: OrderedDict[str, RunningHash] = OrderedDict()
        self._max = max_entries

    def get(self, path: Path, part_size: int, file_size: int) -> RunningHash:
        key = str(path)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None or (entry.part_size, entry.file_size) != (part_size, file_size):
                entry = self._entries[key] = RunningHash(path, part_size, file_size)
                while len(self._entries) > self._max:
                    self._entries.popitem(last=False)
            else:
                self._entries.move_to_end(key)
            return entry

    def peek(self, path: Path) -> RunningHash | None:
        with self._lock:
            return self._entries.get(str(path))

    def pop(self, path: Path) -> RunningHash | None:
        with self._lock:
            return self._entries.pop(str(path), None)

    def drop_under(self, directory: Path) -> None:
        """Forget every file of one upload (its staging directory is gone)."""
        prefix = f"{directory}{os.sep}"
        with self._lock:
            for key in [k for k in self._entries if k.startswith(prefix)]:
                entry = self._entries.pop(key)
                entry.invalidate()


RUNNING = Registry()
