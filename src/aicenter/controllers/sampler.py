"""The sampler: every ``metrics_sample_interval_s`` (15 s), every executor's nodes and running replicas as series.

One server replica samples at a time: a named lease (``sampler``) is held for three intervals and renewed in the
transaction that writes each tick's samples, so only the holder's samples are ever stored, and another replica
takes over within three intervals of the holder's death. The holder keeps each node's previous read in memory
(``aicenter.core.telemetry.usage`` needs two reads for rates): a fresh holder's first tick writes levels (memory,
disk, accelerators, replica memory) and its second the rates too (CPU, network, replica cores).

A tick: the running replicas (``services.jobs.running_replicas``) go to their executor's ``sample``, which reads
its nodes (locally, on Ray's nodes through a pinned task, from Slurm's ``scontrol`` and the launchers' usage
files); the node ids come from the inventory; then one ``record_samples`` batch. An executor that fails is
logged and skipped: the others' nodes are still recorded. Series names are those of ``docs/monitoring.md``
("Samplers"); ``node.accelerator_telemetry`` is 1 where the node's accelerators can be read (NVML answered) and
0 where not, which consoles show as "no accelerator telemetry".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.core.telemetry import NodeCounters, NodeUsage, usage
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.executors import Executor
from aicenter.services import inventory, jobs
from aicenter.services.jobs import RunningReplica
from aicenter.services.monitoring import Sample, record_samples

__all__ = ["LEASE_NAME", "SamplerController", "TickStats", "build", "samples_of"]

log = logging.getLogger(__name__)

LEASE_NAME = "sampler"
# The lease outlives two missed ticks: a holder busy for one slow tick (a Ray node timing out) keeps it.
_LEASE_INTERVALS = 3.0

_NODE_LEVELS = (
    ("node.memory_used_bytes", "memory_used_bytes"),
    ("node.memory_total_bytes", "memory_total_bytes"),
    ("node.disk_used_bytes", "disk_used_bytes"),
    ("node.disk_total_bytes", "disk_total_bytes"),
    ("node.cpu_utilization", "cpu_utilization"),
    ("node.network_receive_bytes_per_second", "network_receive_bytes_per_second"),
    ("node.network_transmit_bytes_per_second", "network_transmit_bytes_per_second"),
)
_ACCELERATOR_FIELDS = (
    ("accelerator.utilization", "utilization"),
    ("accelerator.memory_used_bytes", "memory_used_bytes"),
    ("accelerator.memory_total_bytes", "memory_total_bytes"),
    ("accelerator.temperature_celsius", "temperature_celsius"),
    ("accelerator.power_watts", "power_watts"),
)


def samples_of(node: NodeUsage, node_id: int | None, replicas: Mapping[str, RunningReplica]) -> list[Sample]:
    """The samples of one node's usage: node series, one set per accelerator, one per known replica.

    Args:
        node: The node's usage (``core.telemetry.usage``).
        node_id: Its inventory id (None: a node the inventory does not know yet; its series carry no id).
        replicas: The running replicas by run directory: a replica the executor reports but the database does
            not list as running (ended meanwhile) is left out.
    """
    at = datetime.fromtimestamp(node.at, UTC)
    labels = {"node": node.node}
    out = [
        Sample(name, at, float(value), labels, node_id=node_id)
        for name, field in _NODE_LEVELS
        if (value := getattr(node, field)) is not None
    ]
    out.append(
        Sample("node.accelerator_telemetry", at, 1.0 if node.accelerator_telemetry else 0.0, labels, node_id=node_id)
    )
    for device in node.accelerators:
        device_labels = {"node": node.node, "device": str(device.index), "type": device.type}
        out.extend(
            Sample(name, at, float(value), device_labels, node_id=node_id)
            for name, field in _ACCELERATOR_FIELDS
            if (value := getattr(device, field)) is not None
        )
    for used in node.replicas:
        row = replicas.get(used.run_dir)
        if row is None:
            continue
        replica_labels = {"task": row.task, "replica": str(row.index)}
        values = (
            ("replica.cpu_cores", used.cpu_cores),
            ("replica.memory_bytes", used.memory_bytes),
            ("replica.accelerator_memory_bytes", used.accelerator_memory_bytes),
        )
        out.extend(
            Sample(
                name,
                at,
                float(value),
                replica_labels,
                workspace_id=row.workspace_id,
                job_id=row.job_id,
                node_id=node_id if node_id is not None else row.node_id,
            )
            for name, value in values
            if value is not None
        )
    return out


@dataclass(frozen=True, slots=True)
class TickStats:
    """What the last tick did: nodes read, samples written, and how long it took (reads and the write)."""

    nodes: int
    samples: int
    wall_s: float


class SamplerController(Controller):
    """Samples every executor's nodes each ``metrics_sample_interval_s`` while holding the ``sampler`` lease.

    Args:
        db: The database (lease, running replicas, node ids, series).
        settings: ``metrics_sample_interval_s`` is read.
        executors: The executors by name (``local``, ``ray``, ``slurm``).
        owner: The lease owner name (default ``host:pid``).
    """

    name = "sampler"

    def __init__(
        self, db: Database, settings: Settings, executors: Mapping[str, Executor], *, owner: str | None = None
    ) -> None:
        super().__init__()
        self.db = db
        self.executors = dict(executors)
        self.interval_s = settings.metrics_sample_interval_s
        self.owner = owner or replica_name()
        self.lease: leases.NamedLease | None = None
        self.previous: dict[tuple[str, str], NodeCounters] = {}
        self.last: TickStats | None = None

    @property
    def _ttl_s(self) -> float:
        return self.interval_s * _LEASE_INTERVALS

    async def _hold(self) -> bool:
        if self.lease is None:
            self.lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self._ttl_s)
            if self.lease is None:
                self.previous.clear()  # another replica samples: ours would be stale when we take over
        return self.lease is not None

    async def read(self, running: Sequence[RunningReplica]) -> list[tuple[str, NodeCounters]]:
        """Every executor's nodes, with the counters of ``running`` replicas: ``(executor, counters)`` pairs."""
        out: list[tuple[str, NodeCounters]] = []
        for name, executor in self.executors.items():
            handles = [r.handle for r in running if r.handle.executor == name]
            try:
                counters = await executor.sample(handles)
            except Exception:  # one engine down must not hide the others' nodes
                log.warning("sampler: executor %s could not be sampled", name, exc_info=True)
                continue
            out.extend((name, c) for c in counters)
        return out

    async def tick(self) -> None:
        if not await self._hold():
            return
        started = time.monotonic()
        async with self.db.read() as session:
            running = await jobs.running_replicas(session)
            node_ids = await inventory.node_ids(session)
        by_run_dir = {r.handle.run_dir: r for r in running}
        read = await self.read(running)
        samples: list[Sample] = []
        previous, self.previous = self.previous, {}
        for executor, counters in read:
            key = (executor, counters.node)
            self.previous[key] = counters
            samples.extend(samples_of(usage(previous.get(key), counters), node_ids.get(counters.node), by_run_dir))
        assert self.lease is not None
        async with self.db.write() as session:
            if not await leases.renew_in(session, self.lease, ttl_s=self._ttl_s):
                log.info("sampler: lease lost to another replica; not writing this tick")
                self.lease = None
                self.previous.clear()
                return
            await record_samples(session, samples)
        self.last = TickStats(len(read), len(samples), time.monotonic() - started)
        log.debug("sampler: %d nodes, %d samples in %.3f s", len(read), len(samples), self.last.wall_s)


def build(ctx: AppContext) -> SamplerController | None:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES`` (none without executors, or with the
    interval set to 0)."""
    if not ctx.executors or ctx.settings.metrics_sample_interval_s == 0:
        return None
    return SamplerController(ctx.db, ctx.settings, ctx.executors)
