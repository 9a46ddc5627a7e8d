"""Small hand-built clusters and jobs for scheduler tests."""

from __future__ import annotations

from collections.abc import Iterable

from aicenter.scheduler import ClusterState, Device, Job, Node, Quota, ReplicaRequest, Task

A100 = "nvidia-a100"
V100 = "nvidia-v100"


def node(
    name: str,
    gpus: int = 8,
    *,
    gpu_type: str = A100,
    leaf: str | None = None,
    spine: str | None = None,
    cpu: int = 64_000,
    mem: int = 512_000,
    domains: int = 1,
    pools: Iterable[str] = ("default",),
    cache: int = 0,
    cached: dict[str, int] | None = None,
) -> Node:
    """A node with ``gpus`` devices split evenly into ``domains`` NVLink domains, in ``pools``."""
    per = max(1, gpus // domains)
    devs = tuple(Device(i, gpu_type, 80_000, f"nv{i // per}") for i in range(gpus))
    return Node(
        name,
        cpu,
        mem,
        devs,
        pools=frozenset(pools),
        leaf=leaf,
        spine=spine,
        cache_capacity_mib=cache,
        cached=cached or {},
    )


def cluster(
    n: int, gpus: int = 8, *, leaf_size: int = 4, leaves_per_spine: int = 2, quotas: Iterable[Quota] = (), **kw: object
) -> ClusterState:
    """``n`` nodes ``n0..`` in leaves of ``leaf_size`` and spines of ``leaves_per_spine`` leaves."""
    nodes = [
        node(f"n{i}", gpus, leaf=f"l{i // leaf_size}", spine=f"s{i // (leaf_size * leaves_per_spine)}", **kw)
        for i in range(n)
    ]  # type: ignore[arg-type]
    return ClusterState(nodes, quotas)


def job(
    jid: str,
    gpus: int = 1,
    replicas: int = 1,
    *,
    ws: str = "ws",
    user: str = "u",
    prio: int = 0,
    t: float = 0.0,
    milli: int = 0,
    types: Iterable[str] = (),
    cpu: int = 1000,
    mem: int = 1000,
    **kw: object,
) -> Job:
    """A one-task job: ``replicas`` x ``gpus`` whole devices, or a ``milli`` fraction."""
    req = ReplicaRequest(
        cpu, mem, accelerators=0 if milli else gpus, accelerator_milli=milli, accelerator_types=frozenset(types)
    )
    return Job(jid, ws, user, prio, t, (Task("worker", replicas, req),), **kw)  # type: ignore[arg-type]


def nodes_of(placements: Iterable[object]) -> list[str]:
    """Node names of replica placements, in order."""
    return [p.node for p in placements]  # type: ignore[attr-defined]
