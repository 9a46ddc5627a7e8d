"""The sampler's cost per node: CPU seconds of one ``Executor.sample`` and the share of one core it takes at the
default 15 s interval (issue 12's budget: under 1 % of one core per node).

* ``local``: ``LocalExecutor.sample`` on this host with 0 and with ``--replicas`` (10) running replicas
  (``sleep``), ``--ticks`` (50) calls each; CPU is this process's ``process_time`` (every thread: the read runs
  in ``asyncio.to_thread``), wall the elapsed time.
* ``usage_file``: one write of a replica launcher's ``usage.json`` (Slurm's replica source), per replica per
  interval, in the launcher's process.
* ``ray`` (``--ray``; starts a 3-node cluster on this host, ~60 s): ``RayExecutor.sample`` over every node, the
  driver's CPU per tick and per node, and the wall time of a tick; the nodes' own reads are the local ones.

The section ``sampler`` of bench/monitoring.py (``sampler()`` returns the dict; this file runs alone too):

    python bench/monitoring_sampler.py [--replicas 10] [--ticks 50] [--ray]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aicenter.executors import ReplicaHandle, ReplicaPlan
from aicenter.executors.local import LocalExecutor
from aicenter.runtime.files import write_json_atomic
from aicenter.runtime.usage import USAGE_FILE, replica_usage

INTERVAL_S = 15.0
BUDGET_PCT = 1.0


async def _launch(executor: Any, root: Path, node: str, count: int) -> list[ReplicaHandle]:
    handles = []
    for n in range(count):
        work = root / f"work{n}"
        work.mkdir(parents=True, exist_ok=True)
        plan = ReplicaPlan(1, "worker", n, 0, node, "sleep 600", {}, root / f"run{n}", work, cpu_milli=10)
        handles.append(await executor.launch(plan))
    return handles


async def _measure(executor: Any, handles: list[ReplicaHandle], ticks: int) -> dict[str, Any]:
    await executor.sample(handles)  # warm: NVML init, imports, Ray's worker
    cpu, wall = time.process_time(), time.perf_counter()
    nodes = 0
    for _ in range(ticks):
        nodes = len(await executor.sample(handles))
    cpu_s = (time.process_time() - cpu) / ticks
    wall_s = (time.perf_counter() - wall) / ticks
    per_node = cpu_s / max(1, nodes)
    return {
        "nodes": nodes,
        "replicas": len(handles),
        "cpu_ms_per_tick": round(cpu_s * 1000, 3),
        "cpu_ms_per_tick_per_node": round(per_node * 1000, 3),
        "wall_ms_per_tick": round(wall_s * 1000, 3),
        "pct_of_one_core_per_node_at_15s": round(per_node / INTERVAL_S * 100, 4),
    }


async def _local(replicas: int, ticks: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="aicenter-bench-sampler-") as tmp:
        root = Path(tmp)
        executor = LocalExecutor(root, node_name="bench")
        out = {"idle": await _measure(executor, [], ticks)}
        handles = await _launch(executor, root, "bench", replicas)
        try:
            out["with_replicas"] = await _measure(executor, handles, ticks)
            record = json.loads((Path(handles[0].run_dir) / "status.json").read_text())
            cpu = time.process_time()
            for _ in range(ticks):
                found = replica_usage(record.get("cgroups"), record["child_pid"])
                assert found is not None
                write_json_atomic(Path(handles[0].run_dir) / USAGE_FILE, {"at": time.time(), **found._asdict()})
            per = (time.process_time() - cpu) / ticks
            out["usage_file"] = {
                "cpu_ms_per_write": round(per * 1000, 3),
                "pct_of_one_core_per_replica_at_15s": round(per / INTERVAL_S * 100, 4),
            }
        finally:
            for handle in handles:
                await executor.stop(handle, grace_s=1.0)
    return out


async def _ray(ticks: int) -> dict[str, Any]:
    from tests.support.ray import RayCluster, ray_available

    from aicenter.executors.ray import RayExecutor

    reason = ray_available()
    if reason:
        return {"skipped": reason}
    with RayCluster() as cluster, tempfile.TemporaryDirectory(prefix="aicenter-bench-ray-") as tmp:
        executor = RayExecutor(Path(tmp), address=cluster.address)
        try:
            return await _measure(executor, [], ticks)
        finally:
            await executor.close()


def sampler(replicas: int = 10, ticks: int = 50, ray: bool = False) -> dict[str, Any]:
    """The section's figures (see the module docstring)."""
    out: dict[str, Any] = {"interval_s": INTERVAL_S, "budget_pct_of_one_core_per_node": BUDGET_PCT}
    out["local"] = asyncio.run(_local(replicas, ticks))
    if ray:
        out["ray"] = asyncio.run(_ray(ticks))
    worst = out["local"]["with_replicas"]["pct_of_one_core_per_node_at_15s"]
    out["within_budget"] = worst < BUDGET_PCT
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--replicas", type=int, default=10)
    parser.add_argument("--ticks", type=int, default=50)
    parser.add_argument("--ray", action="store_true")
    args = parser.parse_args()
    print(json.dumps(sampler(args.replicas, args.ticks, args.ray), indent=2))


if __name__ == "__main__":
    main()
