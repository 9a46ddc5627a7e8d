"""The Slurm inventory parser on real ``scontrol show nodes --oneliner`` output (tests/data/slurm)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicenter.executors import HostInfo
from aicenter.executors.slurm import (
    DEFAULT_GPU_TYPE,
    accelerator_type,
    feature_labels,
    node_up,
    parse_gres,
    parse_nodes,
)
from aicenter.executors.slurm.inventory import split_fields

CAPTURED = Path(__file__).resolve().parents[2] / "data" / "slurm" / "scontrol-show-nodes-22.05.txt"
MIB = 2**20


@pytest.fixture(scope="module")
def nodes() -> dict[str, object]:
    return {n.host.name: n for n in parse_nodes(CAPTURED.read_text())}


def test_captured_output_gives_every_node_as_a_slurm_host(nodes: dict) -> None:
    assert list(nodes) == ["node1", "node2", "node3", "node4"]
    node1 = nodes["node1"].host
    assert isinstance(node1, HostInfo)
    assert (node1.executor, node1.address, node1.cpu_milli, node1.memory_bytes) == (
        "slurm",
        "127.0.0.1",
        4000,
        2048 * MIB,
    )
    assert [(a.index, a.type, a.vendor) for a in node1.accelerators] == [
        (0, "nvidia-a100", "nvidia"),
        (1, "nvidia-a100", "nvidia"),
    ]
    assert node1.labels == {
        "rack": "r1",
        "ib": "true",
        "aicenter.io/hostname": "node1",
        "aicenter.io/accelerator": "nvidia-a100",
    }
    assert (nodes["node3"].host.accelerators, nodes["node3"].host.labels) == ((), {"aicenter.io/hostname": "node3"})
    node4 = nodes["node4"].host
    assert (node4.cpu_milli, node4.memory_bytes) == (8000, 4096 * MIB)
    assert [a.type for a in node4.accelerators] == [DEFAULT_GPU_TYPE] * 4
    assert node4.labels["zone"] == "b"


def test_captured_states_reasons_and_up(nodes: dict) -> None:
    got = {name: (n.state, n.up, n.reason) for name, n in nodes.items()}
    assert got == {
        "node1": ("MIXED", True, ""),
        "node2": ("DOWN", False, "disk failed"),
        "node3": ("IDLE+DRAIN", False, "maintenance"),
        "node4": ("IDLE", True, ""),
    }


def test_values_with_spaces_stay_whole() -> None:
    line = CAPTURED.read_text().splitlines()[0]
    fields = split_fields(line)
    assert fields["OS"] == "Linux 6.18.44-fc-v1147 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["RealMemory"] == "2048"


@pytest.mark.parametrize(
    ("state", "up"),
    [
        ("IDLE", True),
        ("MIXED", True),
        ("ALLOCATED", True),
        ("COMPLETING", True),
        ("IDLE*", False),
        ("DOWN", False),
        ("DOWN*", False),
        ("DOWN+NOT_RESPONDING", False),
        ("IDLE+DRAIN", False),
        ("MIXED+DRAIN", False),
        ("ALLOCATED+DRAIN", False),
        ("FAIL", False),
        ("MIXED+FAIL", False),
        ("IDLE+NOT_RESPONDING", False),
        ("IDLE+POWERED_DOWN", False),
        ("UNKNOWN", False),
        ("FUTURE", False),
        ("IDLE+CLOUD", True),
        ("MIXED+COMPLETING", True),
    ],
)
def test_node_up(state: str, up: bool) -> None:
    assert node_up(state) is up


@pytest.mark.parametrize(
    ("gres", "expected"),
    [
        ("(null)", []),
        ("", []),
        ("gpu:a100:2", [("nvidia-a100", 2)]),
        ("gpu:4", [(DEFAULT_GPU_TYPE, 4)]),
        ("gpu:a100:2(S:0,1),gpu:t4:1(S:0)", [("nvidia-a100", 2), ("nvidia-t4", 1)]),
        ("gpu:amd-mi250:8", [("amd-mi250", 8)]),
        ("shard:a100:8,gpu:h100:8", [("nvidia-h100", 8)]),
        ("gpu:a100", [("nvidia-a100", 1)]),
        ("gpu:a100:0", []),
    ],
)
def test_parse_gres(gres: str, expected: list[tuple[str, int]]) -> None:
    assert parse_gres(gres) == expected


def test_accelerator_type_names() -> None:
    assert accelerator_type("A100_SXM4") == "nvidia-a100_sxm4"
    assert accelerator_type("nvidia-h100") == "nvidia-h100"
    assert accelerator_type("") == DEFAULT_GPU_TYPE


def test_feature_labels_conventions() -> None:
    assert feature_labels("rack_r1,ib,zone=eu-west,fabric_ib_hdr") == {
        "rack": "r1",
        "ib": "true",
        "zone": "eu-west",
        "fabric": "ib_hdr",
    }
    assert feature_labels("(null)") == {}
    assert feature_labels("ok,bad&feature,zone_,_x") == {"ok": "true", "zone": "true"}
