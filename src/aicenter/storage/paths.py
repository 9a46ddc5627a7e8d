"""Relative paths of files inside a version: the one check every path passes before it touches the store."""

from __future__ import annotations

import re

from aicenter.core.errors import ValidationFailed

MAX_PATH_CHARS = 1024
# Linux NAME_MAX: a longer segment could be stored but never written to a job's disk by a pull.
MAX_SEGMENT_BYTES = 255

# C0 controls (NUL included), DEL and C1 controls: invisible in listings, and NUL truncates C paths.
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")
_DRIVE_RE = re.compile(r"^[A-Za-z]:")


def path_problem(path: str) -> str | None:
    """Why ``path`` is not a safe relative POSIX path, or None when it is one."""
    if not path:
        return "must not be empty"
    if len(path) > MAX_PATH_CHARS:
        return f"is {len(path)} characters long; the limit is {MAX_PATH_CHARS}"
    if path.startswith("/") or _DRIVE_RE.match(path):
        return f'"{path[:80]}" is absolute; use a path relative to the version root'
    if "\\" in path:
        return f'"{path[:80]}" contains a backslash; use "/" between directories'
    if _CONTROL_RE.search(path):
        return "contains a NUL or another control character"
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates from os.fsdecode of a non-UTF-8 file name
        return "is not valid UTF-8"
    for segment in path.split("/"):
        if segment == "":
            return f'"{path[:80]}" has an empty segment ("//" or a leading or trailing "/")'
        if segment == ".":
            return f'"{path[:80]}" has a "." segment'
        if segment == "..":
            return f'"{path[:80]}" has a ".." segment, which could leave the version root'
        if len(segment) > MAX_SEGMENT_BYTES // 4 and len(segment.encode("utf-8")) > MAX_SEGMENT_BYTES:
            return f'a segment of "{path[:80]}" is longer than {MAX_SEGMENT_BYTES} bytes'
    return None


def check_path(path: str, *, field: str = "path") -> str:
    """Return ``path`` if it is a normalized relative POSIX path, else raise ValidationFailed naming ``field``.

    Refused: empty, longer than 1024 characters, absolute (``/x``, ``C:x``), backslashes, control characters
    (NUL included), empty segments (``a//b``, ``a/``), ``.`` and ``..`` segments, a segment over 255 bytes.
    Since every non-normal spelling is refused rather than rewritten, a valid path is already normalized and is
    returned unchanged: two spellings can never name the same file.
    """
    problem = path_problem(path)
    if problem is not None:
        raise ValidationFailed(problem, field=field)
    return path
