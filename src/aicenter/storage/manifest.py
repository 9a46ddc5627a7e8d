"""Version manifests: the sorted list of (path, size, sha256, mode) that a version's files are."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from aicenter.core.errors import ValidationFailed
from aicenter.storage.paths import check_path

SHA256_RE = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a version. ``mode`` holds permission bits only (``0o755`` for scripts)."""

    path: str
    size: int
    sha256: str
    mode: int = 0o644


def is_sha256(value: object) -> bool:
    return isinstance(value, str) and SHA256_RE.fullmatch(value) is not None


def check_manifest(entries: Sequence[FileEntry], *, field: str = "files") -> list[FileEntry]:
    """Validate a manifest and return its entries sorted by path.

    Raises ValidationFailed naming the entry (``files[3].path``) for: an unsafe path, a negative size, a sha256 that
    is not 64 lower-case hex digits, a mode outside 0..0o7777, a duplicate path, or a path that is also a directory
    of another path (``a`` and ``a/b``). Set-id and sticky bits are dropped from the returned modes: a pulled file
    never gains privileges.
    """
    first_index: dict[str, int] = {}
    out: list[FileEntry] = []
    for i, entry in enumerate(entries):
        check_path(entry.path, field=f"{field}[{i}].path")
        if isinstance(entry.size, bool) or not isinstance(entry.size, int) or entry.size < 0:
            raise ValidationFailed(
                f"must be a whole number of bytes >= 0, not {entry.size!r}", field=f"{field}[{i}].size"
            )
        if not is_sha256(entry.sha256):
            raise ValidationFailed("must be 64 lower-case hex digits", field=f"{field}[{i}].sha256")
        if isinstance(entry.mode, bool) or not isinstance(entry.mode, int) or not 0 <= entry.mode <= 0o7777:
            raise ValidationFailed(
                f"must be permission bits between 0 and 0o7777, not {entry.mode!r}", field=f"{field}[{i}].mode"
            )
        if entry.path in first_index:
            raise ValidationFailed(f"duplicate path {entry.path}", field=f"{field}[{i}].path")
        first_index[entry.path] = i
        out.append(
            entry if entry.mode <= 0o777 else FileEntry(entry.path, entry.size, entry.sha256, entry.mode & 0o777)
        )
    # A file "a" and a file "a/b" cannot both exist on disk. A directory checked once (with its ancestors) is
    # not checked again, so this costs about one lookup per file and per distinct directory.
    checked_dirs: set[str] = set()
    for path, i in first_index.items():
        end = path.rfind("/")
        while end > 0:
            parent = path[:end]
            if parent in checked_dirs:
                break
            checked_dirs.add(parent)
            if parent in first_index:
                raise ValidationFailed(
                    f"{path} needs {parent} to be a directory, but {parent} is also a file "
                    f"({field}[{first_index[parent]}])",
                    field=f"{field}[{i}].path",
                )
            end = path.rfind("/", 0, end)
    out.sort(key=lambda e: e.path)
    return out


def manifest_sha256(entries: Sequence[FileEntry]) -> str:
    """Stable hash of a manifest: independent of the order of ``entries``; paths never hold a newline."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.path):
        h.update(f"{e.sha256} {e.size} {e.mode:04o} {e.path}\n".encode())
    return h.hexdigest()
