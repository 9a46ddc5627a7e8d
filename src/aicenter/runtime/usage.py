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
from collections.abc import Callable
from typing import Any, NamedTuple

__all__ = ["USAGE_FILE", "Usage", "cgroup_usage", "children_map", "pids_usage", "replica_usage", "tree_usage"]

USAGE_FILE = "usage.json"
_START_TIME_TOLERANCE_S = 0.05
_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


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


def pids_usage(pids: list[int]) -> tuple[float, int, list[int]]:
    """``(cpu seconds, resident bytes, live pids)`` summed over ``pids``: user + system of each, plus what each
    reaped from its children (those are gone: nothing is counted twice). Read raw from ``/proc/<pid>/stat`` and
    ``statm``: two reads per process, ~25 us, where psutil's identity checks make it ~0.3 ms."""
    cpu_ticks, pages, alive = 0, 0, []
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{pid}/statm", "rb") as f:
                statm = f.read()
        except OSError:  # ended between listing and reading
            continue
        # After "pid (comm) ": state ppid ... utime(14) stime(15) cutime(16) cstime(17), 1-based over the line.
        fields = stat[stat.rfind(b")") + 2 :].split()
        try:
            cpu_ticks += sum(int(x) for x in fields[11:15])
            pages += int(statm.split()[1])
        except (IndexError, ValueError):
            continue
        alive.append(pid)
    return cpu_ticks / _CLOCK_TICKS, pages * _PAGE_SIZE, alive


def children_map() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process: one scan of ``/proc`` for all of a tick's replicas. Read raw
    (``/proc/<pid>/stat``'s 4th field): psutil's ``children`` and ``process_iter`` cost ~0.3 ms per process here
    (pid-reuse checks), 60 ms per call on a host of 200 processes; this ~4 ms."""
    out: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:  # ended meanwhile
            continue
        fields = stat[stat.rfind(b")") + 2 :].split(b" ", 2)  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and fields[1].isdigit():
            out.setdefault(int(fields[1]), []).append(int(entry))
    return out


def tree_usage(
    pid: int, start_time: float | None = None, children: Callable[[], dict[int, list[int]]] | None = None
) -> tuple[float, int, list[int]] | None:
    """``(cpu seconds, resident bytes, pids)`` of process ``pid`` and its descendants; None when it is gone
    (or, with ``start_time``, when ``pid`` now names another process).

    Args:
        pid: The tree's root.
        start_time: Its start time (seconds since the epoch), the guard against pid reuse.
        children: Gives a ``children_map()`` shared by several calls; None: psutil finds this tree alone.
    """
    import psutil  # lazy: the launcher's start does not pay for it

    try:
        root = psutil.Process(pid)
        if start_time is not None and abs(root.create_time() - start_time) > _START_TIME_TOLERANCE_S:
            return None
        if children is None:
            pids = [pid, *(c.pid for c in root.children(recursive=True))]
        else:
            tree, pids, todo = children(), [], [pid]
            while todo:
                current = todo.pop()
                pids.append(current)
                todo.extend(tree.get(current, ()))
    except psutil.Error:
        return None
    return pids_usage(pids)


def replica_usage(
    dirs: Any, pid: Any, start_time: Any = None, children: Callable[[], dict[int, list[int]]] | None = None
) -> Usage | None:
    """The replica's usage from its control group ``dirs`` (the launcher's record ``cgroups``; empty: none) and,
    for what the group does not account, its processes: the group's, else the process tree of its command
    ``pid`` (``children``: gives a ``children_map`` shared by a tick's replicas, built only when one of them has
    no group). None when neither is there."""
    cpu: float | None = None
    memory: int | None = None
    if isinstance(dirs, dict) and dirs:
        cpu, memory, pids = cgroup_usage({str(k): str(v) for k, v in dirs.items()})
        if pids and cpu is not None and memory is not None:
            return Usage(cpu, memory, pids, "cgroup")
        if pids:  # what the group does not account, from its processes: no tree to walk
            group_cpu, group_rss, _ = pids_usage(pids)
            cpu = group_cpu if cpu is None else cpu
            memory = group_rss if memory is None else memory
            return Usage(cpu, memory, pids, "cgroup+processes")
    try:
        root = int(pid) if pid else None
        tree = None if root is None else tree_usage(root, None if start_time is None else float(start_time), children)
    except (TypeError, ValueError):
        tree = None
    if tree is None:
        return None
    return Usage(tree[0], tree[1], tree[2], "processes")
