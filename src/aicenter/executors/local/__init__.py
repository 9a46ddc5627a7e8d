"""The ``local`` executor: replicas as processes on this host."""

from aicenter.executors.local.executor import LocalExecutor
from aicenter.executors.local.host import detect_host
from aicenter.executors.local.sandboxing import unsandboxed_reason

__all__ = ["LocalExecutor", "detect_host", "unsandboxed_reason"]
