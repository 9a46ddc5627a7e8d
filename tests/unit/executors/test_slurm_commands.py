"""The Slurm executor's pure parts: sbatch's arguments and script, and the squeue/sacct/jobcomp parsers."""

from __future__ import annotations

import json
import shlex
import subprocess
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from aicenter.executors import ReplicaPlan
from aicenter.executors.slurm.commands import (
    SlurmJob,
    batch_script,
    cpus_per_task,
    cycle_ports,
    gpu_gres_type,
    job_name,
    memory_mib,
    node_lost,
    parse_job_id,
    parse_jobcomp,
    parse_sacct,
    parse_squeue,
    sbatch_args,
)
from aicenter.executors.slurm.executor import SlurmExecutor
from aicenter.executors.slurm.inventory import parse_nodes

MIB = 2**20
CAPTURED_NODES = Path(__file__).resolve().parents[2] / "data" / "slurm" / "scontrol-show-nodes-22.05.txt"


def _plan(**changes: Any) -> ReplicaPlan:
    plan = ReplicaPlan(7, "worker", 2, 1, "node1", "echo hi", {}, Path("/jobs/run"), Path("/jobs/work"))
    return replace(plan, **changes)


def test_sbatch_args_of_a_plain_replica() -> None:
    args = sbatch_args(_plan(), run_dir=Path("/jobs/run"), slurm_node="Node1", partition="main", gpu_type="a100")
    assert args == [
        "--parsable",
        "--job-name=aicenter-7-worker-2-a1",
        "--nodelist=Node1",
        "--nodes=1",
        "--ntasks=1",
        "--cpus-per-task=1",
        "--chdir=/jobs/run",
        "--output=/jobs/run/launcher.log",
        "--error=/jobs/run/launcher.log",
        "--open-mode=append",
        "--export=NONE",
        "--no-requeue",
        "--partition=main",
    ]


def test_sbatch_args_carry_cpus_memory_and_gpus() -> None:
    plan = _plan(cpu_milli=2500, memory_bytes=100 * MIB + 1, devices=(0, 3))
    args = sbatch_args(plan, run_dir=Path("/r"), slurm_node="n", partition=None, gpu_type="a100")
    assert "--cpus-per-task=3" in args
    assert "--mem=101M" in args
    assert "--gres=gpu:a100:2" in args
    assert not any(a.startswith("--partition") for a in args)
    untyped = sbatch_args(plan, run_dir=Path("/r"), slurm_node="n", partition=None, gpu_type="")
    assert "--gres=gpu:2" in untyped


@pytest.mark.parametrize(("milli", "cpus"), [(0, 1), (1, 1), (1000, 1), (1001, 2), (4000, 4)])
def test_cpus_per_task_rounds_up_to_at_least_one(milli: int, cpus: int) -> None:
    assert cpus_per_task(milli) == cpus


def test_memory_rounds_up_to_mib() -> None:
    assert (memory_mib(1), memory_mib(MIB), memory_mib(MIB + 1)) == (1, 1, 2)


def test_job_name() -> None:
    assert job_name(_plan()) == "aicenter-7-worker-2-a1"


def test_batch_script_execs_the_launcher_with_quoted_variables() -> None:
    launcher = ["/usr/bin/python3", "-c", "import x; x.main()", "/jobs/my run/plan.json"]
    script = batch_script(launcher, {"HOME": "/h h"}, Path("/jobs/my run/slurm.json"))
    lines = script.splitlines()
    assert lines[0] == "#!/bin/sh"
    assert lines[2] == "export HOME='/h h'"
    assert shlex.split(lines[3]) == ["exec", *launcher]


def test_batch_script_records_the_job_id_atomically(tmp_path: Path) -> None:
    job_file = tmp_path / "my run" / "slurm.json"
    job_file.parent.mkdir()
    script = batch_script(["true"], {}, job_file)
    subprocess.run(["/bin/sh", "-c", script], env={"SLURM_JOB_ID": "42", "PATH": "/usr/bin:/bin"}, check=True)
    assert json.loads(job_file.read_text()) == {"job_id": "42"}
    assert sorted(p.name for p in job_file.parent.iterdir()) == ["slurm.json"]


