"""What a replica uses now: CPU seconds and resident memory of its control group, else of its process tree.

Read by the ``local`` executor's telemetry (``aicenter.executors.local.telemetry``) on its own host, and by the
launcher itself where the server cannot reach the node's ``/proc`` (Slurm's nodes): there the launcher writes
``usage.json`` into the run directory every ``usage_interval_s`` of its plan, and the executor reads that file on
the shared jobs path. One read costs ~0.2 ms for a replica of a few processes.

With a control group (``aicenter.runtime.cgroups``), its processes are ``cgroup.procs`` (which also holds what left
the process group with ``setsid``), its memory the kernel's count (``memory.stat``: anonymous + mapped file pages,
the group's resident set) and its CPU the kernel's cumulative usage where the hierarchy accounts it (v2
``cpu.stat``; v1 ``cpuacct.usage`` when ``cpuacct`` is mounted with ``cpu``). Without one, or where the group lacks
one of them, the command's process tree through ``psutil``: RSS summed, CPU as user + system of the live
processes plus what they reaped from their children. This module uses ``os`` only at import (the launcher imports
it); ``psutil`` is imported when a process tree is read.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple

__all__ = ["USAGE_FILE", "Usage", "cgroup_usage", "replica_usage", "tree_usage"]

USAGE_FILE = "usage.json"
_START_TIME_TOLERANCE_S = 0.05


class Usage(NamedTuple):
    """A replica's counters: cumulative CPU seconds, resident bytes, its pids, and where they were read."""

    cpu_seconds: float | None
    memory_bytes: int | None
    pids: list[int]
    source: str


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _stat(text: str) -> dict[str, int]:
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            out[key] = int(value)
    return out


def cgroup_usage(dirs: dict[str, str]) -> tuple[float | None, int | None, list[int]]:
    """``(cpu seconds, resident bytes, pids)`` of a replica's control group(s); None where not accounted.

    Args:
        dirs: The launcher's record ``cgroups``: ``{"": dir}`` for v2, controller -> dir for v1.
    """
    pids: set[int] = set()
    for d in set(dirs.values()):
        pids.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split() if p.isdigit())
    cpu: float | None = None
    memory: int | None = None
    if "" in dirs:  # v2: one directory
        stat = _stat(_read(os.path.join(dirs[""], "cpu.stat")))
        if "usage_usec" in stat:
            cpu = stat["usage_usec"] / 1e6
        mem = _stat(_read(os.path.join(dirs[""], "memory.stat")))
        if "anon" in mem:
            memory = mem["anon"] + mem.get("file_mapped", 0)
    else:
        usage = _read(os.path.join(dirs["cpu"], "cpuacct.usage")).strip() if "cpu" in dirs else ""
        if usage.isdigit():
            cpu = int(usage) / 1e9
        if "memory" in dirs:
            mem = _stat(_read(os.path.join(dirs["memory"], "memory.stat")))
            if "total_rss" in mem:
                memory = mem["total_rss"] + mem.get("total_mapped_file", 0)
    return cpu, memory, sorted(pids)


def tree_usage(pid: int, start_time: float | None = None) -> tuple[float, int, list[int]] | None:
    """``(cpu seconds, resident bytes, pids)`` of process ``pid`` and its descendants; None when it is gone
    (or, with ``start_time``, when ``pid`` now names another process)."""
    import psutil  # lazy: the launcher's start does not pay for it

    try:
        root = psutil.Process(pid)
        if start_time is not None and abs(root.create_time() - start_time) > _START_TIME_TOLERANCE_S:
            return None
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return None
    cpu, rss, pids = 0.0, 0, []
    for proc in procs:
        try:
            with proc.oneshot():
                t = proc.cpu_times()
                cpu += t.user + t.system + t.children_user + t.children_system
                rss += proc.memory_info().rss
            pids.append(proc.pid)
        except psutil.Error:  # ended between listing and reading
            continue
    return cpu, rss, pids


def replica_usage(dirs: Any, pid: Any, start_time: Any = None) -> Usage | None:
    """The replica's usage from its control group ``dirs`` (the launcher's record ``cgroups``; empty: none) and,
    for what the group does not account, the process tree of its command ``pid``; None when neither is there."""
    cpu: float | None = None
    memory: int | None = None
    pids: list[int] = []
    source = "processes"
    if isinstance(dirs, dict) and dirs:
        cpu, memory, pids = cgroup_usage({str(k): str(v) for k, v in dirs.items()})
        source = "cgroup"
    if cpu is None or memory is None or not pids:
        try:
            tree = tree_usage(int(pid), None if start_time is None else float(start_time)) if pid else None
        except (TypeError, ValueError):
            tree = None
        if tree is None:
            return None if not pids else Usage(cpu, memory, pids, source)
        cpu = tree[0] if cpu is None else cpu
        memory = tree[1] if memory is None else memory
        pids = pids or tree[2]
        source = "cgroup+processes" if source == "cgroup" else source
    return Usage(cpu, memory, pids, source)
