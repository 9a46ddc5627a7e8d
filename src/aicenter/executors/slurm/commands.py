"""The Slurm commands the executor runs, as pure functions: ``sbatch``'s arguments and script, and parsers of
``squeue``, ``sacct`` and the ``jobcomp/filetxt`` file. No process is started here (``executor`` does that), so
all of it is unit-tested without a cluster.

A replica is one batch job of one task: the script ``exec``s the launcher, so the batch step's process *is* the
launcher (``scancel --batch --signal=...`` reaches it and nothing else), and Slurm's view of the job's end is the
launcher's. Jobs are submitted with ``--no-requeue``: by default Slurm requeues a batch job whose node failed and
would run the replica again behind the controllers' back (they decide restarts, with a new run directory).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aicenter.executors.base import ReplicaPlan
from aicenter.executors.slurm.inventory import split_fields

__all__ = [
    "ACTIVE_STATES",
    "SQUEUE_FORMAT",
    "SlurmJob",
    "batch_script",
    "cpus_per_task",
    "cycle_ports",
    "gpu_gres_type",
    "job_name",
    "memory_mib",
    "node_lost",
    "parse_job_id",
    "parse_jobcomp",
    "parse_sacct",
    "parse_squeue",
    "sbatch_args",
]

SQUEUE_FORMAT = "%i|%T|%r|%N"
"""``squeue -o``: job id, long state, reason (why pending, or why it ended), node list; ``|`` cannot occur in
any of them."""

ACTIVE_STATES = frozenset(
    {"PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "SUSPENDED", "RESIZING", "SIGNALING", "STAGE_OUT"}
)
"""States of a job that has not ended (its launcher may still run or start)."""

_MIB = 2**20


@dataclass(frozen=True, slots=True)
class SlurmJob:
    """One job as ``squeue``, ``sacct`` or the jobcomp file reports it.

    Attributes:
        job_id: Slurm's job id.
        state: The long state name, e.g. ``RUNNING``, ``NODE_FAIL``, ``CANCELLED`` (``sacct``'s ``CANCELLED by 0``
            is cut to its first word).
        reason: Why it pends or ended (``Resources``, ``NodeDown``, ``ReqNodeNotAvail, UnavailableNodes:node3``);
            ``None`` is empty.
        nodes: The node list it ran on, empty while pending.
    """

    job_id: str
    state: str
    reason: str = ""
    nodes: str = ""

    @property
    def active(self) -> bool:
        """Whether the job has not ended yet."""
        return self.state in ACTIVE_STATES


def _state(text: str) -> str:
    return text.strip().split(" ", 1)[0].upper()


def node_lost(state: str) -> bool:
    """Whether a node in this Slurm state has lost its jobs: DOWN, or not responding (``*``/NOT_RESPONDING).

    A DRAIN node is not: its jobs run on until they end.
    """
    parts = state.upper().split("+")
    base = parts[0]
    flags = {p.rstrip("*") for p in parts[1:]}
    return base.startswith("DOWN") or base.endswith("*") or "NOT_RESPONDING" in flags


def gpu_gres_type(gres: str) -> str:
    """The type of a node's first GPU GRES (``gpu:a100:2(S:0-1)`` -> ``a100``); "" when untyped or none."""
    for entry in re.sub(r"\([^)]*\)", "", gres).split(","):
        parts = entry.strip().split(":")
        if parts[0] == "gpu" and len(parts) > 2:
            return parts[1]
        if parts[0] == "gpu" and len(parts) == 2 and not parts[1].isdigit():
            return parts[1]
    return ""


def parse_squeue(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``squeue -h -t all -o SQUEUE_FORMAT``; malformed lines are skipped."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) != 4 or not parts[0].strip():
            continue
        job_id, state, reason, nodes = (p.strip() for p in parts)
        jobs[job_id] = SlurmJob(job_id, _state(state), "" if reason == "None" else reason, nodes)
    return jobs


def parse_sacct(text: str) -> dict[str, SlurmJob]:
    """Jobs by id from ``sacct -n -P -X -o JobIDRaw,State,Reason,NodeList``; steps (``7.batch``) are skipped."""
    jobs: dict[str, SlurmJob] = {}
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].strip() or "." in parts[0]:
            continue
        job_id, state, reason, nodes = (p.strip() for p in parts[:4])
        jobs[job_id] = SlurmJob(job_id, _state(state), "" if reason == "None" else reason, nodes)
    return jobs


