"""The environment a replica sees: aicenter's runtime variables and each framework's own.

Pure functions: the job controllers compute a replica's variables from the job, the placement and the ports the
executor allocated, and put them in the ``ReplicaPlan``. The user guide is docs/runtime.md.

One process per replica: ``RANK`` is the replica's rank over the whole job (tasks in spec order, replicas in
index order) and ``LOCAL_RANK`` is 0. A replica that starts several processes itself (``torchrun``,
``paddle.distributed.launch``) uses the node-level variables (``NODE_RANK``, ``AICENTER_TORCHRUN_ARGS``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "FRAMEWORKS",
    "ReplicaAddress",
    "framework_env",
    "mpi_hosts",
    "ports_needed",
    "runtime_env",
    "write_hostfile",
]

FRAMEWORKS = ("none", "pytorch", "tensorflow", "paddle", "mindspore", "mpi")
# Ports each replica needs. PyTorch: rank 0's is the rendezvous (MASTER_PORT). TensorFlow: every replica's
# server. Paddle: every trainer's endpoint, and rank 0's second port is the master store (PADDLE_MASTER).
# MindSpore: rank 0's is the scheduler's (MS_SCHED_PORT). MPI: mpirun picks its own.
_PORTS = {"none": 0, "pytorch": 1, "tensorflow": 1, "paddle": 2, "mindspore": 1, "mpi": 0}
# TensorFlow's evaluator is not part of the cluster it evaluates (tf.distribute leaves it out of ClusterSpec).
_TF_NOT_IN_CLUSTER = frozenset({"evaluator"})
MPI_LAUNCHER_TASK = "launcher"


@dataclass(frozen=True, slots=True)
class ReplicaAddress:
    """Where one replica of a job runs: its task, index, host and the ports allocated for it."""

    task: str
    replica: int
    host: str
    ports: tuple[int, ...] = ()


def runtime_env(
    job_id: int,
    task: str,
    replica: int,
    attempt: int,
    *,
    code_dir: Path | str,
    data_dir: Path | str,
    output_dir: Path | str,
    checkpoint_dir: Path | str,
    api_url: str,
    token: str,
) -> dict[str, str]:
    """aicenter's own variables (DESIGN.md, "Runtime contract inside a job").

    ``AICENTER_RUN_DIR`` is added by the launcher (it is the executor's directory, not the job's).
    """
    return {
        "AICENTER_JOB_ID": str(job_id),
        "AICENTER_TASK": task,
        "AICENTER_REPLICA": str(replica),
        "AICENTER_RESTART_COUNT": str(attempt),
        "AICENTER_CODE_DIR": str(code_dir),
        "AICENTER_DATA_DIR": str(data_dir),
        "AICENTER_OUTPUT_DIR": str(output_dir),
        "AICENTER_CHECKPOINT_DIR": str(checkpoint_dir),
        "AICENTER_API_URL": api_url,
        "AICENTER_TOKEN": token,
    }


def ports_needed(framework: str) -> int:
    """How many ports to allocate for each replica of a job of ``framework``."""
    return _PORTS[_framework(framework)]


def _framework(framework: str) -> str:
    name = str(framework).lower()
    if name not in _PORTS:
        raise ValueError(f"unknown framework {framework!r}; expected one of {', '.join(FRAMEWORKS)}")
    return name


def _port(address: ReplicaAddress, index: int, framework: str) -> int:
    if len(address.ports) <= index:
        raise ValueError(
            f"{framework}: replica {address.task}/{address.replica} needs {index + 1} port(s), has {len(address.ports)}"
        )
    return address.ports[index]


def framework_env(
    framework: str, layout: Sequence[ReplicaAddress], me: int, *, mpi_hostfile: Path | str | None = None
) -> dict[str, str]:
    """The variables ``framework`` reads to form its cluster, for the replica at rank ``me`` of ``layout``.

    Args:
        framework: ``none``, ``pytorch``, ``tensorflow``, ``paddle``, ``mindspore`` or ``mpi``.
        layout: Every replica of the job in rank order (tasks in spec order, replicas by index), each with
            ``ports_needed(framework)`` allocated ports.
        me: This replica's rank, an index into ``layout``.
        mpi_hostfile: For ``mpi``: where the hostfile (``write_hostfile``) is, for the launcher task.

    Raises:
        ValueError: Unknown framework, ``me`` out of range, or a replica without the ports it needs.
    """
    name = _framework(framework)
    if not 0 <= me < len(layout):
        raise ValueError(f"rank {me} is not in a layout of {len(layout)} replica(s)")
    builder = _BUILDERS.get(name)
    if builder is None:
        return {}
    env = builder(layout, me)
    if name == "mpi" and mpi_hostfile is not None and layout[me].task == MPI_LAUNCHER_TASK:
        env["AICENTER_MPI_HOSTFILE"] = str(mpi_hostfile)
    return env


def _pytorch(layout: Sequence[ReplicaAddress], me: int) -> dict[str, str]:
    master = layout[0]
    port = _port(master, 0, "pytorch")
    world = len(layout)
    torchrun = f"--nnodes={world} --node_rank={me} --master_addr={master.host} --master_port={port}"
    return {
        "MASTER_ADDR": master.host,
        "MASTER_PORT": str(port),
        "WORLD_SIZE": str(world),
        "RANK": str(me),
        "LOCAL_RANK": "0",
        "NODE_RANK": str(me),
        "AICENTER_TORCHRUN_ARGS": torchrun,
    }


def _tensorflow(layout: Sequence[ReplicaAddress], me: int) -> dict[str, str]:
    cluster: dict[str, list[str]] = {}
    for address in layout:
        if address.task not in _TF_NOT_IN_CLUSTER:
            cluster.setdefault(address.task, []).append(f"{address.host}:{_port(address, 0, 'tensorflow')}")
    mine = layout[me]
    config = {"cluster": cluster, "task": {"type": mine.task, "index": mine.replica}}
    return {"TF_CONFIG": json.dumps(config, separators=(",", ":"))}


def _paddle(layout: Sequence[ReplicaAddress], me: int) -> dict[str, str]:
    # The variables paddle.distributed.launch's collective controller sets for each trainer, with one
    # trainer per replica: the new names (PADDLE_MASTER, PADDLE_GLOBAL_*) and the older ones it keeps.
    endpoints = [f"{a.host}:{_port(a, 0, 'paddle')}" for a in layout]
    master = layout[0]
    world = str(len(layout))
    return {
        "PADDLE_MASTER": f"{master.host}:{_port(master, 1, 'paddle')}",
        "PADDLE_GLOBAL_SIZE": world,
        "PADDLE_LOCAL_SIZE": "1",
        "PADDLE_GLOBAL_RANK": str(me),
        "PADDLE_LOCAL_RANK": "0",
        "PADDLE_NNODES": world,
        "PADDLE_TRAINER_ENDPOINTS": ",".join(endpoints),
        "PADDLE_CURRENT_ENDPOINT": endpoints[me],
        "PADDLE_TRAINER_ID": str(me),
        "PADDLE_TRAINERS_NUM": world,
        "PADDLE_RANK_IN_NODE": "0",
        "TRAINING_ROLE": "TRAINER",
    }


def _mindspore(layout: Sequence[ReplicaAddress], me: int) -> dict[str, str]:
    # MindSpore's dynamic cluster needs one scheduler process (MS_ROLE=MS_SCHED) beside the workers. Every
    # replica is a worker; rank 0 also runs the scheduler, started by its command with the same script:
    #   [ "$AICENTER_MS_RUN_SCHEDULER" = 1 ] && MS_ROLE=MS_SCHED python train.py &  python train.py
    master = layout[0]
    return {
        "MS_ROLE": "MS_WORKER",
        "MS_SCHED_HOST": master.host,
        "MS_SCHED_PORT": str(_port(master, 0, "mindspore")),
        "MS_WORKER_NUM": str(len(layout)),
        "MS_SERVER_NUM": "0",
        "MS_NODE_ID": str(me),
        "AICENTER_MS_RUN_SCHEDULER": "1" if me == 0 else "0",
    }


def mpi_hosts(layout: Sequence[ReplicaAddress]) -> list[tuple[str, int]]:
    """The MPI ranks' hosts with their slot counts: one slot per non-launcher replica, hosts in rank order."""
    slots: dict[str, int] = {}
    for address in layout:
        if address.task != MPI_LAUNCHER_TASK:
            slots[address.host] = slots.get(address.host, 0) + 1
    return list(slots.items())


