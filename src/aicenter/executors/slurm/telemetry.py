"""Telemetry of Slurm's nodes, from what is real and cheap there (pure functions: unit-tested without a cluster).

The server may not reach a Slurm node's ``/proc``: asking the node costs a job step (``srun``: ~0.3 s, a CPU, and
slurmctld's attention) per node per tick, far over the sampler's 1 % of a core. What it has for free:

- ``scontrol show nodes``, which the executor reads anyway (one call for every node): slurmd's ``CPULoad`` (the
  load average, over ``CPUTot`` a utilization; a load of runnable-but-waiting tasks above the CPUs reads 1) and
  ``FreeMem`` against ``RealMemory`` (memory used). No network counters, no disk of the node, no GPU readings:
  Slurm gathers GPU use only per job step (``sstat``'s TRES usage, with the NVML gpu plugin), so those nodes
  are "no accelerator telemetry";
- the jobs' shared filesystem, where each replica's launcher writes ``usage.json`` every ``usage_interval_s``
  (``aicenter.runtime.usage``): the replica's CPU seconds and memory, read by the kernel on the node. A file
  older than ``STALE_AFTER`` intervals is a launcher that no longer writes (its node froze): left out.

A node whose address is this host's is read like the local executor's (``aicenter.executors.local.telemetry``):
the test clusters and a single-machine install have their full counters.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from aicenter.core.telemetry import NodeCounters, ReplicaCounters
from aicenter.executors.base import ReplicaHandle
from aicenter.executors.rundir import launcher_record
from aicenter.executors.slurm.inventory import SlurmNode
from aicenter.runtime.files import read_json
from aicenter.runtime.usage import USAGE_FILE

__all__ = ["STALE_AFTER", "node_counters", "usage_file_counters"]

STALE_AFTER = 3.0


def node_counters(node: SlurmNode, name: str, at: float) -> NodeCounters:
    """What ``scontrol`` says of ``node`` as counters (see the module docstring for what it cannot say)."""
    cpus = node.host.cpu_milli / 1000
    utilization = None if node.cpu_load is None or cpus <= 0 else min(1.0, node.cpu_load / cpus)
    total = node.host.memory_bytes or None
    used = None
    # FreeMem is the machine's, RealMemory what the site configured: more free than configured (a node that
    # gives Slurm part of its memory) says nothing of what is used; that is left unknown, not 0.
    if total is not None and node.free_memory_bytes is not None and node.free_memory_bytes <= total:
        used = total - node.free_memory_bytes
    return NodeCounters(node=name, at=at, cpu_utilization=utilization, memory_used_bytes=used, memory_total_bytes=total)


def usage_file_counters(
    handles: Sequence[ReplicaHandle], *, now: float, interval_s: float
) -> tuple[ReplicaCounters, ...]:
    """The counters of the running replicas of ``handles`` from their launchers' ``usage.json`` files."""
    out = []
    for handle in handles:
        if launcher_record(handle).get("state") != "running":
            continue
        data = read_json(Path(handle.run_dir) / USAGE_FILE) or {}
        try:
            at = float(data["at"])
        except (KeyError, TypeError, ValueError):
            continue
        if now - at > STALE_AFTER * interval_s:
            continue
        cpu, memory = data.get("cpu_seconds"), data.get("memory_bytes")
        out.append(
            ReplicaCounters(
                run_dir=handle.run_dir,
                cpu_seconds=float(cpu) if isinstance(cpu, int | float) else None,
                memory_bytes=int(memory) if isinstance(memory, int | float) else None,
                source="usage-file",
                at=at,
            )
        )
    return tuple(out)
