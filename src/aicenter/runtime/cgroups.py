"""A replica's resource limits, enforced by the kernel: one control group (cgroup) per replica.

The launcher (``aicenter.runtime.launcher``) makes the replica's group before it starts the command, and the
command's process joins it between ``fork`` and ``exec`` (``ReplicaGroup.enter``), so nothing the command ever
starts runs outside it, including processes that leave its process group with ``setsid``. The kernel then:

- caps the memory (``memory.max`` / ``memory.limit_in_bytes``, swap included: ``memory.swap.max`` 0 /
  ``memory.memsw.limit_in_bytes``) and OOM-kills inside the group when it is reached, before the memory is
  used, where the launcher's sampling watchdog saw a burst only after it happened (and not at all in tmpfs
  files, /dev/shm, or between two samples). A kernel OOM kill is counted (``memory.events`` /
  ``memory.oom_control``: ``oom_kill``) and the replica's reason is ``oom``, as with the watchdog;
- shares the CPU by the request (``cpu.weight`` / ``cpu.shares``, proportional to ``cpu_milli``, as Kubernetes
  maps a request) and caps it (``cpu.max`` / ``cpu.cfs_quota_us``) at the request, but never below one core:
  a quota of a 10m request (1 ms per 100 ms) would make even an interpreter's start take a second, while the
  weight already gives every replica its requested share when the node is busy;
- caps the number of processes and threads (``pids.max``): a fork bomb fails with EAGAIN at the limit.

At the end ``ReplicaGroup.remove`` kills whatever is left in the group (``cgroup.kill``, else every pid of
``cgroup.procs``) and removes it.

Two kernel interfaces, detected at run time (``layouts``), first usable wins:

- cgroup v2 (production hosts: ``/sys/fs/cgroup`` is cgroup2): groups go in ``<parent>/aicenter/<replica>``,
  where ``<parent>`` is the group above the launcher's own (the server's service group: a systemd unit with
  ``Delegate=yes`` and ``DelegateSubgroup=``), or the configured parent. v2 forbids a group with processes
  from handing controllers to children, which is why the replica groups cannot go under the server's own
  group. The memory, cpu and pids controllers are enabled in ``cgroup.subtree_control`` down the way;
- cgroup v1 (this kind of CI container: one hierarchy per controller under ``/sys/fs/cgroup/<controller>``):
  ``<own>/aicenter/<replica>`` in each of the memory, cpu and pids hierarchies, ``<own>`` being the
  launcher's own group there; v1 lets a group with processes have children, and nesting keeps the limits a
  container runtime put on the server above the replicas.

Where neither is writable (an unprivileged server, a read-only ``/sys/fs/cgroup``), there is no group and the
launcher keeps its memory watchdog. Only controllers with a limit to enforce are required.

This module is imported by the launcher, so it uses ``os`` only; the decisions (which files, which values)
are pure functions of the text of ``/proc/self/mountinfo`` and ``/proc/self/cgroup`` and of the files in the
hierarchy, so they are unit-tested on a fake tree.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Sequence
from typing import NamedTuple

__all__ = [
    "CPU_PERIOD_US",
    "GROUP_PARENT",
    "Hierarchy",
    "Layout",
    "Limits",
    "ReplicaGroup",
    "cpu_quota_us",
    "group_name",
    "hierarchies",
    "layouts",
    "own_groups",
    "v1_settings",
    "v2_settings",
]

# The CFS period the quota is a share of: the kernel's default, 100 ms. A shorter one throttles more evenly
# but costs scheduler overhead; 100 ms is what container runtimes use too.
CPU_PERIOD_US = 100_000
# The kernel refuses a quota under 1 ms.
MIN_CPU_QUOTA_US = 1_000
# The CPU cap is the request, but at least one core: below it only the weight applies (module docstring).
MIN_CPU_CAP_MILLI = 1_000
# The group that holds every replica's group, below the parent the layout chose.
GROUP_PARENT = "aicenter"
CONTROLLERS = ("memory", "cpu", "pids")
# After the last kill, a group is busy until its processes are fully gone (a few ms); ``remove`` retries.
REMOVE_TIMEOUT_S = 5.0
REMOVE_RETRY_S = 0.02


class Limits(NamedTuple):
    """What a replica may use; 0 means no limit of that kind."""

    memory_bytes: int = 0
    cpu_milli: int = 0
    pids_max: int = 0

    def controllers(self) -> tuple[str, ...]:
        """The controllers these limits need, in ``CONTROLLERS`` order."""
        wanted = {"memory": self.memory_bytes, "cpu": self.cpu_milli, "pids": self.pids_max}
        return tuple(c for c in CONTROLLERS if wanted[c] > 0)


def cpu_quota_us(cpu_milli: int, period_us: int = CPU_PERIOD_US) -> int:
    """The CPU time per period a request of ``cpu_milli`` milli-cores may use (1000 = one core): the request,
    at least one core (``MIN_CPU_CAP_MILLI``) and the kernel's 1 ms."""
    return max(MIN_CPU_QUOTA_US, max(cpu_milli, MIN_CPU_CAP_MILLI) * period_us // 1000)


def cpu_shares(cpu_milli: int) -> int:
    """cgroup v1 ``cpu.shares`` of a request: 1024 per core, at least the kernel's 2 (Kubernetes' mapping)."""
    return max(2, cpu_milli * 1024 // 1000)


def cpu_weight(cpu_milli: int) -> int:
    """cgroup v2 ``cpu.weight`` (1..10000) of a request: ``cpu_shares`` mapped as Kubernetes and runc map it."""
    return min(10_000, 1 + (cpu_shares(cpu_milli) - 2) * 9999 // 262_142)


def v2_settings(limits: Limits) -> list[tuple[str, str, bool]]:
    """The files written in a v2 replica group, in order: ``(file, value, required)``.

    ``memory.swap.max`` 0: ``memory.max`` counts RAM only, and a job must not dodge it into swap (absent where
    the kernel has no swap accounting). ``memory.oom.group`` 1: an OOM kill takes the whole replica, as the
    watchdog did, rather than one process of it (a data loader worker) leaving the rest half-alive.
    """
    out: list[tuple[str, str, bool]] = []
    if limits.memory_bytes > 0:
        out += [
            ("memory.max", str(limits.memory_bytes), True),
            ("memory.swap.max", "0", False),
            ("memory.oom.group", "1", False),
        ]
    if limits.cpu_milli > 0:
        out.append(("cpu.weight", str(cpu_weight(limits.cpu_milli)), False))
        out.append(("cpu.max", f"{cpu_quota_us(limits.cpu_milli)} {CPU_PERIOD_US}", True))
    if limits.pids_max > 0:
        out.append(("pids.max", str(limits.pids_max), True))
    return out


def v1_settings(limits: Limits) -> dict[str, list[tuple[str, str, bool]]]:
    """The files written in each v1 hierarchy's replica group, in order: controller -> ``(file, value, required)``.

    ``memory.memsw.limit_in_bytes`` (memory + swap) equal to the memory limit: no swap beyond it. It must be
    written after ``memory.limit_in_bytes`` (the kernel keeps memsw >= memory), and exists only with swap
    accounting. The period is written before the quota, which is checked against it.
    """
    out: dict[str, list[tuple[str, str, bool]]] = {}
    if limits.memory_bytes > 0:
        value = str(limits.memory_bytes)
        out["memory"] = [("memory.limit_in_bytes", value, True), ("memory.memsw.limit_in_bytes", value, False)]
    if limits.cpu_milli > 0:
        out["cpu"] = [
            ("cpu.shares", str(cpu_shares(limits.cpu_milli)), False),
            ("cpu.cfs_period_us", str(CPU_PERIOD_US), True),
            ("cpu.cfs_quota_us", str(cpu_quota_us(limits.cpu_milli)), True),
        ]
    if limits.pids_max > 0:
        out["pids"] = [("pids.max", str(limits.pids_max), True)]
    return out


def group_name(label: str, pid: int) -> str:
    """A replica group's name: its label in the characters a path takes, and the launcher's pid (unique among
    live launchers; ``job 7 worker/1 attempt 0`` -> ``job-7-worker-1-attempt-0.4242``)."""
    safe = "".join(c if c.isalnum() or c in "_-" else "-" for c in label).strip("-")
    while "--" in safe:
        safe = safe.replace("--", "-")
    return f"{safe[:80] or 'replica'}.{pid}"


class Hierarchy(NamedTuple):
    """A mounted cgroup hierarchy.

    Attributes:
        version: 1 or 2.
        controllers: A v1 hierarchy's controllers (``cpu`` and ``cpuacct`` are often mounted together); empty
            for v2, whose controllers are per group (``cgroup.controllers``).
        mountpoint: Where it is mounted.
        root: The group at the mountpoint (``/`` unless a container runtime mounted a sub-tree).
        writable: Mounted read-write.
    """

    version: int
    controllers: frozenset[str]
    mountpoint: str
    root: str
    writable: bool

    def path(self, group: str) -> str | None:
        """The directory of ``group`` (a path as ``/proc/self/cgroup`` writes it), or None outside this mount."""
        rel = _relative(group, self.root)
        return None if rel is None else os.path.join(self.mountpoint, rel) if rel else self.mountpoint


def _relative(path: str, root: str) -> str | None:
    if root == "/":
        return path.strip("/")
    if path == root:
        return ""
    if path.startswith(root.rstrip("/") + "/"):
        return path[len(root.rstrip("/")) + 1 :].strip("/")
    return None


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, char)
    return field


def hierarchies(mountinfo: str) -> list[Hierarchy]:
    """The cgroup hierarchies in the text of ``/proc/self/mountinfo``, in mount order."""
    out = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 6 or len(after) < 3:
            continue
        fstype, super_options = after[0], after[2].split(",")
        root, mountpoint, options = _unescape(fields[3]), _unescape(fields[4]), fields[5].split(",")
        writable = "rw" in options and "ro" not in super_options
        if fstype == "cgroup2":
            out.append(Hierarchy(2, frozenset(), mountpoint, root, writable))
        elif fstype == "cgroup":
            controllers = frozenset(o for o in super_options if o in CONTROLLERS or o == "cpuacct")
            if controllers:
                out.append(Hierarchy(1, controllers, mountpoint, root, writable))
    return out


def own_groups(proc_cgroup: str) -> dict[str, str]:
    """The groups of ``/proc/self/cgroup``: v1 controller -> group, and ``""`` -> the v2 group."""
    out: dict[str, str] = {}
    for line in proc_cgroup.splitlines():
        _id, _, rest = line.partition(":")
        names, _, group = rest.partition(":")
        if not names:
            out[""] = group
        for name in names.split(","):
            if name in CONTROLLERS:
                out[name] = group
    return out


class Layout(NamedTuple):
    """Where a replica's groups go.

    Attributes:
        mechanism: ``cgroup-v2`` or ``cgroup-v1``; ``status.json`` records it as the replica's ``limits``.
        parents: The directory that holds the replica groups (the ``aicenter`` group), per controller for v1
            (each hierarchy has its own), and under ``""`` for v2 (one group has them all).
        enable: v2: the groups whose ``cgroup.subtree_control`` must hand the controllers down (parent first).
    """

    mechanism: str
    parents: dict[str, str]
    enable: tuple[str, ...] = ()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _v2_layout(h: Hierarchy, own: str | None, wanted: Sequence[str], parent: str) -> Layout | str:
    if not h.writable:
        return f"cgroup2 at {h.mountpoint} is read-only"
    if parent:
        group = parent
    elif own is None:
        return "no cgroup2 group in /proc/self/cgroup"
    else:
        # Above our own group: a group with processes (ours) cannot hand controllers to children.
        group = os.path.join(os.path.dirname(own.rstrip("/")) or "/", GROUP_PARENT)
    top = h.path(group)
    if top is None:
        return f"{group} is outside the cgroup2 mount at {h.mountpoint}"
    above = os.path.dirname(top)
    if not top.startswith(h.mountpoint) or len(above) < len(h.mountpoint):
        return f"{group} has no parent inside {h.mountpoint}"
    available = set(_read(os.path.join(above, "cgroup.controllers")).split())
    missing = [c for c in wanted if c not in available]
    if missing:
        return f"cgroup2 group {above} has no {' '.join(missing)} controller"
    if not os.access(above, os.W_OK):
        return f"cgroup2 group {above} is not writable"
    return Layout("cgroup-v2", {"": top}, (above, top))


def _v1_layout(found: Sequence[Hierarchy], own: dict[str, str], wanted: Sequence[str], parent: str) -> Layout | str:
    parents: dict[str, str] = {}
    for controller in wanted:
        h = next((h for h in found if h.version == 1 and controller in h.controllers), None)
        if h is None:
            return f"no cgroup v1 {controller} hierarchy"
        if not h.writable:
            return f"cgroup v1 {controller} hierarchy at {h.mountpoint} is read-only"
        base = h.path(parent) if parent else h.path(own.get(controller, "/"))
        if base is None:
            return f"our {controller} group is outside its mount at {h.mountpoint}"
        # The configured parent is the replicas' group itself; by default it is ``aicenter`` below our own.
        top = base if parent else os.path.join(base, GROUP_PARENT)
        if not os.access(os.path.dirname(top), os.W_OK):
            return f"cgroup v1 group {os.path.dirname(top)} is not writable"
        parents[controller] = top
    return Layout("cgroup-v1", parents)


def layouts(
    limits: Limits, parent: str = "", *, mountinfo: str | None = None, proc_cgroup: str | None = None
) -> tuple[list[Layout], list[str]]:
    """The usable layouts for ``limits``, best first (v2, then v1), and why the others are not usable.

    Args:
        limits: The replica's limits; only the controllers they need are required.
        parent: A group path (as ``/proc/self/cgroup`` writes them) to hold the replica groups instead of the
            default one (see the module docstring); "" for the default.
        mountinfo: The text of ``/proc/self/mountinfo`` (read when None).
        proc_cgroup: The text of ``/proc/self/cgroup`` (read when None).
    """
    wanted = limits.controllers()
    if not wanted:
        return [], ["no limit to enforce"]
    found = hierarchies(_read("/proc/self/mountinfo") if mountinfo is None else mountinfo)
    own = own_groups(_read("/proc/self/cgroup") if proc_cgroup is None else proc_cgroup)
    v2 = next((h for h in found if h.version == 2), None)
    choices = [
        "no cgroup2 mount" if v2 is None else _v2_layout(v2, own.get(""), wanted, parent),
        _v1_layout(found, own, wanted, parent),
    ]
    return [c for c in choices if isinstance(c, Layout)], [c for c in choices if isinstance(c, str)]


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _make_group_dir(path: str) -> None:
    """``mkdir`` in a cgroup filesystem: the kernel fills the new directory with the group's interface files
    (the unit tests replace this with a function that does the same in a plain directory)."""
    os.mkdir(path)


def _enable_controllers(group: str, wanted: Sequence[str]) -> None:
    """Hand ``wanted`` down to ``group``'s children (v2 ``cgroup.subtree_control``), those not handed yet."""
    present = set(_read(os.path.join(group, "cgroup.subtree_control")).split())
    missing = [c for c in wanted if c not in present]
    if missing:
        _write(os.path.join(group, "cgroup.subtree_control"), " ".join(f"+{c}" for c in missing))


def _apply(group: str, settings: Sequence[tuple[str, str, bool]]) -> None:
    for name, value, required in settings:
        path = os.path.join(group, name)
        if not required and not os.path.exists(path):
            continue
        _write(path, value)


def _prune(parent: str) -> None:
    """Remove the groups earlier launchers left behind: a launcher killed by SIGKILL does not clean up.

    Only a group whose launcher (the pid after the last dot) is gone, and only when empty: ``rmdir`` of a
    group with processes fails, and that of a live launcher's group is never tried.
    """
    try:
        names = os.listdir(parent)
    except OSError:
        return
    for name in names:
        pid = name.rpartition(".")[2]
        if not pid.isdigit() or not os.path.isdir(os.path.join(parent, name)):
            continue
        try:
            os.kill(int(pid), 0)
            continue  # alive (or a reused pid: then its group stays until that process ends)
        except ProcessLookupError:
            pass
        except PermissionError:
            continue
        with contextlib.suppress(OSError):
            os.rmdir(os.path.join(parent, name))


class ReplicaGroup:
    """One replica's control group(s): one directory for v2, one per controller's hierarchy for v1."""

    def __init__(self, mechanism: str, dirs: dict[str, str]) -> None:
        self.mechanism = mechanism
        self.dirs = dirs
        self._procs_fds: list[int] = []

    @classmethod
    def create(cls, layout: Layout, name: str, limits: Limits) -> ReplicaGroup:
        """Make the group(s) of ``layout`` named ``name`` and write ``limits``; removed again on any failure.

        Raises:
            OSError: A directory or a limit could not be written (the kernel refused a value, EBUSY enabling
                a controller in a group with processes, EACCES).
        """
        wanted = limits.controllers()
        group = cls(layout.mechanism, {})
        try:
            if layout.mechanism == "cgroup-v2":
                top = layout.parents[""]
                for above in layout.enable:  # the group above ``aicenter``, then ``aicenter`` itself
                    if above == top:
                        with contextlib.suppress(FileExistsError):  # another launcher's, or made earlier
                            _make_group_dir(top)
                    _enable_controllers(above, wanted)
                _prune(top)
                group.dirs[""] = os.path.join(top, name)
                _make_group_dir(group.dirs[""])
                _apply(group.dirs[""], v2_settings(limits))
            else:
                settings = v1_settings(limits)
                for controller, top in layout.parents.items():
                    with contextlib.suppress(FileExistsError):  # another launcher's, or made earlier
                        _make_group_dir(top)
                    _prune(top)
                    path = os.path.join(top, name)
                    if path in group.dirs.values():
                        _apply(path, settings[controller])  # a hierarchy with two of the controllers
                        continue
                    _make_group_dir(path)
                    group.dirs[controller] = path
                    _apply(path, settings[controller])
            group._procs_fds = [os.open(os.path.join(d, "cgroup.procs"), os.O_WRONLY) for d in group.dirs.values()]
        except OSError:
            group.remove(timeout_s=0.0)
            raise
        return group

    def enter(self) -> None:
        """Move the calling process into the group(s): called in the command's child between fork and exec.

        "0" names the writer itself. The files were opened by ``create``, so the child only writes.
        """
        for fd in self._procs_fds:
            os.write(fd, b"0")

    def close_files(self) -> None:
        """Close the ``cgroup.procs`` files ``enter`` writes (in the launcher, once the child started)."""
        fds, self._procs_fds = self._procs_fds, []
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def oom_kills(self) -> int:
        """How many processes the kernel's OOM killer has killed in the group (0 without a memory limit)."""
        if self.mechanism == "cgroup-v2":
            text, name = _read(os.path.join(self.dirs[""], "memory.events")), "oom_kill"
        elif "memory" in self.dirs:
            text, name = _read(os.path.join(self.dirs["memory"], "memory.oom_control")), "oom_kill"
        else:
            return 0
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == name and value.strip().isdigit():
                return int(value)
        return 0

    def pids(self) -> list[int]:
        """The processes in the group now."""
        pids: set[int] = set()
        for d in self.dirs.values():
            pids.update(int(p) for p in _read(os.path.join(d, "cgroup.procs")).split() if p.isdigit())
        return sorted(pids)

    def kill(self) -> None:
        """SIGKILL everything in the group: ``cgroup.kill`` where the kernel has it (5.14+, v2), else each pid
        of ``cgroup.procs`` (a fork racing the listing is caught by the next call: ``remove`` loops)."""
        if self.mechanism == "cgroup-v2" and os.path.exists(os.path.join(self.dirs[""], "cgroup.kill")):
            with contextlib.suppress(OSError):
                _write(os.path.join(self.dirs[""], "cgroup.kill"), "1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)

    def remove(self, timeout_s: float = REMOVE_TIMEOUT_S, sleep: Callable[[float], None] = time.sleep) -> bool:
        """Kill what is left in the group(s) and remove them; False when one still existed after ``timeout_s``."""
        self.close_files()
        deadline = time.monotonic() + timeout_s
        while True:
            left = {}
            for key, d in self.dirs.items():
                try:
                    os.rmdir(d)
                except FileNotFoundError:
                    pass
                except OSError:
                    left[key] = d
            self.dirs = left
            if not left or time.monotonic() >= deadline:
                return not left
            self.kill()
            sleep(REMOVE_RETRY_S)

    def describe(self) -> str:
        """For ``launcher.log``: the mechanism and the group directories."""
        return f"{self.mechanism} at {' '.join(sorted(set(self.dirs.values())))}"
