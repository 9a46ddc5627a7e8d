"""Node and replica telemetry: the raw counters an executor reads, and the pure step from two reads to usage.

An executor's ``sample`` returns ``NodeCounters`` as the node's kernel and driver count them: cumulative CPU time,
cumulative network bytes, memory and disk as they are now, accelerator readings as NVML gives them, and each
running replica's cumulative CPU seconds and resident memory. Cumulative counters say nothing alone; ``usage``
turns the previous and the current read of one node into ratios and rates (CPU utilization 0-1, bytes per
second, cores used). Keeping the executors stateless (the sampler controller keeps the previous read) means a
fresh server resumes sampling without asking anyone for history: its first tick has no rates, its second has.

A counter that went backwards (a network interface reset, a replica's process tree that lost a child whose CPU
time nobody reaped, a replica restarted in the same run directory) gives no rate rather than a negative or a
huge one: one missing point is better than a spike on every chart.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "AcceleratorReading",
    "NodeCounters",
    "NodeUsage",
    "ReplicaCounters",
    "ReplicaUsage",
    "rate",
    "usage",
]


@dataclass(frozen=True, slots=True)
class AcceleratorReading:
    """One accelerator as its driver reports it now; a field the driver could not read is None.

    Attributes:
        index: The device index (what ``CUDA_VISIBLE_DEVICES`` names).
        type: The accelerator type, e.g. ``nvidia-h100``.
        utilization: The fraction of the driver's last sample period in which a kernel ran (0-1).
        memory_used_bytes: Device memory in use.
        memory_total_bytes: Device memory.
        temperature_celsius: The GPU core temperature.
        power_watts: The board's power draw.
    """

    index: int
    type: str
    utilization: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    temperature_celsius: float | None = None
    power_watts: float | None = None


@dataclass(frozen=True, slots=True)
class ReplicaCounters:
    """One running replica's counters.

    Attributes:
        run_dir: The replica attempt's run directory: what identifies it from one read to the next.
        cpu_seconds: Cumulative user + system CPU time of the replica (its control group, or its processes).
        memory_bytes: Resident memory of the replica now.
        accelerator_memory_bytes: Device memory its processes hold, where the driver reports it per process;
            None where it does not (no driver, or processes the driver does not list).
        source: Where the numbers come from: ``cgroup``, ``processes`` or ``usage-file``.
        at: When they were read, where that is not the node's read (a usage file the launcher wrote); None: the
            node's ``at``.
    """

    run_dir: str
    cpu_seconds: float | None
    memory_bytes: int | None
    accelerator_memory_bytes: int | None = None
    source: str = ""
    at: float | None = None


@dataclass(frozen=True, slots=True)
class NodeCounters:
    """One read of one node. Fields an engine cannot read are None (no sample is written for them).

    Attributes:
        node: The node's name (as the executor's ``nodes`` reports it).
        at: When it was read, in seconds since the epoch (the node's clock).
        cpu_busy_seconds: Cumulative non-idle CPU time over all of the node's CPUs.
        cpu_total_seconds: Cumulative CPU time over all CPUs, idle included.
        cpu_utilization: A ratio the engine gives directly (Slurm's load over its CPUs) instead of counters.
        memory_used_bytes: Memory in use (total minus what is available without swapping).
        memory_total_bytes: The node's memory.
        disk_used_bytes: Used bytes of the filesystem that holds the jobs' directories.
        disk_total_bytes: Its size.
        network_receive_bytes: Cumulative bytes received by every interface but loopback.
        network_transmit_bytes: Cumulative bytes sent by every interface but loopback.
        accelerators: One reading per device.
        accelerator_telemetry: False when the node has no accelerator driver to ask (no NVML): consoles show
            "no accelerator telemetry" rather than an empty chart that looks like idle devices.
        replicas: The running replicas asked about that run on this node.
    """

    node: str
    at: float
    cpu_busy_seconds: float | None = None
    cpu_total_seconds: float | None = None
    cpu_utilization: float | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    disk_used_bytes: int | None = None
    disk_total_bytes: int | None = None
    network_receive_bytes: int | None = None
    network_transmit_bytes: int | None = None
    accelerators: tuple[AcceleratorReading, ...] = ()
    accelerator_telemetry: bool = False
    replicas: tuple[ReplicaCounters, ...] = ()


@dataclass(frozen=True, slots=True)
class ReplicaUsage:
    """A replica's use over the last interval (``cpu_cores``) and now (memory)."""

    run_dir: str
    cpu_cores: float | None
    memory_bytes: int | None
    accelerator_memory_bytes: int | None


@dataclass(frozen=True, slots=True)
class NodeUsage:
    """A node's use: ratios and rates over the interval between two reads, levels as of the later one."""

    node: str
    at: float
    cpu_utilization: float | None
    memory_used_bytes: int | None
    memory_total_bytes: int | None
    disk_used_bytes: int | None
    disk_total_bytes: int | None
    network_receive_bytes_per_second: float | None
    network_transmit_bytes_per_second: float | None
    accelerators: tuple[AcceleratorReading, ...]
    accelerator_telemetry: bool
    replicas: tuple[ReplicaUsage, ...]


def rate(previous: float | None, current: float | None, elapsed_s: float) -> float | None:
    """``(current - previous) / elapsed_s``; None when either is unknown, no time passed or the counter fell."""
    if previous is None or current is None or elapsed_s <= 0 or current < previous:
        return None
    return (current - previous) / elapsed_s


def _cpu_utilization(previous: NodeCounters | None, current: NodeCounters) -> float | None:
    if current.cpu_utilization is not None:
        return min(1.0, max(0.0, current.cpu_utilization))
    if previous is None:
        return None
    busy = rate(previous.cpu_busy_seconds, current.cpu_busy_seconds, 1.0)
    total = rate(previous.cpu_total_seconds, current.cpu_total_seconds, 1.0)
    if busy is None or not total:
        return None
    return min(1.0, busy / total)


def usage(previous: NodeCounters | None, current: NodeCounters) -> NodeUsage:
    """The node's use from two reads of it (``previous`` None: the first read, levels only, no rates).

    Replicas are matched by run directory; one that is new since ``previous`` has no CPU rate yet.
    """
    elapsed = current.at - previous.at if previous is not None else 0.0
    before = {r.run_dir: r for r in previous.replicas} if previous is not None else {}
    replicas = []
    for r in current.replicas:
        old = before.get(r.run_dir)
        cores = None
        if old is not None:
            span = r.at - old.at if r.at is not None and old.at is not None else elapsed
            cores = rate(old.cpu_seconds, r.cpu_seconds, span)
        replicas.append(ReplicaUsage(r.run_dir, cores, r.memory_bytes, r.accelerator_memory_bytes))
    return NodeUsage(
        node=current.node,
        at=current.at,
        cpu_utilization=_cpu_utilization(previous, current),
        memory_used_bytes=current.memory_used_bytes,
        memory_total_bytes=current.memory_total_bytes,
        disk_used_bytes=current.disk_used_bytes,
        disk_total_bytes=current.disk_total_bytes,
        network_receive_bytes_per_second=rate(
            previous.network_receive_bytes if previous else None, current.network_receive_bytes, elapsed
        ),
        network_transmit_bytes_per_second=rate(
            previous.network_transmit_bytes if previous else None, current.network_transmit_bytes, elapsed
        ),
        accelerators=current.accelerators,
        accelerator_telemetry=current.accelerator_telemetry,
        replicas=tuple(replicas),
    )
