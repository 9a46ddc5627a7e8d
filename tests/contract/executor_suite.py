"""The contract every executor keeps (``aicenter.executors.base``), as one reusable test class.

Use it by subclassing ``ExecutorContract`` in a ``test_*.py`` module and implementing the hooks::

    class TestLocalExecutor(ExecutorContract):
        def make_executor(self, root: Path) -> Executor: ...
        def kill_supervisor(self, handle: ReplicaHandle) -> None: ...
        def command_alive(self, handle: ReplicaHandle) -> bool: ...

Every replica a test launches is stopped by the fixture, through a fresh executor, whatever the test did.
Waiting is always a poll with a deadline, never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import json
import re
import shlex
import socket
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aicenter.executors import Executor, ReplicaHandle, ReplicaPlan, ReplicaState, ReplicaStatus

# Generous: the machines that run this suite are shared and slow to start processes under load.
DEADLINE_S = 60.0
STAMPED_LINE = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z (.*)$")
PY = shlex.quote(sys.executable)


async def poll(check: Callable[[], Awaitable[Any]], what: str, deadline_s: float = DEADLINE_S) -> Any:
    """Call ``check`` until it returns something truthy; fail with ``what`` after the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        result = await check()
        if result:
            return result
        if time.monotonic() > end:
            pytest.fail(f"timed out after {deadline_s:g} s waiting for {what}")
        await asyncio.sleep(0.05)


def lines(log: bytes) -> list[bytes]:
    """The payloads of timestamped log lines; fails on a line without a timestamp."""
    out = []
    for line in log.splitlines():
        match = STAMPED_LINE.match(line)
        assert match, f"log line without a timestamp: {line!r}"
        out.append(match.group(1))
    return out


