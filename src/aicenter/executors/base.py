"""The Executor protocol: what every engine (``local``, ``ray``, ``slurm``) offers the job controllers.

An executor runs *replicas*: one process tree per replica on one node, described by a ``ReplicaPlan`` that the
controllers computed (node, devices, limits, command, environment, directories). ``launch`` returns a
``ReplicaHandle``, a small JSON-serializable record the controllers store on the replica row. The handle is the
only thing that survives a server restart, so it must be enough for a *fresh* executor instance to report the
replica's status, read its logs and stop it ("re-adoption").

Contract (checked for every executor by ``tests/contract/executor_suite.py``):

- ``launch`` returns once the replica was started, or raises ``LaunchFailed``. A command that starts and then
  fails is not a launch failure: it is an ``EXITED`` replica with its exit code.
- ``status`` never raises for a replica it launched: a replica whose supervision vanished without a final
  record is ``LOST``; a handle whose process id now names another process (pid reuse) is ``LOST`` too.
- ``stop(handle, grace_s)`` asks the replica to end (SIGTERM or the engine's equivalent), waits up to
  ``grace_s`` for it to checkpoint and exit, then kills it. It is idempotent and never signals a process that
  is not the replica's.
- ``logs`` yields the replica's combined stdout/stderr, each line prefixed by an ISO-8601 UTC timestamp and a
  space, from a byte offset; with ``follow`` it keeps yielding until the replica ended and the log is drained.
- ``sample(handles)`` reads the telemetry of every node the executor can reach now
  (``aicenter.core.telemetry.NodeCounters``: raw counters, no rates) with the counters of those of ``handles``
  that run there; a replica that is not running is left out, and an unreachable node is missing, never an error.
- Executors are used from one event loop; methods may block briefly on local files but never on the network
  without awaiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from aicenter.core.telemetry import NodeCounters

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
    "node_labels",
]

# Labels every executor sets on its hosts, whatever the engine: pool selectors do not depend on it.
HOSTNAME_LABEL = "aicenter.io/hostname"
ACCELERATOR_LABEL = "aicenter.io/accelerator"
"""Set when all of a host's accelerators are of one type."""
EXECUTOR_LABEL = "aicenter.io/executor"
"""The engine that runs the host's replicas (``local``, ``ray``, ``slurm``): a pool per engine selects on it."""
TOPOLOGY_LABELS = {"rack": "rack", "leaf": "leaf", "spine": "spine", "nvlink-domain": "nvlink_domain"}
"""Labels by which engines report a host's place in the network (a Ray node label ``rack=r1``, a Slurm feature
``rack_r1``), and the node's topology field each sets: placement reads those fields."""


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


def node_labels(name: str, accelerators: Sequence[AcceleratorInfo]) -> dict[str, str]:
    """The labels every executor sets on a host it reports: its name, and its accelerator type when all of its
    accelerators are of one type."""
    labels = {HOSTNAME_LABEL: name}
    types = sorted({a.type for a in accelerators})
    if len(types) == 1:
        labels[ACCELERATOR_LABEL] = types[0]
    return labels


class LaunchFailed(RuntimeError):
    """The executor could not start a replica (bad plan, engine refused, supervisor did not come up)."""


@dataclass(frozen=True, slots=True)
class ReplicaPlan:
    """Everything needed to start one replica, decided by the controllers before the launch.

    Attributes:
        job_id: The job's id.
        task: The task (role) name, e.g. ``worker``.
        replica: The replica's index within its task.
        attempt: The restart count of the job (0 for the first run); also ``AICENTER_RESTART_COUNT``.
        node: The node the scheduler placed the replica on.
        command: The command line, run by ``/bin/sh -c``.
        env: Variables for the command (``aicenter.runtime.env``: runtime + framework variables, the spec's env).
        run_dir: The executor's directory for this replica attempt (plan, status, logs). One per attempt.
        workdir: The command's working directory.
        devices: Accelerator indices the scheduler assigned; ``CUDA_VISIBLE_DEVICES`` names exactly these.
        cpus: CPU ids to pin the process tree to (affinity), or None to leave it unpinned.
        cpu_milli: The CPU request, in milli-cores (accounting; pinning is done through ``cpus``).
        memory_bytes: The memory limit of the replica's whole process tree; 0 means none.
        python_bin: A virtual environment's ``bin/`` put first on ``PATH``, or None.
        workspace_id: The job's workspace; a sandboxed replica of a root server runs as that workspace's uid.
        read_write: More host paths the sandbox binds read-write (a notebook's work dir and activity file).
        published: Ports the replica listens on that the platform reaches from outside its sandbox (a notebook's
            JupyterLab and SSH agent). Inside a job network namespace the replica listens on 127.0.0.1 and the
            launcher publishes each port on ``publish_host``; on the host's network it listens there itself.
        publish_host: The node's address that the platform's proxy and SSH gateway connect to.
        publish_token: A service replica's serve token: the launcher's relay of its published port lets a
            connection through only when its first request carries it (``aicenter.runtime.relay``); "" for none.
    """

    job_id: int
    task: str
    replica: int
    attempt: int
    node: str
    command: str
    env: Mapping[str, str]
    run_dir: Path
    workdir: Path
    devices: tuple[int, ...] = ()
    cpus: tuple[int, ...] | None = None
    cpu_milli: int = 0
    memory_bytes: int = 0
    python_bin: Path | None = None
    workspace_id: int | None = None
    read_write: tuple[Path, ...] = ()
    published: tuple[int, ...] = ()
    publish_host: str = "127.0.0.1"
    publish_token: str = field(default="", repr=False)  # a secret: never in a logged repr


