"""The executor contract on the ``local`` executor, plus what only the local executor promises."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import sys
import textwrap
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from aicenter.executors import Executor, LaunchFailed, ReplicaHandle, ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import SandboxMode, sandbox_support
from aicenter.runtime.files import STATUS_FILE, write_json_atomic
from aicenter.runtime.launcher import INHERITED_VARIABLES
from tests.contract.executor_suite import PY, ExecutorContract, lines, poll

NODE = "contract-node"


def _alive(pid: int | None, start_time: float | None) -> bool:
    if pid is None or start_time is None:
        return False
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - start_time) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _environ(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as f:
        return f.read()


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


class TestLocalExecutor(ExecutorContract):
    node = NODE
    sandbox: SandboxMode = "off"

    def make_executor(self, root: Path) -> Executor:
        return LocalExecutor(root, node_name=NODE, sandbox=self.sandbox)

    def kill_supervisor(self, handle: ReplicaHandle) -> None:
        os.kill(handle.pid, signal.SIGKILL)

    def command_alive(self, handle: ReplicaHandle) -> bool:
        record = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
        return _alive(record["child_pid"], record["child_start_time"])

    # -- local only ------------------------------------------------------------------------------------------

    async def test_server_variables_do_not_reach_the_job(
        self, executor: Executor, launch: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("AICENTER_SECRET_KEY", "server-secret")
        handle = await launch('echo "secret=[$AICENTER_SECRET_KEY]"; echo "run=$AICENTER_RUN_DIR"; echo "$PATH"')
        await self.wait_exited(executor, handle)
        out = lines(await self.read_log(executor, handle))
        assert out[:2] == [b"secret=[]", f"run={handle.run_dir}".encode()]
        assert out[2]  # a usable PATH

    async def test_server_secrets_reach_neither_the_job_nor_its_launcher(
        self, executor: Executor, launch: Any, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The launcher stays outside the replica's sandbox, so its own environment is scrubbed too: a job that
        reads ``/proc/$PPID/environ`` finds only the basics."""
        monkeypatch.setenv("AICENTER_ADMIN_PASSWORD", "server-secret-password")
        handle = await launch("env; tr '\\0' '\\n' < /proc/$PPID/environ; echo ready; exec sleep 600")
        await self.wait_for_line(executor, handle, b"ready")
        seen = await self.read_log(executor, handle)
        assert b"PATH=" in seen  # the job did read both environments
        assert b"AICENTER_ADMIN_PASSWORD" not in seen
        assert b"server-secret-password" not in seen
        launcher_environ = _environ(handle.pid)
        assert launcher_environ  # readable: this test runs as the launcher's user
        assert b"server-secret-password" not in launcher_environ
        assert {v.partition(b"=")[0] for v in launcher_environ.split(b"\0") if v} <= {
            name.encode() for name in INHERITED_VARIABLES
        }

    async def test_run_dir_is_private_and_the_plan_forgets_the_token(self, executor: Executor, launch: Any) -> None:
        handle = await launch('echo "token=[$AICENTER_TOKEN]"', env={"AICENTER_TOKEN": "acj_1_job-secret"})
        await self.wait_exited(executor, handle)
        assert lines(await self.read_log(executor, handle)) == [b"token=[acj_1_job-secret]"]
        run_dir = Path(handle.run_dir)
        assert _mode(run_dir) == 0o700
        plan_file = run_dir / "plan.json"
        assert _mode(plan_file) == 0o600
        plan = json.loads(plan_file.read_text())
        assert "AICENTER_TOKEN" not in plan["env"]
        assert "job-secret" not in plan_file.read_text()

    async def test_python_bin_comes_first_on_path(self, executor: Executor, launch: Any, root: Path) -> None:
        venv_bin = root / "venv" / "bin"
        venv_bin.mkdir(parents=True)
        tool = venv_bin / "mytool"
        tool.write_text("#!/bin/sh\necho from-venv\n")
        tool.chmod(0o755)
        handle = await launch("mytool", python_bin=venv_bin)
        assert (await self.wait_exited(executor, handle)).exit_code == 0
        assert lines(await self.read_log(executor, handle)) == [b"from-venv"]

    async def test_cpu_affinity_is_applied(self, executor: Executor, launch: Any) -> None:
        cpu = min(os.sched_getaffinity(0))
        handle = await launch(f"{PY} -c 'import os; print(sorted(os.sched_getaffinity(0)))'", cpus=(cpu,))
        await self.wait_exited(executor, handle)
        assert lines(await self.read_log(executor, handle)) == [f"[{cpu}]".encode()]

    async def test_a_command_killed_by_a_signal_exits_with_minus_the_signal(
        self, executor: Executor, launch: Any
    ) -> None:
        handle = await launch("kill -USR1 $$")
        status = await self.wait_exited(executor, handle)
        assert (status.exit_code, status.reason) == (-signal.SIGUSR1, f"signal {int(signal.SIGUSR1)}")

    async def test_stop_without_its_launcher_leaves_nothing_of_a_command_ignoring_sigterm(
        self, executor: Executor, launch: Any, root: Path
    ) -> None:
        handle = await launch("trap '' TERM; echo ready; while true; do sleep 0.1; done")
        await self.wait_for_line(executor, handle, b"ready")
        group = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())["child_pid"]
        self.kill_supervisor(handle)
        await self.make_executor(root).stop(handle, grace_s=0.5)

        async def group_gone() -> bool:
            try:
                os.killpg(group, 0)
            except ProcessLookupError:
                return True
            return False

        await poll(group_gone, "every process of the command's group to be killed", deadline_s=10.0)

    async def test_missing_workdir_exits_with_launch_failed(self, executor: Executor, launch: Any, root: Path) -> None:
        handle = await launch("echo never", workdir=root / "missing")
        status = await executor.status(handle)
        assert status.state is ReplicaState.EXITED
        assert status.exit_code is None
        assert status.reason is not None
        assert status.reason.startswith("launch failed:")
        assert str(root / "missing") in status.reason

    async def test_launch_is_idempotent_per_run_dir(self, executor: Executor, launch: Any, root: Path) -> None:
        handle = await launch("echo ready; exec sleep 600")
        plan = ReplicaPlan(
            job_id=1,
            task="worker",
            replica=0,
            attempt=0,
            node=NODE,
            command="echo ready; exec sleep 600",
            env={},
            run_dir=Path(handle.run_dir),
            workdir=root,
        )
        again = await executor.launch(plan)
        assert (again.pid, again.start_time) == (handle.pid, handle.start_time)
        plan_file = str(Path(handle.run_dir) / "plan.json")  # in a launcher's arguments (a sandbox's name its dir)
        launchers = [p for p in psutil.process_iter(["cmdline"]) if plan_file in (p.info["cmdline"] or [])]
        assert [p.pid for p in launchers] == [handle.pid]

    async def test_a_second_launcher_for_a_run_dir_leaves_it_alone(self, executor: Executor, launch: Any) -> None:
        handle = await launch("echo ready; exec sleep 600")
        await self.wait_for_line(executor, handle, b"ready")
        second = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "aicenter.runtime.launcher", str(Path(handle.run_dir) / "plan.json")
        )
        assert await second.wait() == 3
        assert lines(await self.read_log(executor, handle)) == [b"ready"]
        record = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
        assert (record["state"], record["launcher_pid"]) == ("running", handle.pid)

    async def test_bad_plans_are_refused(self, root: Path) -> None:
        plan = ReplicaPlan(
            job_id=1,
            task="worker",
            replica=0,
            attempt=0,
            node="elsewhere",
            command="true",
            env={},
            run_dir=root / "run",
            workdir=root,
        )
        with pytest.raises(LaunchFailed, match="elsewhere"):
            await LocalExecutor(root, node_name=NODE).launch(plan)
        with pytest.raises(LaunchFailed, match="relative"):
            await LocalExecutor(None, node_name=NODE).launch(replace(plan, node=NODE, run_dir=Path("run")))
        with pytest.raises(ValueError, match="elsewhere"):
            await LocalExecutor(root, node_name=NODE).allocate_ports("elsewhere", 1)

    async def test_reused_pid_of_an_unrelated_process_is_never_signalled(self, executor: Executor, root: Path) -> None:
        bystander = await asyncio.create_subprocess_exec("sleep", "600")
        try:
            run_dir = root / "stale"
            run_dir.mkdir()
            stale_start = psutil.Process(bystander.pid).create_time() - 3600.0
            record = {
                "state": "running",
                "launcher_pid": bystander.pid,
                "launcher_start_time": stale_start,
                "child_pid": bystander.pid,
                "child_start_time": stale_start,
                "started_at": "2026-01-01T00:00:00.000000Z",
            }
            write_json_atomic(run_dir / STATUS_FILE, record)
            handle = ReplicaHandle("local", NODE, str(run_dir), bystander.pid, stale_start, {})
            assert (await executor.status(handle)).state is ReplicaState.LOST
            await executor.stop(handle, grace_s=0.2)
            assert bystander.returncode is None
            assert _alive(bystander.pid, psutil.Process(bystander.pid).create_time())
        finally:
            bystander.kill()
            await bystander.wait()

    async def test_an_anchored_replica_dies_with_its_anchor(self, root: Path) -> None:
        """``anchor``: the launcher kills the command once the anchor process is gone (the Ray actor's death)."""
        anchor = await asyncio.create_subprocess_exec("sleep", "600")
        executor = LocalExecutor(
            root, node_name=NODE, sandbox=self.sandbox, anchor=(anchor.pid, psutil.Process(anchor.pid).create_time())
        )
        plan = ReplicaPlan(
            job_id=1,
            task="worker",
            replica=0,
            attempt=0,
            node=NODE,
            command="echo ready; exec sleep 600",
            env=self.base_env(root),
            run_dir=root / "anchored",
            workdir=root,
        )
        handle = await executor.launch(plan)
        try:
            await self.wait_for_line(executor, handle, b"ready")
            assert (await executor.status(handle)).state is ReplicaState.RUNNING
            anchor.kill()
            await anchor.wait()
            status = await self.wait_exited(executor, handle)
            assert (status.exit_code, status.reason) == (-signal.SIGKILL, "node lost")
            assert not self.command_alive(handle)
        finally:
            if anchor.returncode is None:
                anchor.kill()
                await anchor.wait()
            await executor.stop(handle, grace_s=1.0)

    async def test_replica_survives_the_server_being_killed(self, root: Path) -> None:
        """A server process launches a replica and dies by SIGKILL; a new executor finds the replica running."""
        gate = root / "gate"
        server = textwrap.dedent(
            f"""
            import asyncio, json, sys
            from pathlib import Path
            from aicenter.executors import ReplicaPlan
            from aicenter.executors.local import LocalExecutor

            async def main():
                ex = LocalExecutor(node_name={NODE!r}, sandbox={self.sandbox!r})
                plan = ReplicaPlan(job_id=1, task="worker", replica=0, attempt=0, node={NODE!r},
                    command="echo up; while [ ! -f {gate} ]; do sleep 0.05; done; echo finished",
                    env={self.base_env(root)!r}, run_dir=Path({str(root / "run")!r}), workdir=Path({str(root)!r}))
                handle = await ex.launch(plan)
                print(json.dumps(handle.to_dict()), flush=True)
                await asyncio.sleep(600)

            asyncio.run(main())
            """
        )
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", server, stdout=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            handle = ReplicaHandle.from_dict(json.loads(await proc.stdout.readline()))
        finally:
            proc.kill()  # SIGKILL: the server gets no chance to clean up
            await proc.wait()
        executor = LocalExecutor(root, node_name=NODE)
        try:
            assert (await executor.status(handle)).state is ReplicaState.RUNNING
            gate.touch()  # the replica finishes while no server is up
            status = await self.wait_exited(executor, handle)
            assert status.exit_code == 0
            assert lines(await self.read_log(executor, handle)) == [b"up", b"finished"]
        finally:
            await executor.stop(handle, grace_s=1.0)

        async def launcher_gone() -> bool:
            return not _alive(handle.pid, handle.start_time)

        await poll(launcher_gone, "the launcher to exit after writing its final status")


@pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}")
class TestSandboxedLocalExecutor(TestLocalExecutor):
    """The same contract with every replica in a bubblewrap sandbox (as root: in its own uid)."""

    sandbox: SandboxMode = "bwrap"

    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        tmp_path.chmod(0o755)  # pytest makes it 0700: the job's own uid could not look inside for gate files
        return tmp_path

    def base_env(self, root: Path) -> dict[str, str]:
        return {"AICENTER_DATA_DIR": str(root)}
