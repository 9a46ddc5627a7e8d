"""What runs inside a job: the launcher, the framework environment, checkpoints and metric reporting.

Inside a job::

    from aicenter.runtime import checkpoint_dir, latest, report, restart_count, save_atomic

This package is imported by user code in the job's own environment, so it imports nothing from the server.
"""

from typing import TYPE_CHECKING, Any

from aicenter.runtime.report import report

if TYPE_CHECKING:
    from aicenter.runtime.checkpoint import checkpoint_dir, latest, restart_count, save_atomic

__all__ = ["checkpoint_dir", "latest", "report", "restart_count", "save_atomic"]


def __getattr__(name: str) -> Any:
    # The checkpoint helpers are imported on first use: the launcher (aicenter.runtime.launcher) starts once per
    # replica and needs none of them (their tempfile import costs its start-up ~4 ms).
    if name in ("checkpoint_dir", "latest", "restart_count", "save_atomic"):
        from aicenter.runtime import checkpoint

        return getattr(checkpoint, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