def _mpi(layout: Sequence[ReplicaAddress], me: int) -> dict[str, str]:
    hosts = mpi_hosts(layout)
    return {
        "AICENTER_MPI_NP": str(sum(n for _, n in hosts)),
        # Also as a -H / -hosts argument (OpenMPI and MPICH both read host:slots) for jobs without a hostfile.
        "AICENTER_MPI_HOSTS": ",".join(f"{host}:{n}" for host, n in hosts),
    }


_BUILDERS = {
    "pytorch": _pytorch,
    "tensorflow": _tensorflow,
    "paddle": _paddle,
    "mindspore": _mindspore,
    "mpi": _mpi,
}


def write_hostfile(path: Path, hosts_with_slots: Sequence[tuple[str, int]] | Mapping[str, int]) -> Path:
    """Write an OpenMPI hostfile (``host slots=N`` per line; MPICH's Hydra reads ``host:N``, see docs)."""
    items = list(hosts_with_slots.items()) if isinstance(hosts_with_slots, Mapping) else list(hosts_with_slots)
    for host, slots in items:
        if not host or any(c.isspace() for c in host) or slots < 1:
            raise ValueError(f"bad hostfile entry {host!r} with {slots} slot(s)")
    text = "".join(f"{host} slots={slots}\n" for host, slots in items)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
