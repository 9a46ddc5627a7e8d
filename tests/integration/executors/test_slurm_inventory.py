"""The Slurm inventory against a real Slurm cluster on this host (tests/support/slurm.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aicenter.executors.slurm import DEFAULT_GPU_TYPE, SlurmNode, scontrol_nodes
from tests.support.slurm import NodeSpec, SlurmCluster, slurm_available

pytestmark = pytest.mark.slurm

MIB = 2**20
NODES = (
    NodeSpec("node1", cpus=4, memory_mib=2048, gpus=(("a100", 2),), features=("rack_r1", "ib")),
    NodeSpec("node2", cpus=2, memory_mib=1024, gpus=(("t4", 1),), features=("rack_r2",)),
    NodeSpec("node3", cpus=3, memory_mib=1536, gpus=(("", 2),)),
)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    reason = slurm_available()
    if reason:
        pytest.skip(reason)
    with SlurmCluster(tmp_path_factory.mktemp("slurm") / "cluster", nodes=NODES) as slurm:
        yield slurm


def _by_name(nodes: list[SlurmNode]) -> dict[str, SlurmNode]:
    return {n.host.name: n for n in nodes}


def test_inventory_lists_the_configured_nodes(cluster: SlurmCluster) -> None:
    nodes = _by_name(scontrol_nodes(cluster.env))
    assert sorted(nodes) == ["node1", "node2", "node3"]
    got = {
        name: (n.host.cpu_milli, n.host.memory_bytes, [a.type for a in n.host.accelerators], n.up)
        for name, n in nodes.items()
    }
    assert got == {
        "node1": (4000, 2048 * MIB, ["nvidia-a100"] * 2, True),
        "node2": (2000, 1024 * MIB, ["nvidia-t4"], True),
        "node3": (3000, 1536 * MIB, [DEFAULT_GPU_TYPE] * 2, True),
    }
    assert {k: v for k, v in nodes["node1"].host.labels.items() if "/" not in k} == {"rack": "r1", "ib": "true"}
    assert nodes["node2"].host.labels["rack"] == "r2"
    assert all(n.host.executor == "slurm" for n in nodes.values())


def test_fake_gpus_are_allocated_by_slurm(cluster: SlurmCluster, tmp_path: Path) -> None:
    # The GPUs are not only declared: Slurm hands one out to a job, which sees it in CUDA_VISIBLE_DEVICES.
    out = tmp_path / "job.out"
    cluster.run(
        "sbatch",
        "--wait",
        "--quiet",
        "-w",
        "node1",
        "--gres=gpu:a100:1",
        "-o",
        str(out),
        "--wrap",
        "echo gpus=$CUDA_VISIBLE_DEVICES",
    )
    assert out.read_text().strip() == "gpus=0"


def test_a_node_set_down_is_reported_down(cluster: SlurmCluster) -> None:
    cluster.run("scontrol", "update", "nodename=node2", "state=down", "reason=test")
    try:
        nodes = _by_name(scontrol_nodes(cluster.env))
        assert (nodes["node2"].state, nodes["node2"].up, nodes["node2"].reason) == ("DOWN", False, "test")
        assert [name for name, n in nodes.items() if n.up] == ["node1", "node3"]
    finally:
        # Resumed, the node reads IDLE+NOT_RESPONDING (down) until slurmctld's next ping of its slurmd.
        cluster.run("scontrol", "update", "nodename=node2", "state=resume")
