"""The environment each framework reads to form its cluster, checked against what the framework expects."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicenter.runtime.env import (
    ReplicaAddress,
    framework_env,
    mpi_hosts,
    ports_needed,
    runtime_env,
    write_hostfile,
)


def _layout(*specs: tuple[str, int, str], ports: int = 1) -> list[ReplicaAddress]:
    base = 20000
    out = []
    for i, (task, replica, host) in enumerate(specs):
        out.append(ReplicaAddress(task, replica, host, tuple(base + 10 * i + p for p in range(ports))))
    return out


def test_runtime_env_has_every_design_variable() -> None:
    env = runtime_env(
        7,
        "worker",
        1,
        2,
        code_dir=Path("/c"),
        data_dir="/d",
        output_dir="/o",
        checkpoint_dir="/ck",
        api_url="http://127.0.0.1:8000",
        token="aic_1_x",
    )
    assert env == {
        "AICENTER_JOB_ID": "7",
        "AICENTER_TASK": "worker",
        "AICENTER_REPLICA": "1",
        "AICENTER_RESTART_COUNT": "2",
        "AICENTER_CODE_DIR": "/c",
        "AICENTER_DATA_DIR": "/d",
        "AICENTER_OUTPUT_DIR": "/o",
        "AICENTER_CHECKPOINT_DIR": "/ck",
        "AICENTER_API_URL": "http://127.0.0.1:8000",
        "AICENTER_TOKEN": "aic_1_x",
    }


def test_pytorch_ranks_follow_the_layout() -> None:
    layout = _layout(("master", 0, "node-a"), ("worker", 0, "node-a"), ("worker", 1, "node-b"))
    envs = [framework_env("pytorch", layout, r) for r in range(3)]
    for rank, env in enumerate(envs):
        assert env["MASTER_ADDR"] == "node-a"
        assert env["MASTER_PORT"] == "20000"  # rank 0's first port, for everyone
        assert env["WORLD_SIZE"] == "3"
        assert env["RANK"] == str(rank)
        assert env["NODE_RANK"] == str(rank)
        assert env["LOCAL_RANK"] == "0"
        assert env["AICENTER_TORCHRUN_ARGS"] == (
            f"--nnodes=3 --node_rank={rank} --master_addr=node-a --master_port=20000"
        )


def test_framework_accepts_enum_like_values() -> None:
    class Framework(str):
        pass

    layout = _layout(("worker", 0, "h"))
    assert framework_env(Framework("PyTorch"), layout, 0)["WORLD_SIZE"] == "1"
    assert framework_env("none", layout, 0) == {}


def test_tensorflow_config_is_a_cluster_spec() -> None:
    layout = _layout(("chief", 0, "a"), ("worker", 0, "b"), ("worker", 1, "c"), ("ps", 0, "d"), ("evaluator", 0, "e"))
    config = json.loads(framework_env("tensorflow", layout, 2)["TF_CONFIG"])
    assert config == {
        "cluster": {"chief": ["a:20000"], "worker": ["b:20010", "c:20020"], "ps": ["d:20030"]},
        "task": {"type": "worker", "index": 1},
    }
    evaluator = json.loads(framework_env("tensorflow", layout, 4)["TF_CONFIG"])
    assert evaluator["task"] == {"type": "evaluator", "index": 0}
    assert "evaluator" not in evaluator["cluster"]  # it watches the cluster, it is not part of it


def test_paddle_collective_variables() -> None:
    layout = _layout(("worker", 0, "a"), ("worker", 1, "b"), ports=2)
    env = framework_env("paddle", layout, 1)
    assert env["PADDLE_TRAINER_ENDPOINTS"] == "a:20000,b:20010"
    assert env["PADDLE_CURRENT_ENDPOINT"] == "b:20010"
    assert env["PADDLE_MASTER"] == "a:20001"  # rank 0's second port: not any trainer's endpoint
    assert env["PADDLE_TRAINER_ID"] == env["PADDLE_GLOBAL_RANK"] == "1"
    assert env["PADDLE_TRAINERS_NUM"] == env["PADDLE_GLOBAL_SIZE"] == env["PADDLE_NNODES"] == "2"
    assert env["PADDLE_LOCAL_RANK"] == env["PADDLE_RANK_IN_NODE"] == "0"
    assert env["PADDLE_LOCAL_SIZE"] == "1"
    endpoints = env["PADDLE_TRAINER_ENDPOINTS"].split(",")
    assert endpoints[int(env["PADDLE_TRAINER_ID"])] == env["PADDLE_CURRENT_ENDPOINT"]


def test_mindspore_dynamic_cluster() -> None:
    layout = _layout(("worker", 0, "a"), ("worker", 1, "b"), ("worker", 2, "c"))
    envs = [framework_env("mindspore", layout, r) for r in range(3)]
    for rank, env in enumerate(envs):
        assert env["MS_ROLE"] == "MS_WORKER"
        assert (env["MS_SCHED_HOST"], env["MS_SCHED_PORT"]) == ("a", "20000")
        assert (env["MS_WORKER_NUM"], env["MS_SERVER_NUM"]) == ("3", "0")
        assert env["MS_NODE_ID"] == str(rank)
    assert [e["AICENTER_MS_RUN_SCHEDULER"] for e in envs] == ["1", "0", "0"]


def test_mpi_hosts_hostfile_and_launcher_variables(tmp_path: Path) -> None:
    layout = _layout(("launcher", 0, "a"), ("worker", 0, "a"), ("worker", 1, "b"), ("worker", 2, "b"), ports=0)
    assert mpi_hosts(layout) == [("a", 1), ("b", 2)]
    hostfile = write_hostfile(tmp_path / "hostfile", mpi_hosts(layout))
    assert hostfile.read_text() == "a slots=1\nb slots=2\n"
    launcher = framework_env("mpi", layout, 0, mpi_hostfile=hostfile)
    assert launcher == {"AICENTER_MPI_NP": "3", "AICENTER_MPI_HOSTS": "a:1,b:2", "AICENTER_MPI_HOSTFILE": str(hostfile)}
    worker = framework_env("mpi", layout, 1, mpi_hostfile=hostfile)
    assert "AICENTER_MPI_HOSTFILE" not in worker
    with pytest.raises(ValueError, match="bad hostfile entry"):
        write_hostfile(tmp_path / "bad", [("a b", 1)])
    assert not (tmp_path / "bad").exists()


def test_ports_needed_covers_every_framework() -> None:
    assert {f: ports_needed(f) for f in ("none", "pytorch", "tensorflow", "paddle", "mindspore", "mpi")} == {
        "none": 0,
        "pytorch": 1,
        "tensorflow": 1,
        "paddle": 2,
        "mindspore": 1,
        "mpi": 0,
    }


@pytest.mark.parametrize(
    ("framework", "layout", "me", "message"),
    [
        ("jax", [ReplicaAddress("w", 0, "h", (1,))], 0, "unknown framework 'jax'"),
        ("pytorch", [ReplicaAddress("w", 0, "h", (1,))], 1, "rank 1 is not in a layout of 1"),
        ("pytorch", [ReplicaAddress("w", 0, "h", ())], 0, "replica w/0 needs 1 port"),
        ("paddle", [ReplicaAddress("w", 0, "h", (1,))], 0, "replica w/0 needs 2 port"),
    ],
)
def test_bad_layouts_are_refused(framework: str, layout: list[ReplicaAddress], me: int, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        framework_env(framework, layout, me)