@dataclass(frozen=True, slots=True)
class ReplicaHandle:
    """How to find a launched replica again, even from another server process. JSON-serializable.

    Attributes:
        executor: The executor's name (``local``, ``ray``, ``slurm``).
        node: The node it runs on.
        run_dir: The replica attempt's run directory.
        pid: The supervising process (the local launcher; engine-specific elsewhere).
        start_time: That process's start time (seconds since the epoch), the guard against pid reuse.
        extra: Engine-specific details (local: ``child_pid``, ``child_start_time``).
    """

    executor: str
    node: str
    run_dir: str
    pid: int
    start_time: float
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The handle as plain JSON values, for the replica row."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ReplicaHandle:
        """Rebuild a handle stored with ``to_dict``."""
        return cls(
            executor=str(data["executor"]),
            node=str(data["node"]),
            run_dir=str(data["run_dir"]),
            pid=int(data["pid"]),
            start_time=float(data["start_time"]),
            extra=dict(data.get("extra") or {}),
        )


NODE_LOST_REASON = "node lost"
"""The ``reason`` of a ``LOST`` status when the engine reports the replica's node dead or down (not only its
supervision gone): the inventory then reads that engine's nodes again before the job restarts."""


class ReplicaState(StrEnum):
    """What an executor can observe about a replica. The job controllers map it to job/replica statuses."""

    RUNNING = "running"
    EXITED = "exited"  # finished; exit_code and reason say how
    LOST = "lost"  # its supervision is gone without a final record (node or launcher died)


@dataclass(frozen=True, slots=True)
class ReplicaStatus:
    """A replica's observed state.

    Attributes:
        state: Running, exited or lost.
        exit_code: The command's exit code when exited; negative for a signal (-9: SIGKILL), like subprocess.
            None when it never started or is not known.
        reason: Why it ended beyond the exit code: ``oom`` (the memory limit was exceeded), ``stopped`` (it
            was asked to stop), ``signal N`` (killed by a signal nobody here sent), ``launch failed: ...``,
            ``launcher lost``; None for a plain exit.
        started_at: When the command started (UTC).
        finished_at: When it ended (UTC), for exited replicas.
    """

    state: ReplicaState
    exit_code: int | None = None
    reason: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None


@runtime_checkable
class Executor(Protocol):
    """Runs replicas on one engine. See the module docstring for the contract every implementation keeps."""

    name: str

    async def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        """Start the replica described by ``plan``.

        Raises:
            LaunchFailed: The plan cannot run here or the engine did not start it.
        """
        ...

    async def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        """The replica's current state; never raises for a handle this executor kind produced."""
        ...

    async def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        """Ask the replica to end, wait up to ``grace_s``, then kill it. Idempotent."""
        ...

    def logs(self, handle: ReplicaHandle, since: int = 0, *, follow: bool = False) -> AsyncIterator[bytes]:
        """The replica's timestamped output from byte offset ``since``; with ``follow``, until it ended."""
        ...

    async def allocate_ports(self, node: str, count: int) -> list[int]:
        """``count`` distinct TCP ports that are free on ``node`` now (bound and released, not guessed)."""
        ...

    async def nodes(self) -> list[HostInfo]:
        """The hosts this executor can run replicas on."""
        ...

    async def sample(self, handles: Sequence[ReplicaHandle]) -> list[NodeCounters]:
        """Telemetry of this executor's nodes, each with the counters of the running replicas of ``handles`` on it.

        Cheap by contract: the sampler calls it every ``AICENTER_METRICS_SAMPLE_INTERVAL_S`` (15 s) and must stay
        under 1 % of a core per node. Never raises for a node or replica it cannot read: it leaves it out.
        """
        ...

    async def close(self) -> None:
        """Let go of the engine (its connection); the server calls it once at shutdown. Replicas keep running."""
        ...
