"""Ray's nodes as aicenter hosts: a pure mapping of ``ray.nodes()`` entries (no ``ray`` import here).

Conventions (the deployment guide repeats them for whoever starts the Ray nodes):

* Name: the node's Ray label ``aicenter.io/node`` when set and a valid node name; else its ``NodeName`` (Ray's
  default is the node's IP) made a node name: ``127.0.0.3`` -> ``ray-127-0-0-3``, ``gpu-01.example`` kept as the
  local executor normalizes host names. Ray node ids change on every restart of a node; the name does not.
* Accelerators: a custom resource ``aicenter/<type>`` of count n gives n devices of that type
  (``--resources='{"aicenter/nvidia-a100": 8}'``); without one, Ray's ``GPU`` count with its
  ``accelerator_type:<X>`` resource gives ``nvidia-<x>`` (:data:`DEFAULT_GPU_TYPE` when Ray knows no type).
  Device memory is not in Ray's view: 0. Indices follow the order of the types' names, so a replica's device
  index says which resource to reserve (:func:`device_resources`).
* Labels: Ray node labels that make valid aicenter labels are kept (``rack``, ``leaf``, ``spine`` included: the
  inventory shows them and pool selectors may use them; the scheduler's topology fields stay as admins set
  them); Ray's own (``ray.io/...``) and invalid ones are left out. ``nvlink-domain`` also becomes every
  device's NVLink domain. :data:`HOSTNAME_LABEL` and, for one accelerator type, :data:`ACCELERATOR_LABEL` are set.
* Resources: ``cpu_milli`` from ``CPU``, ``memory_bytes`` from Ray's ``memory`` resource (what Ray lets tasks
  reserve, ~70 % of the node's memory by default).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aicenter.core.labels import is_label_name, is_label_prefix, is_label_value
from aicenter.executors.base import AcceleratorInfo, HostInfo, node_labels
from aicenter.executors.local.host import node_name

__all__ = [
    "ACCELERATOR_RESOURCE_PREFIX",
    "DEFAULT_GPU_TYPE",
    "NODE_LABEL",
    "NVLINK_LABEL",
    "RayNode",
    "accelerator_resources",
    "device_resources",
    "host_name",
    "map_labels",
    "map_node",
    "map_nodes",
]

ACCELERATOR_RESOURCE_PREFIX = "aicenter/"
"""Custom Ray resources ``aicenter/<accelerator type>`` stand for a node's devices of that type."""
DEFAULT_GPU_TYPE = "nvidia-unknown"
NODE_LABEL = "aicenter.io/node"
"""A Ray node label that names the node in aicenter (else its NodeName does)."""
NVLINK_LABEL = "nvlink-domain"
RAY_LABEL_PREFIX = "ray.io/"
_NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")  # core.names.NAME_RE without its exception


@dataclass(frozen=True, slots=True)
class RayNode:
    """One Ray node as ``ray.nodes()`` reports it.

    Attributes:
        host: The node as an aicenter host (``executor="ray"``).
        node_id: Ray's node id (hex), what a replica's actor is pinned to.
        alive: Whether Ray considers the node alive.
        resources: Its total resources by Ray's names (``CPU``, ``aicenter/nvidia-a100``, ``GPU`` ...).
        reason: Why Ray declared it dead (``DeathReasonMessage``); empty while alive.
    """

    host: HostInfo
    node_id: str
    alive: bool
    resources: Mapping[str, float]
    reason: str = ""


def host_name(ray_node_name: str, labels: Mapping[str, str]) -> str:
    """The aicenter node name of a Ray node (module docstring: Name)."""
    named = labels.get(NODE_LABEL, "")
    if _NAME_RE.match(named):
        return named
    try:
        ipaddress.ip_address(ray_node_name)
    except ValueError:
        return node_name(ray_node_name)
    return node_name("ray-" + re.sub(r"[.:]+", "-", ray_node_name))


