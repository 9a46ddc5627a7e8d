"""The ``local`` executor: replicas as processes on this host."""

from aicenter.executors.local.host import detect_host

__all__ = ["detect_host"]
