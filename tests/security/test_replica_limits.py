"""A replica's limits are the kernel's: its memory, CPU quota and process count, in its own control group.

The jobs run through the real ``LocalExecutor``, unsandboxed and in the bwrap sandbox, on the real kernel (as
root in CI: cgroup v1 there, v2 on a pure-v2 host). The tests read the group's files from the host with the
job's pid, as an operator would, and assert what the job got: killed at its memory limit, stopped at its
process limit, the values the plan asked in its group, and nothing of the group left once it ended.
"""

from __future__ import annotations

import errno
import json
import os
import shlex
import signal
import sys
import textwrap
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest
import pytest_asyncio

from aicenter.executors import ReplicaHandle, ReplicaPlan, ReplicaState, ReplicaStatus
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import SandboxMode, sandbox_support
from aicenter.runtime.cgroups import CPU_PERIOD_US, Limits, hierarchies, layouts, own_groups
from aicenter.runtime.files import LAUNCHER_LOG, OUTPUT_FILE, STATUS_FILE
from tests.contract.executor_suite import lines, poll

MiB = 2**20
NODE = "limits-node"
PY = shlex.quote(sys.executable)
_USABLE, _WHY_NOT = layouts(Limits(memory_bytes=MiB, cpu_milli=1000, pids_max=10))

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not _USABLE, reason=f"no writable cgroups here: {'; '.join(_WHY_NOT)}"
)


@pytest.fixture(
    params=[
        "off",
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap: {sandbox_support().reason}"),
        ),
    ]
)
def sandbox(request: pytest.FixtureRequest) -> SandboxMode:
    mode: SandboxMode = request.param
    return mode


@pytest.fixture
def root(tmp_path: Path) -> Path:
    tmp_path.chmod(0o755)  # a sandboxed job's own uid must reach its work dir
    return tmp_path


@pytest_asyncio.fixture(loop_scope="session")
async def launch(root: Path, sandbox: SandboxMode) -> AsyncIterator[Callable[..., Awaitable[ReplicaHandle]]]:
    """``await launch(command, pids_max=..., **plan_changes)``; every replica is stopped afterwards."""
    handles: list[tuple[LocalExecutor, ReplicaHandle]] = []

    async def launch(command: str, pids_max: int = 4096, **changes: Any) -> ReplicaHandle:
        n = len(handles)
        executor = LocalExecutor(root, node_name=NODE, sandbox=sandbox, pids_max=pids_max)
        plan = ReplicaPlan(
            job_id=1,
            task="limits",
            replica=n,
            attempt=0,
            node=NODE,
            command=command,
            env={},
            run_dir=root / f"run{n}",
            workdir=root,
        )
        handle = await executor.launch(replace(plan, **changes))
        handles.append((executor, handle))
        return handle

    yield launch
    for executor, handle in handles:
        await executor.stop(handle, grace_s=0.5)


async def _exited(handle: ReplicaHandle) -> ReplicaStatus:
    executor = LocalExecutor(node_name=NODE)

    async def done() -> ReplicaStatus | None:
        status = await executor.status(handle)
        return status if status.state is ReplicaState.EXITED else None

    result: ReplicaStatus = await poll(done, "the replica to exit")
    return result


def _record(handle: ReplicaHandle) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
    return data


def _output(handle: ReplicaHandle) -> list[bytes]:
    path = Path(handle.run_dir) / OUTPUT_FILE
    return lines(path.read_bytes()) if path.exists() else []


async def _job_pid(handle: ReplicaHandle, name: str) -> int:
    """The pid of the job's process called ``name``: the command itself, or (sandboxed) inside bwrap."""

    async def find() -> int | None:
        top = psutil.Process(_record(handle)["child_pid"])
        return next((p.pid for p in [top, *top.children(recursive=True)] if p.name() == name), None)

    pid: int = await poll(find, f"the job's {name} process")
    return pid