def accelerator_resources(resources: Mapping[str, float]) -> list[tuple[str, str, int]]:
    """``(type, Ray resource, count)`` per accelerator type of a node, in device-index order."""
    custom = sorted(
        (name.removeprefix(ACCELERATOR_RESOURCE_PREFIX), name, int(count))
        for name, count in resources.items()
        if name.startswith(ACCELERATOR_RESOURCE_PREFIX) and int(count) > 0
    )
    if custom:
        return [(t, r, n) for t, r, n in custom if is_label_value(t)]
    gpus = int(resources.get("GPU", 0))
    if gpus <= 0:
        return []
    kinds = [k.removeprefix("accelerator_type:") for k in resources if k.startswith("accelerator_type:")]
    gpu_type = DEFAULT_GPU_TYPE
    if len(kinds) == 1:
        model = re.sub(r"[^a-z0-9._-]+", "-", kinds[0].lower()).strip("._-")
        gpu_type = f"nvidia-{model}" if model else DEFAULT_GPU_TYPE
    return [(gpu_type, "GPU", gpus)]


def device_resources(resources: Mapping[str, float], devices: Sequence[int]) -> dict[str, float]:
    """The Ray resources a replica using ``devices`` (indices) of a node reserves: one unit per device, of the
    resource its index falls in. Indices beyond the node's devices reserve nothing (Ray would never place it)."""
    out: dict[str, float] = {}
    first = 0
    for _type, resource, count in accelerator_resources(resources):
        used = sum(1 for d in devices if first <= d < first + count)
        if used:
            out[resource] = out.get(resource, 0.0) + used
        first += count
    return out


def map_labels(ray_labels: Mapping[str, str]) -> dict[str, str]:
    """The Ray labels that make valid aicenter labels, Ray's own and the naming label left out."""
    out: dict[str, str] = {}
    for key, value in ray_labels.items():
        if key.startswith(RAY_LABEL_PREFIX) or key == NODE_LABEL:
            continue
        prefix, slash, name = key.rpartition("/")
        if (not slash or is_label_prefix(prefix)) and is_label_name(name) and is_label_value(str(value)):
            out[key] = str(value)
    return out


def map_node(entry: Mapping[str, Any]) -> RayNode:
    """One ``ray.nodes()`` entry as a node (module docstring: conventions)."""
    resources = {str(k): float(v) for k, v in (entry.get("Resources") or {}).items()}
    ray_labels = {str(k): str(v) for k, v in (entry.get("Labels") or {}).items()}
    name = host_name(str(entry.get("NodeName") or entry.get("NodeManagerAddress") or ""), ray_labels)
    labels = map_labels(ray_labels)
    nvlink = labels.get(NVLINK_LABEL)
    accelerators: list[AcceleratorInfo] = []
    for acc_type, _resource, count in accelerator_resources(resources):
        for _ in range(count):
            accelerators.append(
                AcceleratorInfo(
                    index=len(accelerators),
                    type=acc_type,
                    vendor=acc_type.split("-", 1)[0],
                    model=acc_type,
                    memory_bytes=0,
                    nvlink_domain=nvlink,
                )
            )
    labels.update(node_labels(name, accelerators))
    host = HostInfo(
        name=name,
        address=str(entry.get("NodeManagerAddress") or ""),
        executor="ray",
        cpu_milli=int(resources.get("CPU", 0) * 1000),
        memory_bytes=int(resources.get("memory", 0)),
        accelerators=tuple(accelerators),
        labels=labels,
    )
    alive = bool(entry.get("Alive", entry.get("alive", False)))
    return RayNode(
        host=host,
        node_id=str(entry.get("NodeID", "")),
        alive=alive,
        resources=resources,
        reason="" if alive else str(entry.get("DeathReasonMessage") or ""),
    )


def map_nodes(entries: Sequence[Mapping[str, Any]]) -> list[RayNode]:
    """Every entry of ``ray.nodes()``, dead ones included (a restarted node appears twice: dead and alive)."""
    return [map_node(e) for e in entries]