class ExecutorContract:
    """The executor contract. Subclasses provide the executor and two engine-specific probes."""

    node: str

    # -- hooks -----------------------------------------------------------------------------------------------

    def make_executor(self, root: Path) -> Executor:
        """A new executor instance; called again to play a restarted server."""
        raise NotImplementedError

    def kill_supervisor(self, handle: ReplicaHandle) -> None:
        """Kill the replica's supervision abruptly (the local launcher with SIGKILL), leaving the command."""
        raise NotImplementedError

    def command_alive(self, handle: ReplicaHandle) -> bool:
        """Whether the replica's command process still runs."""
        raise NotImplementedError

    def base_env(self, root: Path) -> dict[str, str]:
        """The variables of every plan the ``launch`` fixture makes (a sandboxed executor needs ``root``'s
        gate files visible: it names ``root`` as the job's read-only data dir)."""
        return {}

    # -- fixtures --------------------------------------------------------------------------------------------

    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        return tmp_path

    @pytest.fixture
    def executor(self, root: Path) -> Executor:
        return self.make_executor(root)

    @pytest_asyncio.fixture(loop_scope="session")
    async def launch(self, executor: Executor, root: Path) -> AsyncIterator[Callable[..., Awaitable[ReplicaHandle]]]:
        """``await launch(command, **plan_changes)``; every replica launched is stopped afterwards."""
        counter = iter(range(1000))
        handles: list[ReplicaHandle] = []

        async def launch(command: str, **changes: Any) -> ReplicaHandle:
            n = next(counter)
            workdir = root / f"work{n}"
            workdir.mkdir(exist_ok=True)
            plan = ReplicaPlan(
                job_id=1,
                task="worker",
                replica=n,
                attempt=0,
                node=self.node,
                command=command,
                env=self.base_env(root),
                run_dir=root / f"run{n}",
                workdir=workdir,
            )
            handle = await executor.launch(replace(plan, **changes))
            handles.append(handle)
            return handle

        yield launch
        cleaner = self.make_executor(root)
        for handle in handles:
            await cleaner.stop(handle, grace_s=1.0)

    # -- helpers ---------------------------------------------------------------------------------------------

    @staticmethod
    async def wait_exited(executor: Executor, handle: ReplicaHandle) -> ReplicaStatus:
        async def exited() -> ReplicaStatus | None:
            status = await executor.status(handle)
            return status if status.state is ReplicaState.EXITED else None

        result: ReplicaStatus = await poll(exited, "the replica to exit")
        return result

    @staticmethod
    async def read_log(executor: Executor, handle: ReplicaHandle, since: int = 0) -> bytes:
        return b"".join([chunk async for chunk in executor.logs(handle, since)])

    async def wait_for_line(self, executor: Executor, handle: ReplicaHandle, text: bytes) -> None:
        async def seen() -> bool:
            return text in lines(await self.read_log(executor, handle))

        await poll(seen, f"the line {text!r}")

    # -- the contract ----------------------------------------------------------------------------------------

    async def test_echo_exits_zero_with_timestamped_log(self, executor: Executor, launch: Any) -> None:
        handle = await launch("echo hello world")
        assert handle.node == self.node
        json.dumps(handle.to_dict())  # storable on the replica row
        status = await self.wait_exited(executor, handle)
        assert (status.exit_code, status.reason) == (0, None)
        assert status.started_at is not None
        assert status.finished_at is not None
        assert status.finished_at >= status.started_at
        assert lines(await self.read_log(executor, handle)) == [b"hello world"]

    async def test_exit_code_and_stderr(self, executor: Executor, launch: Any) -> None:
        handle = await launch("echo oops >&2; printf 'no newline'; exit 3")
        status = await self.wait_exited(executor, handle)
        assert (status.exit_code, status.reason) == (3, None)
        assert sorted(lines(await self.read_log(executor, handle))) == [b"no newline", b"oops"]

    async def test_logs_since_offset(self, executor: Executor, launch: Any) -> None:
        handle = await launch("echo first; echo second")
        await self.wait_exited(executor, handle)
        log = await self.read_log(executor, handle)
        first_line_end = log.index(b"\n") + 1
        assert lines(await self.read_log(executor, handle, since=first_line_end)) == [b"second"]
        assert await self.read_log(executor, handle, since=len(log)) == b""

    async def test_env_has_plan_variables_and_devices(self, executor: Executor, launch: Any) -> None:
        handle = await launch(
            'echo "FOO=$FOO"; echo "CUDA=$CUDA_VISIBLE_DEVICES"', env={"FOO": "bar baz"}, devices=(0, 2)
        )
        assert (await self.wait_exited(executor, handle)).exit_code == 0
        assert lines(await self.read_log(executor, handle)) == [b"FOO=bar baz", b"CUDA=0,2"]

    async def test_no_devices_hides_every_gpu(self, executor: Executor, launch: Any) -> None:
        handle = await launch('echo "set=${CUDA_VISIBLE_DEVICES+yes} value=[$CUDA_VISIBLE_DEVICES]"')
        await self.wait_exited(executor, handle)
        assert lines(await self.read_log(executor, handle)) == [b"set=yes value=[]"]

    async def test_cwd_is_workdir(self, executor: Executor, launch: Any, root: Path) -> None:
        workdir = root / "my work dir"
        workdir.mkdir()
        handle = await launch("pwd", workdir=workdir)
        await self.wait_exited(executor, handle)
        assert lines(await self.read_log(executor, handle)) == [str(workdir).encode()]

    async def test_stop_lets_a_trapping_command_checkpoint(self, executor: Executor, launch: Any) -> None:
        handle = await launch("trap 'echo checkpointed; exit 0' TERM; echo ready; while true; do sleep 0.1; done")
        await self.wait_for_line(executor, handle, b"ready")
        await executor.stop(handle, grace_s=30.0)
        status = await executor.status(handle)
        assert (status.state, status.exit_code, status.reason) == (ReplicaState.EXITED, 0, "stopped")
        assert lines(await self.read_log(executor, handle)).count(b"checkpointed") == 1
        await executor.stop(handle, grace_s=1.0)  # idempotent
        assert (await executor.status(handle)).exit_code == 0

    async def test_stop_kills_a_command_ignoring_sigterm(self, executor: Executor, launch: Any) -> None:
        handle = await launch("trap '' TERM; echo ready; while true; do sleep 0.1; done")
        await self.wait_for_line(executor, handle, b"ready")
        started = time.monotonic()
        await executor.stop(handle, grace_s=1.0)
        assert time.monotonic() - started >= 1.0  # the grace period was given
        status = await executor.status(handle)
        assert (status.state, status.exit_code, status.reason) == (ReplicaState.EXITED, -9, "stopped")
        assert not self.command_alive(handle)

    async def test_memory_limit_exceeded_is_oom(self, executor: Executor, launch: Any) -> None:
        hog = "import time; b = b'x' * (300 * 2**20); print('allocated', flush=True); time.sleep(120)"
        handle = await launch(f"{PY} -c {shlex.quote(hog)}", memory_bytes=100 * 2**20)
        status = await self.wait_exited(executor, handle)
        assert status.reason == "oom"
        assert status.exit_code is not None
        assert status.exit_code != 0

    async def test_logs_follow_streams_lines_as_they_come(self, executor: Executor, launch: Any, root: Path) -> None:
        gate = root / "gate"
        handle = await launch(f"echo one; while [ ! -f {shlex.quote(str(gate))} ]; do sleep 0.05; done; echo two")
        seen = b""
        async for chunk in executor.logs(handle, follow=True):
            seen += chunk
            if b" one\n" in seen and not gate.exists():
                assert b"two" not in seen  # "two" cannot exist before the gate opens: this is live streaming
                gate.touch()
        assert lines(seen) == [b"one", b"two"]
        assert (await executor.status(handle)).state is ReplicaState.EXITED

    async def test_fresh_executor_adopts_running_and_exited_replicas(self, launch: Any, root: Path) -> None:
        gate = root / "gate"
        handle = await launch(f"echo started; while [ ! -f {shlex.quote(str(gate))} ]; do sleep 0.05; done; echo done")
        stored = json.loads(json.dumps(handle.to_dict()))  # what a server would have in its database

        restarted = self.make_executor(root)  # a new server process: nothing but the stored handle
        adopted = ReplicaHandle.from_dict(stored)
        assert (await restarted.status(adopted)).state is ReplicaState.RUNNING
        await self.wait_for_line(restarted, adopted, b"started")
        gate.touch()
        status = await self.wait_exited(restarted, adopted)
        assert status.exit_code == 0

        later = self.make_executor(root)  # restarted again after the replica finished
        status = await later.status(ReplicaHandle.from_dict(stored))
        assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0)
        assert lines(await self.read_log(later, adopted)) == [b"started", b"done"]

    async def test_lost_supervisor_is_lost_and_stop_kills_the_orphan(
        self, executor: Executor, launch: Any, root: Path
    ) -> None:
        handle = await launch("echo ready; exec sleep 600")
        await self.wait_for_line(executor, handle, b"ready")
        self.kill_supervisor(handle)

        async def lost() -> ReplicaStatus | None:
            status = await executor.status(handle)
            return status if status.state is ReplicaState.LOST else None

        status = await poll(lost, "the replica to be lost")
        assert status.reason == "launcher lost"
        assert self.command_alive(handle)
        await self.make_executor(root).stop(handle, grace_s=5.0)

        async def gone() -> bool:
            return not self.command_alive(handle)

        await poll(gone, "the orphaned command to be killed")
        assert (await executor.status(handle)).state is ReplicaState.LOST

    async def test_handle_of_another_process_is_lost_and_never_signalled(self, executor: Executor, launch: Any) -> None:
        handle = await launch("echo ready; exec sleep 600")
        await self.wait_for_line(executor, handle, b"ready")
        reused = replace(handle, start_time=handle.start_time - 3600.0)  # same pid, another process's start
        assert (await executor.status(reused)).state is ReplicaState.LOST
        await executor.stop(reused, grace_s=0.5)
        assert (await executor.status(handle)).state is ReplicaState.RUNNING
        assert self.command_alive(handle)

    async def test_allocate_ports_gives_distinct_free_ports(self, executor: Executor) -> None:
        ports = await executor.allocate_ports(self.node, 8)
        assert len(set(ports)) == 8
        again = await executor.allocate_ports(self.node, 8)
        assert not set(ports) & set(again)
        for port in ports + again:
            assert 0 < port < 65536
            with socket.socket() as sock:  # free now: we can bind it
                sock.bind(("127.0.0.1", port))

    async def test_sample_reports_the_node_and_a_running_replicas_use(self, executor: Executor, launch: Any) -> None:
        # ~0.3 s of CPU and 64 MiB touched (bytes * n writes every page), then idle until stopped.
        burn = "sum(range(3 * 10**6)); x = b'x' * (64 << 20); print('ready', flush=True); import time; time.sleep(300)"
        handle = await launch(f"{PY} -c {shlex.quote(burn)}")
        await self.wait_for_line(executor, handle, b"ready")
        nodes = {n.node: n for n in await executor.sample([handle])}
        assert self.node in nodes, f"no telemetry for {self.node}: {sorted(nodes)}"
        node = nodes[self.node]
        assert node.memory_total_bytes
        assert node.memory_used_bytes
        assert 0 < node.memory_used_bytes <= node.memory_total_bytes
        assert node.cpu_utilization is not None or node.cpu_total_seconds
        assert [r.run_dir for r in node.replicas] == [handle.run_dir]
        replica = node.replicas[0]
        assert replica.cpu_seconds is not None
        assert replica.cpu_seconds > 0.05
        assert replica.memory_bytes is not None
        assert replica.memory_bytes >= 64 << 20
        assert all(not n.replicas for name, n in nodes.items() if name != self.node)

    async def test_nodes_include_this_node(self, executor: Executor) -> None:
        nodes = await executor.nodes()
        assert self.node in {n.name for n in nodes}
        assert all(n.cpu_milli > 0 and n.memory_bytes > 0 for n in nodes)
