"""``aicenter top``: a live view of the cluster in the terminal, through the REST API only.

Each frame reads the newest sampled values (``Client.latest_values``: the samplers' ``node.*``, ``accelerator.*``
and ``replica.*`` series), the jobs the caller may see, and, for platform admins, the nodes (capacity) and the
running jobs' replicas (what is allocated on each node). A member sees the cluster's use and their own jobs; the
allocation column needs the node list, which only admins may read, and shows ``-`` otherwise.

``collect`` does the reading, ``render`` the drawing: a pure function of the collected ``Top``, so a frame is
tested without a terminal.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated

import typer

from aicenter.cli import output as out
from aicenter.cli.common import client

if TYPE_CHECKING:
    from aicenter.client import Client, Job, LatestValue

NODE_SERIES = (
    "node.cpu_utilization",
    "node.memory_used_bytes",
    "node.memory_total_bytes",
    "node.accelerator_telemetry",
)
ACCELERATOR_SERIES = ("accelerator.utilization", "accelerator.memory_used_bytes", "accelerator.memory_total_bytes")
REPLICA_SERIES = ("replica.cpu_cores", "replica.memory_bytes", "replica.accelerator_memory_bytes")
ACTIVE = ("pending", "queued", "scheduled", "starting", "running", "restarting", "preempted")
# Jobs whose replicas are read for the allocation column: one request each, so a frame stays under a second.
MAX_ALLOCATION_JOBS = 100
FAILED_WINDOW = timedelta(hours=24)
TOP_JOBS = 10


@dataclass
class NodeRow:
    """One node's frame line: use (sampled) and, for admins, capacity and allocation."""

    name: str
    cpu_utilization: float | None = None
    memory_used: float | None = None
    memory_total: float | None = None
    accelerator_telemetry: bool | None = None
    accelerators: list[tuple[str, float | None, float | None, float | None]] = field(default_factory=list)
    cpu_capacity_milli: int | None = None
    cpu_allocated_milli: int | None = None
    memory_allocated: int | None = None
    accelerators_allocated: int | None = None
    accelerator_count: int | None = None
    state: str | None = None


@dataclass
class JobRow:
    """One job's sampled use: replica CPU cores and memory summed over its replicas."""

    job_id: int
    name: str
    status: str
    cpu_cores: float = 0.0
    memory: float = 0.0
    accelerator_memory: float = 0.0


@dataclass
class Top:
    """Everything one frame shows."""

    at: datetime
    nodes: list[NodeRow]
    counts: dict[str, int]
    jobs: list[JobRow]
    admin: bool


def _nodes(values: list[LatestValue]) -> dict[str, NodeRow]:
    rows: dict[str, NodeRow] = {}
    devices: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)
    types: dict[tuple[str, str], str] = {}
    for v in values:
        node = v.labels.get("node")
        if not node:
            continue
        row = rows.setdefault(node, NodeRow(node))
        if v.name == "node.cpu_utilization":
            row.cpu_utilization = v.value
        elif v.name == "node.memory_used_bytes":
            row.memory_used = v.value
        elif v.name == "node.memory_total_bytes":
            row.memory_total = v.value
        elif v.name == "node.accelerator_telemetry":
            row.accelerator_telemetry = v.value >= 0.5
        elif v.name.startswith("accelerator."):
            key = (node, v.labels.get("device", "?"))
            devices[key][v.name] = v.value
            types[key] = v.labels.get("type", "")
    for (node, device), got in sorted(devices.items(), key=lambda kv: (kv[0][0], int(kv[0][1] or 0))):
        rows[node].accelerators.append(
            (
                f"{device}:{types[(node, device)]}",
                got.get("accelerator.utilization"),
                got.get("accelerator.memory_used_bytes"),
                got.get("accelerator.memory_total_bytes"),
            )
        )
    return rows


def _count(api: Client, status: str, since: datetime | None = None, cap: int = 10_000) -> int:
    n = 0
    for job in api.list_jobs(status=status):
        if since is not None and job.finished_at is not None and job.finished_at < since:
            break  # newest first: the rest finished earlier still
        n += 1
        if n >= cap:
            break
    return n


def _allocate(api: Client, rows: dict[str, NodeRow], running: list[Job]) -> None:
    """Capacity from the node list and allocation from the running jobs' replicas (platform admins)."""
    for node in api.list_nodes():
        row = rows.setdefault(node.name, NodeRow(node.name))
        row.cpu_capacity_milli = node.cpu_milli
        row.memory_total = row.memory_total or float(node.memory_bytes)
        row.accelerator_count = len(node.accelerators)
        row.state = node.state
        row.cpu_allocated_milli, row.memory_allocated, row.accelerators_allocated = 0, 0, 0
    for job in running[:MAX_ALLOCATION_JOBS]:
        for replica in api.job_replicas(job.id):
            row_of = rows.get(replica.node_name or "")
            if row_of is None or replica.status not in ("starting", "running"):
                continue
            row_of.cpu_allocated_milli = (row_of.cpu_allocated_milli or 0) + replica.cpu_milli
            row_of.memory_allocated = (row_of.memory_allocated or 0) + replica.memory_bytes
            row_of.accelerators_allocated = (row_of.accelerators_allocated or 0) + replica.gpu


