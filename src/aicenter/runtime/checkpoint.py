"""Checkpoints inside a job: where they go, how to write them safely, and how to find the last one.

The checkpoint directory outlives a replica: a job restarted after a failure or a preemption is given the same
directory and ``AICENTER_RESTART_COUNT`` > 0, and resumes from ``latest()``. Writes must be atomic because a
replica may be killed at any moment (after the stop grace period, or by a node failure): a half-written file
would be the newest one and the resume would fail.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

__all__ = ["checkpoint_dir", "latest", "restart_count", "save_atomic"]


def checkpoint_dir() -> Path:
    """``$AICENTER_CHECKPOINT_DIR``, created if missing.

    Raises:
        RuntimeError: Not inside an aicenter job (the variable is not set).
    """
    value = os.environ.get("AICENTER_CHECKPOINT_DIR")
    if not value:
        raise RuntimeError("AICENTER_CHECKPOINT_DIR is not set: not inside an aicenter job")
    path = Path(value)
    path.mkdir(parents=True, exist_ok=True)
    return path


def restart_count() -> int:
    """How many times the job was restarted before this run (``AICENTER_RESTART_COUNT``; 0 outside a job)."""
    try:
        return max(0, int(os.environ.get("AICENTER_RESTART_COUNT", "0")))
    except ValueError:
        return 0


def save_atomic(name: str, data: bytes) -> Path:
    """Write ``data`` to ``checkpoint_dir()/name``: readers see the old file or the whole new one.

    The data is fsynced before the rename, so after a host crash the file is complete or absent.

    Raises:
        ValueError: ``name`` is not a plain file name.
    """
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(f"checkpoint name {name!r} must be a plain file name")
    directory = checkpoint_dir()
    target = directory / name
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


def latest(pattern: str = "*") -> Path | None:
    """The most recently modified checkpoint matching ``pattern``, or None. Temporary files are never returned.

    Ties in modification time (coarse filesystems) are broken by name, so ``step-00020`` beats ``step-00010``.
    """
    try:
        directory = checkpoint_dir()
    except RuntimeError:
        return None
    candidates = [p for p in directory.glob(pattern) if p.is_file() and not p.name.startswith(".")]
    if not candidates:
        return None
    return max(candidates, key=lambda p: (p.stat().st_mtime_ns, p.name))
