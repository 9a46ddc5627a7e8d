"""The pure mapping of ``ray.nodes()`` entries to hosts (no Ray needed)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from aicenter.executors import ACCELERATOR_LABEL, HOSTNAME_LABEL
from aicenter.executors.ray.inventory import (
    DEFAULT_GPU_TYPE,
    accelerator_resources,
    device_resources,
    host_name,
    map_labels,
    map_node,
    map_nodes,
)

# As ray.nodes() returns it (ray 2.60, a node started with --resources and --labels), trimmed.
ENTRY: dict[str, Any] = {
    "NodeID": "42c64a1a89867c8756b52c2452bd0912b847d844b570b33b20af30d2",
    "Alive": True,
    "NodeManagerAddress": "127.0.0.2",
    "NodeManagerHostname": "vm",
    "NodeName": "127.0.0.2",
    "DeathReason": 0,
    "DeathReasonMessage": "",
    "Resources": {
        "node:127.0.0.2": 1.0,
        "CPU": 2.0,
        "object_store_memory": 7370556211.0,
        "memory": 17197964493.0,
        "aicenter/nvidia-a100": 4.0,
        "node:__internal_head__": 1.0,
    },
    "Labels": {"ray.io/node-id": "42c64a1a89867c8756b52c2452bd0912b847d844b570b33b20af30d2", "rack": "r1"},
}


def test_a_node_with_custom_accelerator_resources() -> None:
    node = map_node(ENTRY)
    assert node.alive
    assert node.node_id == ENTRY["NodeID"]
    host = node.host
    assert (host.name, host.address, host.executor) == ("ray-127-0-0-2", "127.0.0.2", "ray")
    assert (host.cpu_milli, host.memory_bytes) == (2000, 17197964493)
    assert [(a.index, a.type, a.vendor, a.memory_bytes) for a in host.accelerators] == [
        (i, "nvidia-a100", "nvidia", 0) for i in range(4)
    ]
    assert host.labels == {"rack": "r1", HOSTNAME_LABEL: "ray-127-0-0-2", ACCELERATOR_LABEL: "nvidia-a100"}


@pytest.mark.parametrize(
    ("node_name", "labels", "expected"),
    [
        ("127.0.0.3", {}, "ray-127-0-0-3"),
        ("fe80::1", {}, "ray-fe80-1"),
        ("GPU-01.Example.org", {}, "gpu-01.example.org"),
        ("127.0.0.3", {"aicenter.io/node": "gpu-07"}, "gpu-07"),
        ("127.0.0.3", {"aicenter.io/node": "Not A Name"}, "ray-127-0-0-3"),  # an invalid label: NodeName decides
    ],
)
def test_host_name(node_name: str, labels: dict[str, str], expected: str) -> None:
    assert host_name(node_name, labels) == expected


def test_ray_gpus_with_an_accelerator_type() -> None:
    resources = {"CPU": 8.0, "GPU": 2.0, "accelerator_type:A100": 1.0, "memory": 1e9}
    assert accelerator_resources(resources) == [("nvidia-a100", "GPU", 2)]
    assert accelerator_resources({"GPU": 1.0}) == [(DEFAULT_GPU_TYPE, "GPU", 1)]
    # Declared aicenter resources win over Ray's detected GPUs (an admin named the type).
    assert accelerator_resources({"GPU": 2.0, "aicenter/nvidia-h100": 2.0}) == [
        ("nvidia-h100", "aicenter/nvidia-h100", 2)
    ]
    assert accelerator_resources({"CPU": 4.0}) == []


def test_mixed_accelerators_are_indexed_by_type_name_and_leave_out_the_node_label() -> None:
    entry = {**ENTRY, "Resources": {"CPU": 4.0, "aicenter/nvidia-t4": 1.0, "aicenter/nvidia-a100": 2.0}}
    host = map_node(entry).host
    assert [(a.index, a.type) for a in host.accelerators] == [(0, "nvidia-a100"), (1, "nvidia-a100"), (2, "nvidia-t4")]
    assert ACCELERATOR_LABEL not in host.labels


def test_device_resources_reserve_the_resource_each_index_falls_in() -> None:
    resources = {"CPU": 4.0, "aicenter/nvidia-t4": 1.0, "aicenter/nvidia-a100": 2.0}
    assert device_resources(resources, (0, 1)) == {"aicenter/nvidia-a100": 2.0}
    assert device_resources(resources, (1, 2)) == {"aicenter/nvidia-a100": 1.0, "aicenter/nvidia-t4": 1.0}
    assert device_resources(resources, ()) == {}
    assert device_resources(resources, (9,)) == {}
    assert device_resources({"GPU": 4.0}, (0, 3)) == {"GPU": 2.0}


def test_labels_keep_valid_ones_and_drop_rays_own() -> None:
    labels = map_labels(
        {
            "ray.io/node-id": "abc",
            "ray.io/accelerator-type": "A100",
            "aicenter.io/node": "gpu-07",
            "rack": "r1",
            "leaf": "l2",
            "example.com/zone": "a",
            "bad key!": "x",
            "empty": "",
            "Bad_Prefix/x": "y",
        }
    )
    assert labels == {"rack": "r1", "leaf": "l2", "example.com/zone": "a"}


def test_nvlink_domain_label_sets_every_devices_domain() -> None:
    entry = {**ENTRY, "Labels": {"nvlink-domain": "nvl-1"}}
    host = map_node(entry).host
    assert {a.nvlink_domain for a in host.accelerators} == {"nvl-1"}
    assert host.labels["nvlink-domain"] == "nvl-1"


def test_a_dead_node_keeps_its_reason() -> None:
    dead = {**ENTRY, "Alive": False, "DeathReasonMessage": "health check failed due to missing too many heartbeats"}
    node = map_nodes([dead, ENTRY])[0]
    assert not node.alive
    assert "health check failed" in node.reason


def test_importing_the_executor_does_not_import_ray() -> None:
    """``ray`` costs ~1 s of imports and is optional: only the executor's first call loads it."""
    code = "import sys, aicenter.executors.ray, aicenter.executors.ray.inventory; print('ray' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_the_launchers_anchor_reason_is_the_executors_node_lost_reason() -> None:
    """A replica killed by its anchor (its actor died with the node) is reported as the engines' node loss, which
    makes the reconciler read the engine's nodes again before restarting the job."""
    from aicenter.executors.base import NODE_LOST_REASON
    from aicenter.runtime.launcher import ANCHOR_LOST_REASON

    assert ANCHOR_LOST_REASON == NODE_LOST_REASON
