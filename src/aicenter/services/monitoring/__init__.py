"""Monitoring: what the cluster, every job and every service is doing.

``snapshot`` reads the platform's state as a few aggregate numbers for the Prometheus exposition at ``/metrics``;
``ProcessTelemetry`` counts what this process does between scrapes (scheduler cycles, service requests).
"""

from aicenter.services.monitoring._cluster import (
    USED_FAMILIES,
    USED_PREFIXES,
    WORKSPACE_USED,
    ClusterSnapshot,
    UsedFamily,
)
from aicenter.services.monitoring._snapshot import NO_POOL, PlatformSnapshot, snapshot
from aicenter.services.monitoring._telemetry import DecisionKind, ProcessTelemetry

__all__ = [
    "NO_POOL",
    "USED_FAMILIES",
    "USED_PREFIXES",
    "WORKSPACE_USED",
    "ClusterSnapshot",
    "DecisionKind",
    "PlatformSnapshot",
    "ProcessTelemetry",
    "UsedFamily",
    "snapshot",
]