def parse_jobcomp(text: str, job_id: str) -> SlurmJob | None:
    """The last record of ``job_id`` in a ``jobcomp/filetxt`` file (one ``Key=value`` line per ended job)."""
    found = None
    for line in text.splitlines():
        if f"JobId={job_id} " not in f"{line} ":
            continue
        fields = split_fields(line)
        if fields.get("JobId") == job_id:
            found = SlurmJob(job_id, _state(fields.get("JobState", "")), "", fields.get("NodeList", ""))
    return found


def parse_job_id(stdout: str) -> str:
    """The job id ``sbatch --parsable`` printed (``123`` or ``123;cluster``).

    Raises:
        ValueError: No job id in the output.
    """
    first = stdout.strip().split(";", 1)[0].strip()
    if not re.fullmatch(r"\d+", first):
        raise ValueError(f"sbatch printed no job id: {stdout.strip()!r}")
    return first


def cpus_per_task(cpu_milli: int) -> int:
    """Whole CPUs for ``--cpus-per-task``: the request rounded up, at least one."""
    return max(1, math.ceil(cpu_milli / 1000))


def memory_mib(memory_bytes: int) -> int:
    """``--mem`` in MiB, rounded up (the launcher enforces the exact limit)."""
    return max(1, math.ceil(memory_bytes / _MIB))


def cycle_ports(
    next_port: int, port_range: tuple[int, int], recent: Collection[int], count: int
) -> tuple[list[int], int]:
    """``count`` ports of ``port_range`` from ``next_port`` on, wrapping around, none of ``recent``; and where
    the next call starts.

    Raises:
        ValueError: The range has fewer than ``count`` ports outside ``recent``.
    """
    first, last = port_range
    if count > sum(1 for p in range(first, last + 1) if p not in recent):
        raise ValueError(f"the port range {first}-{last} cannot give {count} ports")
    ports: list[int] = []
    port = next_port
    while len(ports) < count:
        if not first <= port <= last:
            port = first
        if port not in recent:
            ports.append(port)
        port += 1
    return ports, port


def job_name(plan: ReplicaPlan) -> str:
    """``aicenter-<job>-<task>-<replica>-a<attempt>``: what ``squeue`` shows an admin."""
    return f"aicenter-{plan.job_id}-{plan.task}-{plan.replica}-a{plan.attempt}"


def sbatch_args(
    plan: ReplicaPlan,
    *,
    run_dir: Path,
    slurm_node: str,
    partition: str | None,
    gpu_type: str | None,
) -> list[str]:
    """``sbatch``'s options for one replica (the script comes on stdin).

    Args:
        plan: The replica's plan.
        run_dir: Its absolute run directory: the job's working directory and where Slurm writes the launcher's
            own messages (``launcher.log``).
        slurm_node: The Slurm name of ``plan.node``.
        partition: The platform's partition, or None for the cluster's default.
        gpu_type: The GRES type of the node's GPUs (``a100``), "" for untyped GPUs; only read with devices.
    """
    log = str(run_dir / "launcher.log")
    args = [
        "--parsable",
        f"--job-name={job_name(plan)}",
        f"--nodelist={slurm_node}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={cpus_per_task(plan.cpu_milli)}",
        f"--chdir={run_dir}",
        f"--output={log}",
        f"--error={log}",
        "--open-mode=append",
        "--export=NONE",
        "--no-requeue",
    ]
    if partition:
        args.append(f"--partition={partition}")
    if plan.memory_bytes > 0:
        args.append(f"--mem={memory_mib(plan.memory_bytes)}M")
    if plan.devices:
        typed = f"{gpu_type}:" if gpu_type else ""
        args.append(f"--gres=gpu:{typed}{len(plan.devices)}")
    return args


def batch_script(launcher: Sequence[str], env: Mapping[str, str], job_file: Path) -> str:
    """The batch script: record the job id, export the launcher's few variables (``--export=NONE`` gave it
    none) and ``exec`` the launcher.

    The job id goes to ``job_file`` (atomically: a temporary file renamed) before the launcher can write its first
    record, so a run directory with a record always names its job, even when the server that ran ``sbatch``
    died before it wrote the same file. ``exec`` makes the batch step's process the launcher: Slurm's
    ``--batch`` signals reach it and only it, and the job ends when the launcher does.
    """
    tmp = job_file.with_name(f".{job_file.name}.tmp")
    lines = [
        "#!/bin/sh",
        f'printf \'{{"job_id": "%s"}}\\n\' "$SLURM_JOB_ID" > {shlex.quote(str(tmp))}'
        f" && mv -f {shlex.quote(str(tmp))} {shlex.quote(str(job_file))}",
    ]
    lines += [f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())]
    lines.append("exec " + " ".join(shlex.quote(a) for a in launcher))
    return "\n".join(lines) + "\n"
