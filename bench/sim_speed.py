"""Simulator speed: all 82,247 Philly jobs on 96x8 GPUs (leaves of 16). Goal: <= 60 s wall.

python bench/sim_speed.py [--policy fifo --policy tiresias --policy default] [--limit N]

Prints one JSON entry per policy (default: fifo, tiresias and default, each in its own run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from aicenter.sim.runner import prepare, report, run

TRACES = Path(__file__).resolve().parents[1] / "../shared/traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(TRACES / "philly.csv"))
    parser.add_argument("--policy", action="append", help="default: fifo, tiresias, default (one run each)")
    parser.add_argument("--limit", type=int, default=None, help="only the first N jobs (smoke runs)")
    args = parser.parse_args()
    out = []
    for policy in args.policy or ["fifo", "tiresias", "default"]:
        began = time.perf_counter()
        sim = prepare(trace=args.trace, policies=[policy], cluster="96x8", leaf_size=16, limit=args.limit)
        loaded = time.perf_counter() - began
        results = run(sim)
        wall = time.perf_counter() - began
        summary = report(sim, results)["results"][0]
        print(f"{policy}: {wall:.1f} s", file=sys.stderr)
        out.append(
            {
                "policy": policy,
                "jobs": len(sim.trace.jobs),
                "finished": summary["finished"],
                "simulated_days": round(summary["makespan_s"] / 86400, 1),
                "load_s": round(loaded, 2),
                "wall_s": round(wall, 1),
                "scheduler_s": round(summary["run"]["scheduler_s"], 1),
                "cycles": summary["run"]["cycles"],
                "goal_le_60s": wall <= 60,
                "preemptions": summary["preemptions"],
            }
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
