"""Executors run replicas on an engine (``local``, ``ray``, ``slurm``) and report the hosts they can use.

Every call into an engine lives under this package. The protocol and its value types are in ``base``. What an
executor reports about a host is a ``HostInfo``: the services turn it into a node row
(``aicenter.services.inventory.register_host``), so the inventory does not depend on which engine found the host.
"""

from __future__ import annotations

from aicenter.executors.base import (
    ACCELERATOR_LABEL,
    EXECUTOR_LABEL,
    HOSTNAME_LABEL,
    NODE_LOST_REASON,
    TOPOLOGY_LABELS,
    AcceleratorInfo,
    Executor,
    HostInfo,
    LaunchFailed,
    NodeCounters,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
    ReplicaStatus,
)

__all__ = [
    "ACCELERATOR_LABEL",
    "EXECUTOR_LABEL",
    "HOSTNAME_LABEL",
    "NODE_LOST_REASON",
    "TOPOLOGY_LABELS",
    "AcceleratorInfo",
    "Executor",
    "HostInfo",
    "LaunchFailed",
    "NodeCounters",
    "ReplicaHandle",
    "ReplicaPlan",
    "ReplicaState",
    "ReplicaStatus",
]