def _groups_of(pid: int) -> dict[str, Path]:
    """Controller (``""`` for cgroup v2) -> the directory of ``pid``'s group, as the host sees it."""
    with open("/proc/self/mountinfo") as f:
        mounts = hierarchies(f.read())
    with open(f"/proc/{pid}/cgroup") as f:
        own = own_groups(f.read())
    if _USABLE[0].mechanism == "cgroup-v2":
        v2 = next(h for h in mounts if h.version == 2)
        return {"": Path(v2.path(own[""]) or "")}
    return {
        c: Path(next(h for h in mounts if c in h.controllers).path(own[c]) or "") for c in ("memory", "cpu", "pids")
    }


def _read(group: dict[str, Path], controller: str, v1_file: str, v2_file: str) -> str:
    if "" in group:
        return (group[""] / v2_file).read_text().strip()
    return (group[controller] / v1_file).read_text().strip()


async def test_a_burst_past_the_memory_limit_is_killed_by_the_kernel(launch: Any) -> None:
    """256 MiB at once against a 64 MiB limit: the kernel refuses the memory itself (a watchdog sampling every
    0.5 s sees a burst only once it has happened), and the replica's reason is ``oom``."""
    hog = "b = bytearray(256 * 2**20); print('allocated', len(b), flush=True)"
    handle = await launch(f"echo before; {PY} -c {shlex.quote(hog)}", memory_bytes=64 * MiB)
    status = await _exited(handle)
    assert status.reason == "oom"
    assert status.exit_code in (-9, 137)  # killed by SIGKILL (137: the shell reports its child's death)
    assert _output(handle)[0] == b"before"
    assert not any(line.startswith(b"allocated") for line in _output(handle))
    record = _record(handle)
    assert record["limits"] == _USABLE[0].mechanism
    assert f"enforced by {record['limits']} at " in (Path(handle.run_dir) / LAUNCHER_LOG).read_text()


async def test_the_job_runs_under_the_limits_the_plan_asked_and_its_group_goes_with_it(launch: Any) -> None:
    handle = await launch("echo ready; exec sleep 600", memory_bytes=96 * MiB, cpu_milli=1500, pids_max=50)
    group = _groups_of(await _job_pid(handle, "sleep"))
    assert set(group) == ({""} if "" in group else {"memory", "cpu", "pids"})
    assert all(path.name.startswith("job-1-limits-0-attempt-0.") for path in group.values())
    assert _read(group, "memory", "memory.limit_in_bytes", "memory.max") == str(96 * MiB)
    if "" in group:
        assert _read(group, "cpu", "", "cpu.max") == f"150000 {CPU_PERIOD_US}"
        assert _read(group, "cpu", "", "cpu.weight") == "59"
    else:
        assert _read(group, "cpu", "cpu.cfs_quota_us", "") == "150000"
        assert _read(group, "cpu", "cpu.shares", "") == "1536"
        assert _read(group, "cpu", "cpu.cfs_period_us", "") == str(CPU_PERIOD_US)
        assert _read(group, "memory", "memory.memsw.limit_in_bytes", "") == str(96 * MiB)  # no swap beyond it
    assert _read(group, "pids", "pids.max", "pids.max") == "50"
    await LocalExecutor(node_name=NODE).stop(handle, grace_s=0.5)
    status = await _exited(handle)
    assert (status.reason, _record(handle)["limits"]) == ("stopped", _USABLE[0].mechanism)
    assert [path for path in group.values() if path.exists()] == []


async def test_a_fork_bomb_stops_at_the_process_limit(launch: Any) -> None:
    bomb = textwrap.dedent(
        """
        import subprocess, time
        children, failure = [], None
        for _ in range(200):
            try:
                children.append(subprocess.Popen(["sleep", "600"]))
            except OSError as exc:
                failure = exc.errno
                break
        print("started", len(children), "errno", failure, flush=True)
        time.sleep(600)
        """
    )
    handle = await launch(f"exec {PY} -c {shlex.quote(bomb)}", pids_max=64)

    async def reported() -> list[bytes] | None:
        return next((line.split() for line in _output(handle) if line.startswith(b"started")), None)

    words = await poll(reported, "the job to report how many processes it started")
    started = int(words[1])
    assert words[2:] == [b"errno", str(errno.EAGAIN).encode()]  # fork failed: "Resource temporarily unavailable"
    group = _groups_of(await _job_pid(handle, "python3" if sys.executable.endswith("3") else "python"))
    procs = [int(p) for p in _read(group, "pids", "cgroup.procs", "cgroup.procs").split()]
    names = [psutil.Process(p).name() for p in procs]
    assert names.count("sleep") == started
    # Every other process of the group is the job's own (python; sandboxed, bwrap and its init too), and all
    # of them together are the limit: the job got exactly what pids.max allows, not one more.
    assert started + len(procs) - names.count("sleep") == 64
    assert started < 64


