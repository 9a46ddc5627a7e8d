"""Monitoring: what the cluster, every job and every service is doing.

``snapshot`` reads the platform's state as a few aggregate numbers for the Prometheus exposition at ``/metrics``.
"""

from aicenter.services.monitoring._snapshot import NO_POOL, PlatformSnapshot, snapshot

__all__ = ["NO_POOL", "PlatformSnapshot", "snapshot"]
