"""What every executor reads from a replica's run directory: the launcher's status record and its output log.

All three engines run the same launcher (``aicenter.runtime.launcher``), from the same plan file
(``launcher_plan``, ``write_plan``) and the same command line (``launcher_argv``), which writes ``status.json``
and ``output.log`` into the replica's run directory. The ``local`` executor reads them on this host; the ``ray`` and
``slurm`` executors read them on the shared filesystem that holds the jobs' directories (the deployment guide
says which path every node must mount), so status and logs cost no call into the engine.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import psutil

import aicenter
from aicenter.executors.base import LaunchFailed, ReplicaHandle, ReplicaPlan, ReplicaState, ReplicaStatus
from aicenter.runtime.files import (
    OUTPUT_FILE,
    PLAN_FILE,
    STATUS_FILE,
    LauncherPlan,
    parse_stamp,
    read_json,
    write_json_atomic,
)
from aicenter.runtime.launcher import START_TIME_TOLERANCE_S

__all__ = [
    "FOLLOW_POLL_S",
    "exited_status",
    "launcher_argv",
    "launcher_plan",
    "launcher_record",
    "read_chunk",
    "replica_output",
    "resolve_run_dir",
    "stream_output",
    "write_plan",
]

FOLLOW_POLL_S = 0.1
_READ_CHUNK = 256 * 1024
# The launcher's interpreter: -I (no PYTHON* variables, no user site) and -S (no site module: its .pth files cost
# 50 ms of CPU per start here, x200 replicas starting at once on 2 cores). The launcher needs only the stdlib,
# this package and, in its memory watchdog, psutil: their roots are put on sys.path explicitly, after the stdlib.
# On a Slurm node the same paths must hold the same install (the deployment guide's shared software path).
_LAUNCHER_PATHS = list(dict.fromkeys(str(Path(m.__file__ or "").resolve().parent.parent) for m in (aicenter, psutil)))


def launcher_argv(python: str, module: str = "aicenter.runtime.launcher") -> list[str]:
    """``python -I -S -c BOOT``: runs ``module``'s ``main`` (the launcher, or another entry point of this
    package such as ``aicenter.executors.local.reap``) with this install's paths; arguments follow."""
    boot = f"import sys; sys.path.extend({_LAUNCHER_PATHS!r}); from {module} import main; sys.exit(main())"
    return [python, "-I", "-S", "-c", boot]


def launcher_plan(
    plan: ReplicaPlan,
    *,
    sandbox: dict[str, Any] | None,
    env: dict[str, str],
    pids_max: int,
    cgroups: bool,
    cgroup_parent: str,
    usage_interval_s: float = 0.0,
) -> LauncherPlan:
    """The launcher's plan of ``plan``: its sandbox (None: unsandboxed) and the variables it changes."""
    return LauncherPlan(
        command=plan.command,
        workdir=str(plan.workdir),
        env={**plan.env, **env},
        devices=tuple(plan.devices),
        cpus=None if plan.cpus is None else tuple(plan.cpus),
        memory_bytes=plan.memory_bytes,
        python_bin=None if plan.python_bin is None else str(plan.python_bin),
        label=f"job {plan.job_id} {plan.task}/{plan.replica} attempt {plan.attempt}",
        sandbox=sandbox,
        cpu_milli=plan.cpu_milli,
        pids_max=pids_max,
        cgroups=cgroups,
        cgroup_parent=cgroup_parent,
        usage_interval_s=usage_interval_s,
    )


def write_plan(run_dir: Path, plan: LauncherPlan) -> None:
    """Create the run directory and write the launcher's plan into it.

    The directory is 0700 and the plan 0600: the plan holds the job's token until the launcher has read it.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    run_dir.chmod(0o700)  # also when it existed (mkdir's mode is masked by the umask and skipped then)
    write_json_atomic(run_dir / PLAN_FILE, plan.to_json())


def read_chunk(path: Path, offset: int, size: int) -> bytes:
    """Up to ``size`` bytes of ``path`` from ``offset``; empty when the file does not exist (yet)."""
    try:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(size)
    except FileNotFoundError:
        return b""


def exited_status(record: dict[str, Any]) -> ReplicaStatus:
    """The ``EXITED`` status a launcher's final record says (exit code, reason, start and end)."""
    code = record.get("exit_code")
    return ReplicaStatus(
        state=ReplicaState.EXITED,
        exit_code=None if code is None else int(code),
        reason=record.get("reason"),
        started_at=parse_stamp(record.get("started_at")),
        finished_at=parse_stamp(record.get("finished_at")),
    )


async def stream_output(
    run_dir: Path | str, since: int, *, follow: bool, running: Callable[[], Awaitable[bool]]
) -> AsyncIterator[bytes]:
    """Bytes of the replica's ``output.log`` from offset ``since``.

    Args:
        run_dir: The replica's run directory.
        since: The byte offset to start at.
        follow: Keep reading until ``running`` says the replica ended, then drain what is left.
        running: Whether the replica still runs (the executor's own status check).
    """
    path = Path(run_dir) / OUTPUT_FILE
    offset = max(0, since)
    while True:
        chunk = await asyncio.to_thread(read_chunk, path, offset, _READ_CHUNK)
        if chunk:
            offset += len(chunk)
            yield chunk
            continue
        if not follow:
            return
        if not await running():
            # The launcher writes all output before its final record: one more read drains the rest.
            while chunk := await asyncio.to_thread(read_chunk, path, offset, _READ_CHUNK):
                offset += len(chunk)
                yield chunk
            return
        await asyncio.sleep(FOLLOW_POLL_S)


def replica_output(
    handle: ReplicaHandle,
    since: int,
    *,
    follow: bool,
    status: Callable[[ReplicaHandle], Awaitable[ReplicaStatus]],
) -> AsyncIterator[bytes]:
    """``Executor.logs`` for every engine: the run dir's ``output.log`` from ``since``; with ``follow``, until the
    executor's ``status`` says the replica no longer runs and the rest is drained."""

    async def running() -> bool:
        return (await status(handle)).state is ReplicaState.RUNNING

    return stream_output(handle.run_dir, since, follow=follow, running=running)


def resolve_run_dir(root: Path | None, run_dir: Path | str, executor: str) -> Path:
    """A plan's run directory: absolute as given, else below the executor's ``root``.

    Raises:
        LaunchFailed: It is relative and the executor has no root.
    """
    path = Path(run_dir)
    if path.is_absolute():
        return path
    if root is None:
        raise LaunchFailed(f"run_dir {str(path)!r} is relative and the {executor} executor has no root")
    return root / path


def launcher_record(handle: ReplicaHandle) -> dict[str, Any]:
    """The launcher's status record in the handle's run dir, or ``{}`` when there is none or it names another
    launcher than the handle (pid and start time). A stale or forged handle shares nothing with the run
    directory: the replica is lost to it and nothing is signalled through it."""
    record = read_json(Path(handle.run_dir) / STATUS_FILE) or {}
    try:
        same = record.get("launcher_pid") == handle.pid and (
            abs(float(record["launcher_start_time"]) - handle.start_time) <= START_TIME_TOLERANCE_S
        )
    except (KeyError, TypeError, ValueError):
        same = False
    return record if same else {}
