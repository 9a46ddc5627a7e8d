"""Storing a server directory (admin imports, a job's output directory) as a version's files."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from aicenter.core.errors import ValidationFailed
from aicenter.storage.blobs import BlobStore
from aicenter.storage.manifest import FileEntry, check_manifest
from aicenter.storage.paths import path_problem


def scan_directory(root: Path, store: BlobStore) -> list[FileEntry]:
    """Put every regular file under ``root`` into the store and return the manifest (sorted by path).

    The whole tree is checked before a byte is stored: a symbolic link (it could point anywhere on the server), a
    socket, fifo or device, or a name that is not a safe path refuses the directory with ValidationFailed naming
    the relative path. Empty directories are not recorded (a version holds files; directories are implied).
    """
    root = Path(root)
    if not root.is_dir():
        raise ValidationFailed(f"{root} is not a directory", field="path")
    found: list[tuple[str, str, int]] = []
    _walk(os.fspath(root), "", found)
    entries = []
    for rel, abspath, mode in found:
        try:
            sha, size = store.put_file(Path(abspath))
        except PermissionError as e:
            raise ValidationFailed(f"{rel} cannot be read: {e.strerror}", field="path") from e
        entries.append(FileEntry(rel, size, sha, mode))
    return check_manifest(entries)


def _walk(directory: str, prefix: str, found: list[tuple[str, str, int]]) -> None:
    try:
        with os.scandir(directory) as it:
            children = sorted(it, key=lambda e: e.name)
    except PermissionError as e:
        raise ValidationFailed(f"{prefix or '.'} cannot be listed: {e.strerror}", field="path") from e
    for child in children:
        rel = prefix + child.name
        problem = path_problem(rel)
        if problem is not None:
            raise ValidationFailed(f"{rel!r}: {problem}", field="path")
        if child.is_symlink():
            raise ValidationFailed(f"{rel} is a symbolic link; store the file it points to instead", field="path")
        if child.is_dir(follow_symlinks=False):
            _walk(child.path, rel + "/", found)
        elif child.is_file(follow_symlinks=False):
            found.append((rel, child.path, stat.S_IMODE(child.stat(follow_symlinks=False).st_mode) & 0o777))
        else:
            raise ValidationFailed(f"{rel} is not a regular file (a socket, fifo or device)", field="path")
