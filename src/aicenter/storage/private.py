"""Owner-only modes for the server's own files: the home, the store, the SQLite database, the secret key.

Everything the server keeps (password hashes and tokens in the database, every tenant's blobs, the signing key)
must be unreadable to any other local Unix account, jobs included once they run under their own uids. The rule
is enforced on the roots: a directory of mode 0700 cannot be traversed by anyone else, whatever the modes of what
lies below, so an existing store whose blobs were written 0444 by an older release is closed without walking
millions of files.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

PRIVATE_DIR_MODE = 0o700
PRIVATE_FILE_MODE = 0o600
_OTHERS = 0o077


def private_dir(path: Path) -> str | None:
    """Create ``path`` (and missing parents) owner-only, or tighten it when group or others have any access.

    Returns:
        What was changed (``"<path>: 0755 -> 0700"``), or None when nothing was.
    """
    path.mkdir(mode=PRIVATE_DIR_MODE, parents=True, exist_ok=True)
    return _tighten(path, PRIVATE_DIR_MODE)


def private_file(path: Path) -> str | None:
    """Create ``path`` empty and owner-only unless it exists; tighten it to 0600 when others have any access.

    An empty file is a valid SQLite database: creating it first makes SQLite keep its mode, and SQLite gives the
    ``-wal`` and ``-shm`` files the mode of the database file.

    Returns:
        What was changed, or None when nothing was (a file created here counts as nothing changed).
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE_MODE))
        return None
    except FileExistsError:
        return _tighten(path, PRIVATE_FILE_MODE)


def tighten_if_present(path: Path) -> str | None:
    """Tighten an existing file to 0600 (SQLite's ``-wal``/``-shm`` of an older server); absent is fine."""
    try:
        return _tighten(path, PRIVATE_FILE_MODE)
    except FileNotFoundError:
        return None


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, never readable by others, not even for a moment."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE_MODE)
    try:
        os.fchmod(fd, PRIVATE_FILE_MODE)  # O_CREAT's mode does not apply to a leftover file of a crash
        os.write(fd, text.encode())
    finally:
        os.close(fd)
    os.replace(tmp, path)


def _tighten(path: Path, mode: int) -> str | None:
    current = stat.S_IMODE(os.lstat(path).st_mode)
    if current & _OTHERS == 0:
        return None
    os.chmod(path, mode)
    return f"{path}: {current:04o} -> {mode:04o}"
