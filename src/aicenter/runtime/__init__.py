"""What runs inside a job: the launcher, the framework environment, checkpoints and metric reporting.

Inside a job::

    from aicenter.runtime import checkpoint_dir, latest, report, restart_count, save_atomic

This package is imported by user code in the job's own environment, so it imports nothing from the server.
"""

from aicenter.runtime.checkpoint import checkpoint_dir, latest, restart_count, save_atomic
from aicenter.runtime.report import report

__all__ = ["checkpoint_dir", "latest", "report", "restart_count", "save_atomic"]
