"""Clusters for the simulator: synthesized (``96x8`` in leaves of 16) or loaded from a node list."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from aicenter.core.errors import ValidationFailed
from aicenter.scheduler.model import Device, Node
from aicenter.sim.workload import NodeSpec

_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*(?::\s*([A-Za-z0-9._-]+))?\s*$")
DEFAULT_GPU_TYPE = "gpu"


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """What a report says about the cluster."""

    source: str
    nodes: int
    gpus: int
    leaf_size: int | None
    gpu_types: dict[str, int]

    def as_dict(self) -> dict[str, object]:
        return {
            "source": self.source,
            "nodes": self.nodes,
            "gpus": self.gpus,
            "leaf_size": self.leaf_size,
            "gpu_types": self.gpu_types,
        }


def synthesize(
    spec: str,
    *,
    leaf_size: int | None = None,
    leaves_per_spine: int = 8,
    cpu_milli_per_gpu: int = 8000,
    memory_mib_per_gpu: int = 65536,
) -> list[NodeSpec]:
    """Nodes from ``NxG`` or ``NxG:type`` (N nodes of G GPUs); leaves of ``leaf_size`` nodes, spines above.

    Raises:
        ValidationFailed: a malformed spec or sizes below 1.
    """
    match = _SPEC.match(spec)
    if match is None:
        raise ValidationFailed(
            f"expected NODESxGPUS such as 96x8 (optionally 96x8:nvidia-a100), got {spec!r}", field="cluster"
        )
    count, gpus = int(match.group(1)), int(match.group(2))
    gpu_type = match.group(3) or DEFAULT_GPU_TYPE
    if count < 1:
        raise ValidationFailed("needs at least one node", field="cluster")
    if leaf_size is not None and leaf_size < 1:
        raise ValidationFailed(f"must be >= 1, got {leaf_size}", field="leaf_size")
    width = len(str(count - 1))
    nodes = []
    for i in range(count):
        leaf = spine = None
        if leaf_size:
            leaf_index = i // leaf_size
            leaf, spine = f"leaf-{leaf_index}", f"spine-{leaf_index // max(1, leaves_per_spine)}"
        nodes.append(
            NodeSpec(
                name=f"node-{i:0{width}d}",
                cpu_milli=max(8000, gpus * cpu_milli_per_gpu),
                memory_mib=max(65536, gpus * memory_mib_per_gpu),
                gpus=gpus,
                gpu_type=gpu_type,
                leaf=leaf,
                spine=spine,
            )
        )
    return nodes


def to_nodes(specs: Sequence[NodeSpec], *, nvlink: bool = True) -> list[Node]:
    """Scheduler nodes from specs; with ``nvlink`` the GPUs of an 8-GPU node share one NVLink domain."""
    out = []
    for s in specs:
        domain = "nvlink" if nvlink and s.gpus >= 8 else None
        devices = tuple(
            Device(index=i, type=s.gpu_type, memory_mib=s.gpu_memory_mib, nvlink_domain=domain) for i in range(s.gpus)
        )
        out.append(
            Node(
                name=s.name, cpu_milli=s.cpu_milli, memory_mib=s.memory_mib, devices=devices, leaf=s.leaf, spine=s.spine
            )
        )
    return out


def describe(source: str, specs: Sequence[NodeSpec], leaf_size: int | None) -> ClusterInfo:
    types: dict[str, int] = {}
    for s in specs:
        if s.gpus:
            types[s.gpu_type] = types.get(s.gpu_type, 0) + s.gpus
    return ClusterInfo(
        source=source,
        nodes=len(specs),
        gpus=sum(s.gpus for s in specs),
        leaf_size=leaf_size,
        gpu_types=dict(sorted(types.items())),
    )
