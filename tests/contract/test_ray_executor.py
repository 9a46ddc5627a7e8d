"""The executor contract on the ``ray`` executor (a real 3-node Ray cluster on this host), plus what only it does.

One cluster per module (~20 s to start on 2 cores). The jobs' directories are the tests' tmp paths: every node
runs on this host, so they share them as a real cluster shares its jobs path. The node-death test kills the
raylet of a node no other test uses, and runs last.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import pytest_asyncio

from aicenter.executors import (
    ACCELERATOR_LABEL,
    HOSTNAME_LABEL,
    Executor,
    LaunchFailed,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
)
from aicenter.executors.local.sandboxing import SandboxMode, sandbox_support
from aicenter.executors.ray import RayExecutor
from aicenter.runtime.files import STATUS_FILE
from tests.contract.executor_suite import ExecutorContract, lines, poll
from tests.support.ray import RayCluster, ray_available

# An engine's contract on a real 3-node cluster (~2 minutes): with the slow tests (README).
pytestmark = [
    pytest.mark.slow,
    pytest.mark.ray,
    pytest.mark.skipif(ray_available() is not None, reason=str(ray_available())),
]

HEAD = "ray-127-0-0-2"  # 4 aicenter/nvidia-a100, rack r1
WORKER = "ray-127-0-0-3"  # 1 aicenter/nvidia-t4, rack r2, leaf l1
SPARE = "spare"  # 127.0.0.4, named by its aicenter.io/node label; killed by the last test


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def cluster() -> AsyncIterator[RayCluster]:
    with RayCluster() as cluster:
        yield cluster
        # Disconnect before the cluster stops: a Ray driver left connected to a stopped cluster waits for it
        # (the executor sets no limit, so that a server outlives a restarting head) and would hold this process.
        await RayExecutor(address=cluster.address).close()


def _record(handle: ReplicaHandle) -> dict[str, object]:
    data: dict[str, object] = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
    return data


def _alive(pid: object, start_time: object) -> bool:
    if not isinstance(pid, int) or not isinstance(start_time, float):
        return False
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - start_time) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _plan(root: Path, name: str, node: str, command: str, **changes: object) -> ReplicaPlan:
    workdir = root / f"{name}-work"
    workdir.mkdir(exist_ok=True)
    fields: dict[str, object] = {
        "job_id": 7,
        "task": "worker",
        "replica": 0,
        "attempt": 0,
        "node": node,
        "command": command,
        "env": {},
        "run_dir": root / name,
        "workdir": workdir,
        **changes,
    }
    return ReplicaPlan(**fields)  # type: ignore[arg-type]


class RayContract(ExecutorContract):
    """The contract's hooks on the module's cluster."""

    node = HEAD
    sandbox: SandboxMode = "off"

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: RayCluster) -> None:
        self.address = cluster.address

    def make_executor(self, root: Path) -> Executor:
        # The module's cluster declares a dead node within about 3 s (tests/support/ray.py).
        return RayExecutor(root, address=self.address, launch_timeout_s=30.0, lost_grace_s=8.0, sandbox=self.sandbox)

    def kill_supervisor(self, handle: ReplicaHandle) -> None:
        os.kill(int(_record(handle)["launcher_pid"]), signal.SIGKILL)  # type: ignore[call-overload]

    def command_alive(self, handle: ReplicaHandle) -> bool:
        record = _record(handle)
        return _alive(record["child_pid"], record["child_start_time"])


class TestRayExecutor(RayContract):
    """The contract unsandboxed, then what only the ray executor does; the node-death test is the module's last."""

    # -- ray only --------------------------------------------------------------------------------------------

    async def test_a_replica_runs_on_its_node_and_reserves_its_devices(
        self, executor: Executor, launch: object, cluster: RayCluster
    ) -> None:
        import ray

        handle = await launch(  # type: ignore[operator]
            "echo ready; exec sleep 600", node=WORKER, devices=(0,), cpu_milli=500
        )
        await self.wait_for_line(executor, handle, b"ready")
        assert handle.node == WORKER
        node_id = handle.extra["node_id"]
        info = {n["NodeID"]: n for n in ray.nodes()}[node_id]
        assert info["NodeManagerAddress"] == "127.0.0.3"
        # The actor holds the node's one T4 and half a CPU while the replica runs.
        usage = await asyncio.to_thread(ray.available_resources)
        assert usage.get("aicenter/nvidia-t4", 0.0) == 0.0
        await executor.stop(handle, grace_s=1.0)

        async def released() -> bool:
            return (await asyncio.to_thread(ray.available_resources)).get("aicenter/nvidia-t4", 0.0) == 1.0

        await poll(released, "the actor to end and free the T4")

    @pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}")
    async def test_a_sandboxed_replica_runs_in_its_sandbox_on_the_node(self, root: Path) -> None:
        """The actor's launcher sandboxes as the local one does (the whole contract in a sandbox is the local
        executor's, whose code the actor runs; the e2e runs a sandboxed DDP job on Ray): its own PID namespace,
        and as root the workspace's uid."""
        os.chmod(root, 0o755)  # noqa: S103 - the job's own uid looks inside
        executor = RayExecutor(root, address=self.address, launch_timeout_s=30.0, sandbox="bwrap")
        handle = await executor.launch(_plan(root, "sandboxed", WORKER, "echo uid=$(id -u) pid=$$", workspace_id=5))
        try:
            status = await self.wait_exited(executor, handle)
            assert status.exit_code == 0
            [line] = lines(await self.read_log(executor, handle))
            uid = 200_000 + 5 if os.geteuid() == 0 else os.geteuid()
            assert line.decode().split()[0] == f"uid={uid}"
            assert int(line.decode().split("pid=")[1]) < 10  # its own PID namespace
        finally:
            await executor.stop(handle, grace_s=1.0)

    async def test_launch_is_idempotent_per_run_dir(self, executor: Executor, launch: object, root: Path) -> None:
        handle = await launch("echo ready; exec sleep 600", node=WORKER)  # type: ignore[operator]
        # The same plan again (a controller retrying): the same actor, by name, which adopts its launcher.
        plan = _plan(root, "again", WORKER, "echo ready; exec sleep 600", job_id=1, run_dir=Path(handle.run_dir))
        again = await executor.launch(plan)
        assert (again.pid, again.start_time, again.extra["actor"]) == (
            handle.pid,
            handle.start_time,
            handle.extra["actor"],
        )
        await self.wait_for_line(executor, handle, b"ready")
        assert lines(await self.read_log(executor, handle)) == [b"ready"]

    async def test_nodes_show_the_clusters_nodes_with_accelerators_and_labels(self, executor: Executor) -> None:
        nodes = {n.name: n for n in await executor.nodes()}
        assert set(nodes) == {HEAD, WORKER, SPARE}
        head, worker, spare = nodes[HEAD], nodes[WORKER], nodes[SPARE]
        assert (head.executor, head.address, head.cpu_milli) == ("ray", "127.0.0.2", 2000)
        assert [(a.index, a.type) for a in head.accelerators] == [(i, "nvidia-a100") for i in range(4)]
        assert head.labels == {"rack": "r1", HOSTNAME_LABEL: HEAD, ACCELERATOR_LABEL: "nvidia-a100"}
        assert [a.type for a in worker.accelerators] == ["nvidia-t4"]
        assert worker.labels["leaf"] == "l1"
        assert spare.accelerators == ()
        assert spare.labels == {"rack": "r2", HOSTNAME_LABEL: SPARE}

    async def test_bad_plans_are_refused(self, executor: Executor, root: Path) -> None:
        with pytest.raises(LaunchFailed, match="elsewhere"):
            await executor.launch(_plan(root, "bad", "elsewhere", "true"))
        with pytest.raises(LaunchFailed, match="relative"):
            await RayExecutor(None, address=self.address).launch(_plan(root, "bad", HEAD, "true", run_dir=Path("r")))
        with pytest.raises(ValueError, match="elsewhere"):
            await executor.allocate_ports("elsewhere", 1)

    async def test_a_replica_that_cannot_be_placed_fails_to_launch(self, launch: object, root: Path) -> None:
        executor = RayExecutor(root, address=self.address, launch_timeout_s=2.0)
        with pytest.raises(LaunchFailed, match="not schedulable"):  # more CPUs than the node has: Ray says so
            await executor.launch(_plan(root, "huge", WORKER, "true", cpu_milli=64_000))
        await launch("exec sleep 600", node=WORKER, devices=(0,))  # type: ignore[operator]
        with pytest.raises(LaunchFailed, match="did not start"):  # the node's one T4 is taken: Ray would wait
            await executor.launch(_plan(root, "busy", WORKER, "true", devices=(0,)))
        assert not (root / "busy" / STATUS_FILE).exists()

    async def test_a_fresh_server_process_adopts_a_running_replica(self, root: Path) -> None:
        """A server process (its own ray.init) launches a replica and dies by SIGKILL; this process adopts it."""
        gate = root / "gate"
        plan_args = {
            "job_id": 7,
            "task": "worker",
            "replica": 0,
            "attempt": 0,
            "node": WORKER,
            "command": f"echo up; while [ ! -f {gate} ]; do sleep 0.05; done; echo finished",
            "env": {},
            "run_dir": str(root / "adopted"),
            "workdir": str(root),
        }
        server = textwrap.dedent(
            f"""
            import asyncio, json
            from pathlib import Path
            from aicenter.executors import ReplicaPlan
            from aicenter.executors.ray import RayExecutor

            async def main():
                ex = RayExecutor(address={self.address!r})
                args = {plan_args!r}
                plan = ReplicaPlan(**{{**args, "run_dir": Path(args["run_dir"]), "workdir": Path(args["workdir"])}})
                handle = await ex.launch(plan)
                print(json.dumps(handle.to_dict()), flush=True)
                await asyncio.sleep(600)

            asyncio.run(main())
            """
        )
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", server, stdout=asyncio.subprocess.PIPE)
        try:
            assert proc.stdout is not None
            line = await asyncio.wait_for(proc.stdout.readline(), 60)
            handle = ReplicaHandle.from_dict(json.loads(line))
        finally:
            proc.kill()  # SIGKILL: the server gets no chance to clean up; the detached actor lives on
            await proc.wait()
        executor = RayExecutor(root, address=self.address)
        try:
            assert (await executor.status(handle)).state is ReplicaState.RUNNING
            await self.wait_for_line(executor, handle, b"up")
            gate.touch()
            status = await self.wait_exited(executor, handle)
            assert status.exit_code == 0
            assert lines(await self.read_log(executor, handle)) == [b"up", b"finished"]
        finally:
            await executor.stop(handle, grace_s=1.0)

    async def test_zz_a_dead_node_loses_its_replica_and_kills_its_command(
        self, executor: Executor, launch: object, cluster: RayCluster
    ) -> None:
        """Last in the module: the spare node's raylet is killed (``kill -9``), as if its machine had gone.

        Replica ``a`` shows the anchor: its launcher survives the node here (on a real node it would die with
        the machine) and kills the command. Replica ``b``'s launcher is frozen (SIGSTOP) until Ray declared the
        node dead: it plays a launcher that died with its node, leaving no final record.
        """
        a = await launch("echo ready; exec sleep 600", node=SPARE)  # type: ignore[operator]
        b = await launch("echo ready; exec sleep 600", node=SPARE)  # type: ignore[operator]
        for handle in (a, b):
            await self.wait_for_line(executor, handle, b"ready")
        os.kill(b.pid, signal.SIGSTOP)
        try:
            cluster.kill_raylet("127.0.0.4")

            async def lost(handle: ReplicaHandle) -> object:
                status = await executor.status(handle)
                return status if status.state is ReplicaState.LOST else None

            for handle in (a, b):
                status = await poll(lambda h=handle: lost(h), "the replica on the dead node to be lost", 60.0)
                assert status.reason == "node lost"
            assert self.command_alive(b)  # its launcher, frozen, could not act
        finally:
            os.kill(b.pid, signal.SIGCONT)

        async def commands_dead() -> bool:
            return not self.command_alive(a) and not self.command_alive(b)

        await poll(commands_dead, "the dead node's commands to be killed by their launchers", deadline_s=30.0)

        async def recorded() -> bool:
            return all(_record(h)["state"] == "exited" for h in (a, b))

        await poll(recorded, "the launchers' final records", deadline_s=30.0)
        for handle in (a, b):  # each launcher saw its anchor, the actor, die with the node
            record = _record(handle)
            assert (record["exit_code"], record["reason"]) == (-9, "node lost")

        async def node_gone() -> bool:
            return SPARE not in {n.name for n in await executor.nodes()}

        await poll(node_gone, "Ray to declare the node dead", deadline_s=60.0)
        assert (await executor.status(a)).reason == "node lost"
        await executor.stop(a, grace_s=1.0)  # nothing left to stop: a no-op, no error
