"""Scheduler throughput: 10,000 nodes x 8 GPUs (leaves of 32), 50,000 pending jobs, the full policy stack.

Job sizes: Philly's num_gpus mix (gang jobs up to 128 GPUs as replicas of 8) plus 20% device-sharing tasks
drawn from openb's default pod list (gpu_milli, cpu_milli, memory_mib). Traces are read from
../shared/traces (override with AICENTER_TRACES). Prints JSON.

    python bench/scheduler.py [--nodes 10000] [--jobs 50000] [--cycles 30] [--policy default]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import random
import statistics
import time
from pathlib import Path

from aicenter.scheduler import (
    ClusterState,
    Device,
    Job,
    Node,
    PolicyConfig,
    Quota,
    ReplicaRequest,
    Scheduler,
    Task,
)

TRACES = Path(os.environ.get("AICENTER_TRACES", Path(__file__).resolve().parents[2] / "shared" / "traces"))


def cluster(n: int, leaf: int = 32, leaves_per_spine: int = 16) -> list[Node]:
    """n nodes of 8 GPUs in two NVLink domains of 4."""
    out = []
    for i in range(n):
        devs = tuple(Device(j, "nvidia-v100", 32768, f"nv{j // 4}") for j in range(8))
        out.append(
            Node(
                f"node-{i:05d}",
                96_000,
                786_432,
                devs,
                leaf=f"leaf-{i // leaf}",
                spine=f"spine-{i // (leaf * leaves_per_spine)}",
            )
        )
    return out


def workload(n: int, seed: int = 7) -> list[Job]:
    """n jobs: 80% Philly sizes, 20% openb fractional tasks; 8 workspaces x 5 users."""
    rng = random.Random(seed)
    with open(TRACES / "philly.csv") as f:
        philly = [int(r["num_gpus"]) for r in csv.DictReader(f) if r["num_gpus"]]
    with open(TRACES / "openb_pod_list_default.csv") as f:
        openb = [
            (int(r["gpu_milli"]), int(r["cpu_milli"]), int(r["memory_mib"]))
            for r in csv.DictReader(f)
            if r["num_gpu"] == "1" and 0 < int(r["gpu_milli"]) < 1000
        ]
    jobs = []
    for k in range(n):
        ws = f"ws{rng.randrange(8)}"
        user = f"{ws}-u{rng.randrange(5)}"
        if rng.random() < 0.2:
            milli, cpu, mem = rng.choice(openb)
            req = ReplicaRequest(cpu, mem, accelerator_milli=milli, accelerator_memory_mib=milli * 32)
            tasks = (Task("worker", 1, req),)
        else:
            g = rng.choice(philly)
            per = g if g <= 8 else (8 if g % 8 == 0 else 4)
            tasks = (Task("worker", g // per, ReplicaRequest(4_000 * per, 32_768 * per, accelerators=per)),)
        jobs.append(Job(f"j{k}", ws, user, 0, float(k), tasks))
    return jobs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=10_000)
    ap.add_argument("--jobs", type=int, default=50_000)
    ap.add_argument("--cycles", type=int, default=30)
    ap.add_argument("--policy", default="default")
    ap.add_argument("--finish", type=float, default=0.04, help="share of running jobs ending between cycles")
    args = ap.parse_args()

    t0 = time.perf_counter()
    nodes = cluster(args.nodes)
    gpus = args.nodes * 8
    quotas = [
        Quota(f"ws{i}", "default", guaranteed={"accelerators": gpus / 8}, maximum={"accelerators": gpus / 3})
        for i in range(8)
    ]
    state = ClusterState(nodes, quotas)
    setup_state = time.perf_counter() - t0
    t1 = time.perf_counter()
    jobs = workload(args.jobs)
    setup_jobs = time.perf_counter() - t1
    sched = Scheduler(PolicyConfig.load(args.policy))

    pending = {j.id: j for j in jobs}
    rng = random.Random(1)
    times: list[float] = []
    # CPU time too: the 2-core machine is shared, and wall time then measures the neighbours as well.
    cpu_times: list[float] = []
    placed_total = preempted = 0
    now = 0.0
    for _ in range(args.cycles):
        plist = list(pending.values())
        c0, p0 = time.perf_counter(), time.process_time()
        res = sched.cycle(state, plist, now)
        times.append(time.perf_counter() - c0)
        cpu_times.append(time.process_time() - p0)
        for d in res.placed:
            pending.pop(d.job_id)
        placed_total += len(res.placed)
        preempted += len(res.preempted)
        # Some jobs end between cycles so the cluster keeps taking work.
        running = list(state.running)
        for jid in rng.sample(running, int(len(running) * args.finish)):
            state.release(jid)
        now += 10.0
    state.check_invariants()
    total = sum(times)
    times_ms = sorted(t * 1000 for t in times)
    cpu_ms = sorted(t * 1000 for t in cpu_times)
    print(
        json.dumps(
            {
                "nodes": args.nodes,
                "gpus": gpus,
                "jobs": args.jobs,
                "policy": args.policy,
                "cycles": args.cycles,
                "placements": placed_total,
                "preemptions": preempted,
                "placements_per_s": round(placed_total / total, 1),
                "cycle_ms_p50": round(statistics.median(times_ms), 1),
                "cycle_ms_p99": round(times_ms[min(len(times_ms) - 1, int(len(times_ms) * 0.99))], 1),
                "cycle_ms_max": round(times_ms[-1], 1),
                "first_cycle_ms": round(times[0] * 1000, 1),
                "cpu_placements_per_s": round(placed_total / sum(cpu_times), 1),
                "cpu_cycle_ms_p50": round(statistics.median(cpu_ms), 1),
                "cpu_cycle_ms_p99": round(cpu_ms[min(len(cpu_ms) - 1, int(len(cpu_ms) * 0.99))], 1),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "setup_state_s": round(setup_state, 2),
                "setup_jobs_s": round(setup_jobs, 2),
                "running_at_end": len(state.running),
                "pending_at_end": len(pending),
                "gpus_allocated_at_end": int(gpus - state.full_free_all.sum()),
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
