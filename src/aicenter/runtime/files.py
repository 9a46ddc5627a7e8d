"""The files a replica's run directory holds, shared by the launcher and the executors that start it.

A run directory belongs to one replica attempt:

- ``plan.json``: what to run (``LauncherPlan``), written by the executor before it starts the launcher.
- ``status.json``: written by the launcher, always atomically (tmp + rename), so a reader sees either the
  previous or the next version, never half of one. ``state`` is ``running`` while the command runs and
  ``exited`` once the final record (exit code, reason, finished_at) is in.
- ``output.log``: the command's stdout and stderr, one line per line, each prefixed by a UTC timestamp.
- ``launcher.log``: the launcher's own messages (it never writes into the job's output).
- ``launcher.lock``: held (flock) by the launcher while it lives, so a run directory never has two.
- ``metrics.jsonl``: what ``aicenter.runtime.report`` appended.
- ``usage.json``: the replica's CPU and memory, written by the launcher when its plan asks
  (``aicenter.runtime.usage``).

This module is imported by the launcher inside the job's host, so it stays small and free of server imports
(and of ``tempfile`` and ``dataclasses``, whose imports cost the launcher's start-up ~4 and ~8 ms).
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple

__all__ = [
    "LAUNCHER_LOG",
    "LOCK_FILE",
    "METRICS_FILE",
    "OUTPUT_FILE",
    "PLAN_FILE",
    "STATUS_FILE",
    "LauncherPlan",
    "parse_stamp",
    "read_json",
    "utc_stamp",
    "write_json_atomic",
]

PLAN_FILE = "plan.json"
STATUS_FILE = "status.json"
OUTPUT_FILE = "output.log"
LAUNCHER_LOG = "launcher.log"
LOCK_FILE = "launcher.lock"
METRICS_FILE = "metrics.jsonl"


class LauncherPlan(NamedTuple):
    """What the launcher runs: the part of a ``ReplicaPlan`` that matters on the host.

    A NamedTuple rather than a dataclass: ``dataclasses`` imports ``inspect`` (~8 ms of the launcher's start).

    Attributes:
        command: Run by ``/bin/sh -c`` in its own process group.
        env: The command's variables (the launcher adds PATH, CUDA_VISIBLE_DEVICES and AICENTER_RUN_DIR).
        workdir: The command's working directory.
        devices: Accelerator indices for ``CUDA_VISIBLE_DEVICES``; empty means none (the variable is ``""``).
        cpus: CPU ids for the affinity of the whole process tree, or None.
        memory_bytes: The replica's memory limit (its cgroup's, else the process tree's resident memory the
            launcher's watchdog samples); 0 means none.
        python_bin: A directory put first on PATH, or None.
        label: A name for the launcher's own log lines, e.g. ``job 7 worker/1 attempt 0``.
        sandbox: ``SandboxSpec.to_json()`` of the replica's sandbox (``aicenter.runtime.sandbox``), or None to
            run the command unsandboxed.
        cpu_milli: The CPU quota, in milli-cores, where a cgroup enforces it; 0 means none.
        pids_max: The most processes and threads the replica may have, where a cgroup enforces it; 0: none.
        cgroups: Enforce the limits in a control group where the host allows (``aicenter.runtime.cgroups``);
            False keeps the memory watchdog alone.
        cgroup_parent: The group to hold the replica's group instead of the default; "" for the default.
        usage_interval_s: Write the replica's CPU and memory into ``usage.json`` this often
            (``aicenter.runtime.usage``), for an executor that cannot read the node's ``/proc``; 0: never.
    """

    command: str
    workdir: str
    env: dict[str, str] = {}  # a tuple field's default, never mutated (child_env copies it)
    devices: tuple[int, ...] = ()
    cpus: tuple[int, ...] | None = None
    memory_bytes: int = 0
    python_bin: str | None = None
    label: str = ""
    sandbox: dict[str, Any] | None = None
    cpu_milli: int = 0
    pids_max: int = 0
    cgroups: bool = True
    cgroup_parent: str = ""
    usage_interval_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "command": self.command,
            "workdir": self.workdir,
            "env": dict(self.env),
            "devices": list(self.devices),
            "cpus": None if self.cpus is None else list(self.cpus),
            "memory_bytes": self.memory_bytes,
            "python_bin": self.python_bin,
            "label": self.label,
            "cpu_milli": self.cpu_milli,
            "pids_max": self.pids_max,
            "cgroups": self.cgroups,
            "cgroup_parent": self.cgroup_parent,
        }
        if self.usage_interval_s > 0:
            data["usage_interval_s"] = self.usage_interval_s
        if self.sandbox is not None:  # absent rather than null: an unsandboxed plan reads as it always did
            data["sandbox"] = self.sandbox
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LauncherPlan:
        cpus = data.get("cpus")
        return cls(
            command=str(data["command"]),
            workdir=str(data["workdir"]),
            env={str(k): str(v) for k, v in (data.get("env") or {}).items()},
            devices=tuple(int(d) for d in data.get("devices") or ()),
            cpus=None if cpus is None else tuple(int(c) for c in cpus),
            memory_bytes=int(data.get("memory_bytes") or 0),
            python_bin=data.get("python_bin"),
            label=str(data.get("label") or ""),
            sandbox=data.get("sandbox"),
            cpu_milli=int(data.get("cpu_milli") or 0),
            pids_max=int(data.get("pids_max") or 0),
            cgroups=bool(data.get("cgroups", True)),
            cgroup_parent=str(data.get("cgroup_parent") or ""),
            usage_interval_s=float(data.get("usage_interval_s") or 0.0),
        )


def utc_stamp(at: datetime | None = None) -> str:
    """``2026-12-03T06:00:00.123456Z``: the timestamp format of log lines and status records."""
    return (at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_stamp(value: object) -> datetime | None:
    """The datetime of a ``utc_stamp`` string; None for None or anything else."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.strptime(value, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)
    except ValueError:
        return None


def write_json_atomic(path: Path, data: dict[str, Any], *, fsync: bool = True) -> None:
    """Write ``data`` as JSON to ``path`` so that readers see the old or the new file, never a part.

    The temporary file is in the same directory (``os.replace`` is atomic only within one filesystem) and is
    fsynced first when ``fsync``: a status record must survive the host losing power right after it.
    """
    # A unique name in the directory, created exclusively with mkstemp's mode (0600).
    tmp = path.parent / f".{path.name}.{os.getpid()}.{os.urandom(6).hex()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
            if fsync:
                f.flush()
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when the file does not exist or holds no JSON object."""
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