async def test_processes_that_left_the_process_group_die_with_the_replica(launch: Any, root: Path) -> None:
    """``setsid`` leaves the process group the launcher kills at the end, not the control group."""
    gate = root / "gate"
    command = f"setsid sleep 600 </dev/null >/dev/null 2>&1 & echo escaped; while [ ! -f {gate} ]; do sleep 0.05; done"
    handle = await launch(command, pids_max=16, env={"AICENTER_DATA_DIR": str(root)})  # the gate, sandboxed

    async def escaped() -> psutil.Process | None:
        top = psutil.Process(_record(handle)["child_pid"])
        return next((p for p in top.children(recursive=True) if p.cmdline() == ["sleep", "600"]), None)

    sleeper: psutil.Process = await poll(escaped, "the job's setsid sleep")
    assert os.getpgid(sleeper.pid) != _record(handle)["child_pid"]  # out of the group the launcher kills
    gate.touch()
    assert (await _exited(handle)).exit_code == 0

    assert await poll(lambda: _gone(sleeper), "the escaped sleep to be killed")
    assert _record(handle)["limits"] == _USABLE[0].mechanism


async def _gone(process: psutil.Process) -> bool:
    """Ended: a zombie (its parent, init, may not have reaped it yet) or no more."""
    try:
        return process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _existing(paths: Iterable[str]) -> list[str]:
    return sorted(p for p in paths if os.path.isdir(p))


async def test_a_stop_after_the_launcher_was_killed_still_ends_what_left_the_process_group(
    launch: Any, root: Path
) -> None:
    """The launcher died (``kill -9``): the stop finds the replica's control group in its record and empties it."""
    handle = await launch("setsid sleep 600 </dev/null >/dev/null 2>&1 & echo escaped; exec sleep 600", pids_max=16)

    async def escaped() -> psutil.Process | None:
        tree = psutil.Process(handle.pid).children(recursive=True)
        # The setsid one leads a session of its own; the command's own sleep does not.
        return next((p for p in tree if p.cmdline() == ["sleep", "600"] and os.getsid(p.pid) == p.pid), None)

    sleeper: psutil.Process = await poll(escaped, "the job's setsid sleep")
    groups = dict(_record(handle)["cgroups"])
    assert _existing(groups.values()) == sorted(groups.values())
    os.kill(handle.pid, signal.SIGKILL)  # the launcher
    await LocalExecutor(root, node_name=NODE).stop(handle, grace_s=0.5)

    assert await poll(lambda: _gone(sleeper), "the escaped sleep to be killed")
    assert _existing(groups.values()) == []


async def test_without_cgroups_the_watchdog_still_enforces_memory(root: Path) -> None:
    """``cgroups=False`` (or a host where none can be made): the launcher samples the memory and kills."""
    executor = LocalExecutor(root, node_name=NODE, cgroups=False)
    hog = "import time; b = b'x' * (300 * 2**20); print('allocated', flush=True); time.sleep(120)"
    plan = ReplicaPlan(
        job_id=1,
        task="watchdog",
        replica=0,
        attempt=0,
        node=NODE,
        command=f"{PY} -c {shlex.quote(hog)}",
        env={},
        run_dir=root / "run",
        workdir=root,
        memory_bytes=100 * MiB,
    )
    handle = await executor.launch(plan)
    try:
        status = await _exited(handle)
    finally:
        await executor.stop(handle, grace_s=0.5)
    assert status.reason == "oom"
    assert _record(handle)["limits"] == "watchdog"
    assert "enforced by the watchdog; no cgroup: off in the plan" in (Path(handle.run_dir) / LAUNCHER_LOG).read_text()
