"""Monitoring: what the cluster, every job and every service is doing.

``overview`` is the console's dashboard (what the center, or a member's workspaces, are doing now).
``snapshot`` reads the platform's state as a few aggregate numbers for the Prometheus exposition at ``/metrics``.
"""

from aicenter.services.monitoring._overview import (
    NodeDown,
    Overview,
    QueueWait,
    ResourceUse,
    WorkspaceUse,
    overview,
)
from aicenter.services.monitoring._snapshot import NO_POOL, PlatformSnapshot, snapshot

__all__ = [
    "NO_POOL",
    "NodeDown",
    "Overview",
    "PlatformSnapshot",
    "QueueWait",
    "ResourceUse",
    "WorkspaceUse",
    "overview",
    "snapshot",
]
