"""Executors run replicas on an engine (``local``, ``ray``, ``slurm``) and report the hosts they can use.

Every call into an engine lives under this package. What an executor reports about a host is a ``HostInfo``:
the services turn it into a node row (``aicenter.services.inventory.register_host``), so the inventory does not
depend on which engine found the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["AcceleratorInfo", "HostInfo"]


@dataclass(frozen=True, slots=True)
class AcceleratorInfo:
    """One accelerator device of a host, as its driver reports it.

    Attributes:
        index: The device index the driver uses (what ``CUDA_VISIBLE_DEVICES`` names).
        type: The accelerator type name, e.g. ``nvidia-a100``.
        vendor: ``nvidia``, ``huawei``, ``cambricon``, ...
        model: The product name the driver reports, e.g. ``NVIDIA A100-SXM4-80GB``.
        memory_bytes: Device memory.
        nvlink_domain: Devices with the same value share an NVLink/NVSwitch fabric; None if unknown.
    """

    index: int
    type: str
    vendor: str
    model: str
    memory_bytes: int
    nvlink_domain: str | None = None


@dataclass(frozen=True, slots=True)
class HostInfo:
    """What an executor knows about one host: enough to register it as a node.

    Attributes:
        name: Node name (a valid aicenter name: lower-case, at most 64 characters).
        address: How other hosts reach it (host name or IP); may be empty.
        executor: The executor that runs work there: ``local``, ``ray`` or ``slurm``.
        cpu_milli: CPUs this host gives to the platform, in milli-cores.
        memory_bytes: Memory this host gives to the platform.
        accelerators: Its accelerator devices, ordered by index.
        labels: Labels the executor sets (``aicenter.io/...``); labels set by admins are kept beside them.
    """

    name: str
    address: str
    executor: str
    cpu_milli: int
    memory_bytes: int
    accelerators: tuple[AcceleratorInfo, ...] = ()
    labels: dict[str, str] = field(default_factory=dict)