def test_parse_job_id() -> None:
    assert parse_job_id("123\n") == "123"
    assert parse_job_id("123;cluster\n") == "123"
    with pytest.raises(ValueError, match="no job id"):
        parse_job_id("sbatch: error: oops")


def test_parse_squeue() -> None:
    text = (
        "6|CANCELLED|None|node2\n"
        "8|PENDING|ReqNodeNotAvail, UnavailableNodes:node3|\n"
        "9|RUNNING|None|node1\n"
        "garbage line\n"
        "7|NODE_FAIL|NodeDown|node2\n"
    )
    jobs = parse_squeue(text)
    assert jobs == {
        "6": SlurmJob("6", "CANCELLED", "", "node2"),
        "8": SlurmJob("8", "PENDING", "ReqNodeNotAvail, UnavailableNodes:node3", ""),
        "9": SlurmJob("9", "RUNNING", "", "node1"),
        "7": SlurmJob("7", "NODE_FAIL", "NodeDown", "node2"),
    }
    assert [j.job_id for j in jobs.values() if j.active] == ["8", "9"]


def test_parse_sacct_skips_steps_and_cuts_cancelled_by() -> None:
    text = "7|NODE_FAIL|None|node2\n7.batch|CANCELLED|None|node2\n8|CANCELLED by 0|None|node1\n"
    assert parse_sacct(text) == {
        "7": SlurmJob("7", "NODE_FAIL", "", "node2"),
        "8": SlurmJob("8", "CANCELLED", "", "node1"),
    }


def test_parse_jobcomp_finds_the_jobs_last_record() -> None:
    text = (
        "JobId=71 UserId=root(0) GroupId=root(0) Name=x JobState=COMPLETED Partition=main NodeList=node1\n"
        "JobId=7 UserId=root(0) GroupId=root(0) Name=aicenter-1-worker-0-a0 JobState=NODE_FAIL Partition=main"
        " TimeLimit=UNLIMITED StartTime=2026-12-03T18:52:16 EndTime=2026-12-03T18:52:26 NodeList=node2 NodeCnt=1\n"
    )
    assert parse_jobcomp(text, "7") == SlurmJob("7", "NODE_FAIL", "", "node2")
    assert parse_jobcomp(text, "71") == SlurmJob("71", "COMPLETED", "", "node1")
    assert parse_jobcomp(text, "8") is None


@pytest.mark.parametrize(
    ("state", "lost"),
    [
        ("IDLE", False),
        ("MIXED+DRAIN", False),
        ("DOWN", True),
        ("DOWN+NOT_RESPONDING", True),
        ("IDLE*", True),
        ("ALLOCATED+NOT_RESPONDING", True),
        ("IDLE+DRAIN", False),
    ],
)
def test_node_lost(state: str, lost: bool) -> None:
    assert node_lost(state) is lost


def test_gpu_gres_type() -> None:
    assert gpu_gres_type("gpu:a100:2(S:0-1),gpu:t4:1") == "a100"
    assert gpu_gres_type("gpu:4") == ""
    assert gpu_gres_type("(null)") == ""
    assert gpu_gres_type("bandwidth:10,gpu:h100:8") == "h100"


def test_inventory_keeps_partitions_and_gres_for_the_executor() -> None:
    nodes = {n.host.name: n for n in parse_nodes(CAPTURED_NODES.read_text())}
    assert (nodes["node1"].name, nodes["node1"].partitions, nodes["node1"].gres) == ("node1", ("main",), "gpu:a100:2")
    assert nodes["node3"].gres == "(null)"


def test_ports_of_a_remote_node_cycle_through_the_range_skipping_recent_ones() -> None:
    ports, after = cycle_ports(30008, (30000, 30009), recent={30000}, count=3)
    assert (ports, after) == ([30008, 30009, 30001], 30002)
    with pytest.raises(ValueError, match="cannot give"):
        cycle_ports(30000, (30000, 30001), recent={30000}, count=2)


def test_port_range_setting() -> None:
    assert SlurmExecutor(port_range="30000-30009").port_range == (30000, 30009)
    with pytest.raises(ValueError, match="port range"):
        SlurmExecutor(port_range="9-1")