def collect(api: Client, *, window_s: float = 120.0) -> Top:
    """Read one frame's data through the API (see the module docstring for who sees what)."""
    from aicenter.client import ApiError

    now = datetime.now(UTC)
    values = api.latest_values([*NODE_SERIES, *ACCELERATOR_SERIES], window_s=window_s)
    rows = _nodes(values)
    running = list(api.list_jobs(status="running"))
    admin = True
    try:
        _allocate(api, rows, running)
    except ApiError as exc:
        if exc.status != 403:
            raise
        admin = False
    counts = {
        "running": len(running),
        "queued": _count(api, "queued") + _count(api, "pending"),
        "failed (24h)": _count(api, "failed", since=now - FAILED_WINDOW),
    }
    by_job: dict[int, JobRow] = {j.id: JobRow(j.id, j.name, j.status) for j in running}
    for v in api.latest_values(REPLICA_SERIES, window_s=window_s):
        if v.job_id is None or v.job_id not in by_job:
            continue
        row = by_job[v.job_id]
        if v.name == "replica.cpu_cores":
            row.cpu_cores += v.value
        elif v.name == "replica.memory_bytes":
            row.memory += v.value
        else:
            row.accelerator_memory += v.value
    ranked = sorted(by_job.values(), key=lambda j: (j.cpu_cores, j.memory), reverse=True)[:TOP_JOBS]
    return Top(now, sorted(rows.values(), key=lambda r: r.name), counts, ranked, admin)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def _size(value: float | None) -> str:
    return "-" if value is None else out.size(int(value))


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return lines


def _node_line(n: NodeRow, admin: bool) -> list[str]:
    cpu_alloc = "-"
    if admin and n.cpu_capacity_milli:
        cpu_alloc = f"{out.cores(n.cpu_allocated_milli or 0)}/{out.cores(n.cpu_capacity_milli)}"
    mem_alloc = "-"
    if admin and n.memory_total:
        mem_alloc = f"{_size(n.memory_allocated or 0)}/{_size(n.memory_total)}"
    memory = "-" if n.memory_used is None else f"{_size(n.memory_used)}/{_size(n.memory_total)}"
    if n.accelerators:
        used = [a[1] for a in n.accelerators if a[1] is not None]
        accel = f"{len(n.accelerators)} at {_pct(sum(used) / len(used)) if used else '-'}"
    elif n.accelerator_telemetry is False and n.accelerator_count:
        accel = "no accelerator telemetry"
    elif n.accelerator_telemetry is False:
        accel = "none (no accelerator telemetry)"
    else:
        accel = "-"
    if admin and n.accelerator_count:
        accel += f", {n.accelerators_allocated or 0}/{n.accelerator_count} allocated"
    return [n.name, n.state or "-", _pct(n.cpu_utilization), cpu_alloc, memory, mem_alloc, accel]


def render(top: Top) -> str:
    """One frame as text: nodes, job counts, top jobs, readable units."""
    lines = [f"aicenter top  {top.at.strftime('%Y-%m-%d %H:%M:%S')} UTC", ""]
    lines.append("jobs: " + "  ".join(f"{name} {n}" for name, n in top.counts.items()))
    lines.append("")
    headers = ["NODE", "STATE", "CPU USED", "CPU ALLOC", "MEMORY USED", "MEMORY ALLOC", "ACCELERATORS"]
    lines += _table(headers, [_node_line(n, top.admin) for n in top.nodes]) if top.nodes else ["no node telemetry yet"]
    devices = [(n.name, a) for n in top.nodes for a in n.accelerators]
    if devices:
        lines.append("")
        rows = [[node, a[0], _pct(a[1]), f"{_size(a[2])}/{_size(a[3])}"] for node, a in devices]
        lines += _table(["NODE", "DEVICE", "UTIL", "MEMORY"], rows)
    lines.append("")
    if top.jobs:
        rows = [
            [
                str(j.job_id),
                j.name,
                j.status,
                f"{j.cpu_cores:.2f}",
                _size(j.memory),
                _size(j.accelerator_memory or None),
            ]
            for j in top.jobs
        ]
        lines += _table(["JOB", "NAME", "STATUS", "CPU CORES", "MEMORY", "ACCEL MEMORY"], rows)
    else:
        lines.append("no running jobs")
    if not top.admin:
        lines += ["", "(allocation columns: platform admins only)"]
    return "\n".join(lines)


def top(
    interval: Annotated[float, typer.Option("--interval", "-n", min=1.0, help="Seconds between frames.")] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
) -> None:
    """A live view of the cluster: node CPU, memory and accelerators used vs allocated, jobs, top jobs by use."""
    api = client()
    if once:
        typer.echo(render(collect(api)))
        return
    try:
        while True:
            frame = render(collect(api))
            typer.echo("\x1b[H\x1b[2J" + frame, nl=True)  # home and clear: redraw in place
            time.sleep(interval)
    except KeyboardInterrupt:
        return
