"""The executor contract on the ``slurm`` executor against a real Slurm cluster on this host, plus what only
Slurm does: placement on the node, GRES, node failure, queueing past the launch deadline.

One cluster for the module (tests/support/slurm.py; ~5 s to start). Its nodes are all this host, so the hooks
signal and inspect the launcher and the command with their recorded pids. The node-failure test runs last:
it sets ``node3`` DOWN.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil
import pytest

from aicenter.executors import Executor, LaunchFailed, ReplicaHandle, ReplicaPlan, ReplicaState, ReplicaStatus
from aicenter.executors.local.sandboxing import SandboxMode, sandbox_support
from aicenter.executors.slurm import SlurmExecutor
from aicenter.executors.slurm.executor import JOB_FILE
from aicenter.runtime.files import STATUS_FILE
from tests.contract.executor_suite import ExecutorContract, lines, poll
from tests.support.slurm import NodeSpec, SlurmCluster, slurm_available

# An engine's contract on a real Slurm cluster: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.slurm]

NODES = (
    # Room for the contract's replicas at once (Slurm's CPUs here are declared, not this host's).
    NodeSpec("node1", cpus=16, memory_mib=4096, gpus=(("a100", 4),)),
    NodeSpec("node2", cpus=2, memory_mib=1024, gpus=(("t4", 1),)),
    NodeSpec("node3", cpus=2, memory_mib=1024),
)
PARTITION = "main"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    with SlurmCluster(tmp_path_factory.mktemp("slurm") / "cluster", nodes=NODES, partition=PARTITION) as slurm:
        yield slurm


def _alive(pid: int | None, start_time: float | None) -> bool:
    if pid is None or start_time is None:
        return False
    try:
        proc = psutil.Process(pid)
        return abs(proc.create_time() - start_time) < 0.05 and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _job_id(handle: ReplicaHandle) -> str:
    return str(handle.extra["slurm_job_id"])


def _squeue(cluster: SlurmCluster, job_id: str, fmt: str) -> str:
    return cluster.run("squeue", "-h", "-t", "all", "-j", job_id, "-o", fmt).stdout.strip()


class TestSlurmExecutor(ExecutorContract):
    node = "node1"
    sandbox: SandboxMode = "off"
    slurm: SlurmCluster

    @pytest.fixture(autouse=True)
    def _cluster(self, cluster: SlurmCluster) -> None:
        type(self).slurm = cluster

    def make_executor(self, root: Path) -> Executor:
        return SlurmExecutor(root, partition=PARTITION, slurm_conf=self.slurm.conf, sandbox=self.sandbox)

    def kill_supervisor(self, handle: ReplicaHandle) -> None:
        os.kill(handle.pid, signal.SIGKILL)

    def command_alive(self, handle: ReplicaHandle) -> bool:
        record = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
        return _alive(record["child_pid"], record["child_start_time"])

    # -- Slurm only ------------------------------------------------------------------------------------------

    async def test_launch_is_idempotent_per_run_dir(self, executor: Executor, launch: Any, root: Path) -> None:
        handle = await launch("echo ready; exec sleep 600")
        plan = ReplicaPlan(1, "worker", 0, 0, self.node, "echo ready; exec sleep 600", {}, Path(handle.run_dir), root)
        again = await executor.launch(plan)
        assert (again.pid, again.start_time, again.extra) == (handle.pid, handle.start_time, handle.extra)
        assert _squeue(self.slurm, _job_id(handle), "%T") == "RUNNING"
        names = self.slurm.run("squeue", "-h", "-o", "%j").stdout.split()
        assert names.count("aicenter-1-worker-0-a0") == 1


@pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}")
class TestSandboxedSlurmExecutor(TestSlurmExecutor):
    """The same contract with every replica in a bubblewrap sandbox (as root: in its own uid)."""

    sandbox: SandboxMode = "bwrap"

    @pytest.fixture
    def root(self, tmp_path: Path) -> Path:
        tmp_path.chmod(0o755)  # pytest makes it 0700: the job's own uid could not look inside for gate files
        return tmp_path

    def base_env(self, root: Path) -> dict[str, str]:
        return {"AICENTER_DATA_DIR": str(root)}


# -- Slurm only, outside the contract class (run once) -------------------------------------------------------


def _plan(root: Path, node: str, command: str, n: int = 0, **changes: Any) -> ReplicaPlan:
    workdir = root / f"work{n}"
    workdir.mkdir(exist_ok=True)
    plan = ReplicaPlan(1, "worker", n, 0, node, command, {}, root / f"run{n}", workdir)
    return replace(plan, **changes)


async def _stopped(executor: SlurmExecutor, *handles: ReplicaHandle) -> None:
    for handle in handles:
        await executor.stop(handle, grace_s=1.0)


async def test_replica_runs_on_its_node_with_its_gpus(cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    handle = await executor.launch(
        _plan(tmp_path, "node2", 'echo "cuda=$CUDA_VISIBLE_DEVICES"; echo ready; exec sleep 600', devices=(0,))
    )
    try:
        assert handle.node == "node2"
        job = _job_id(handle)
        assert _squeue(cluster, job, "%N") == "node2"
        assert "GRES=gpu:t4:1(IDX:0)" in cluster.run("scontrol", "show", "job", "-d", job).stdout  # allocated
        await ExecutorContract().wait_for_line(executor, handle, b"ready")
        assert lines(await ExecutorContract.read_log(executor, handle))[0] == b"cuda=0"
    finally:
        await _stopped(executor, handle)
    assert (await executor.status(handle)).reason == "stopped"


async def test_unknown_node_fails_the_launch(cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    with pytest.raises(LaunchFailed, match="nowhere"):
        await executor.launch(_plan(tmp_path, "nowhere", "true"))
    with pytest.raises(ValueError, match="nowhere"):
        await executor.allocate_ports("nowhere", 1)


async def test_pending_past_the_deadline_fails_and_is_cancelled(cluster: SlurmCluster, tmp_path: Path) -> None:
    filler = cluster.run("sbatch", "--parsable", "-w", "node3", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 600")
    filler_id = filler.stdout.strip().split(";")[0]
    try:
        executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf, launch_timeout_s=2.0)
        with pytest.raises(LaunchFailed, match="PENDING") as failed:
            await executor.launch(_plan(tmp_path, "node3", "echo never"))
        job = json.loads((tmp_path / "run0" / JOB_FILE).read_text())["job_id"]
        assert job in str(failed.value)
        assert _squeue(cluster, job, "%T") == "CANCELLED"
    finally:
        cluster.run("scancel", filler_id, check=False)


async def test_nodes_are_the_partitions_usable_nodes(cluster: SlurmCluster, tmp_path: Path) -> None:
    executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    hosts = {h.name: h for h in await executor.nodes()}
    assert sorted(hosts) == ["node1", "node2", "node3"]
    assert (hosts["node1"].executor, hosts["node1"].address, len(hosts["node1"].accelerators)) == (
        "slurm",
        "127.0.0.1",
        4,
    )
    assert await SlurmExecutor(tmp_path, partition="other", slurm_conf=cluster.conf).nodes() == []


async def test_stop_reaps_an_orphan_on_a_fully_allocated_node(cluster: SlurmCluster, tmp_path: Path) -> None:
    """The launcher was killed, its job ended, and another job took every CPU of the node: the reaper cannot get
    a job of its own there and runs as an overlapping step of the job that holds the node."""
    executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    handle = await executor.launch(_plan(tmp_path, "node2", "echo ready; exec sleep 600"))
    await ExecutorContract().wait_for_line(executor, handle, b"ready")
    os.kill(handle.pid, signal.SIGKILL)
    record = json.loads((Path(handle.run_dir) / STATUS_FILE).read_text())
    filler = cluster.run("sbatch", "--parsable", "-w", "node2", "-c", "2", "-o", "/dev/null", "--wrap", "sleep 600")
    filler_id = filler.stdout.strip().split(";")[0]
    try:

        async def filler_running() -> bool:
            return _squeue(cluster, filler_id, "%T") == "RUNNING"

        await poll(filler_running, "the job filling node2 to run")
        assert _alive(record["child_pid"], record["child_start_time"])
        await executor.stop(handle, grace_s=1.0)

        async def orphan_gone() -> bool:
            return not _alive(record["child_pid"], record["child_start_time"])

        await poll(orphan_gone, "the orphaned command to be reaped", deadline_s=20.0)
        assert _squeue(cluster, filler_id, "%T") == "RUNNING"  # the host job itself is left alone
    finally:
        cluster.run("scancel", filler_id, check=False)


async def test_a_job_gone_from_the_queue_is_judged_by_the_jobcomp_file(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Without a final record and out of squeue (after MinJobAge), the jobcomp file says whether the node failed."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    record = {"state": "running", "launcher_pid": 999_999_999, "launcher_start_time": 1.0, "started_at": None}
    (run_dir / STATUS_FILE).write_text(json.dumps(record))
    (run_dir / JOB_FILE).write_text(json.dumps({"job_id": "987654"}))
    handle = ReplicaHandle("slurm", "node1", str(run_dir), 999_999_999, 1.0, {"slurm_job_id": "987654"})
    jobcomp = tmp_path / "jobcomp.txt"
    jobcomp.write_text("JobId=987654 UserId=root(0) Name=aicenter-1-worker-0-a0 JobState=NODE_FAIL NodeList=node1\n")
    with_file = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf, jobcomp_file=jobcomp)
    assert (await with_file.status(handle)).reason == "node lost"
    without = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    assert (await without.status(handle)).reason == "launcher lost"


async def test_a_node_going_down_loses_its_replica(cluster: SlurmCluster, tmp_path: Path) -> None:
    """Last in the module: node3 is set DOWN (with ReturnToService=2 its slurmd brings it back at once)."""
    executor = SlurmExecutor(tmp_path, partition=PARTITION, slurm_conf=cluster.conf)
    handle = await executor.launch(_plan(tmp_path, "node3", "echo ready; exec sleep 600"))
    try:
        await ExecutorContract().wait_for_line(executor, handle, b"ready")
        cluster.run("scontrol", "update", "nodename=node3", "state=down", "reason=test")

        async def lost() -> ReplicaStatus | None:
            status = await executor.status(handle)
            return status if status.state is ReplicaState.LOST else None

        status = await poll(lost, "the replica on the failed node to be lost")
        assert status.reason == "node lost"
        assert _squeue(cluster, _job_id(handle), "%T") == "NODE_FAIL"
    finally:
        await _stopped(executor, handle)
        cluster.run("scontrol", "update", "nodename=node3", "state=resume", check=False)
