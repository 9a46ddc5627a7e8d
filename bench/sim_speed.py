"""Simulator speed: all 82,247 Philly jobs on 96x8 GPUs (leaves of 16). Goal (issue 3): <= 60 s wall.

python bench/sim_speed.py [--policy default]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from aicenter.sim.runner import prepare, report, run

TRACES = Path(__file__).resolve().parents[1] / "../shared/traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--trace", default=str(TRACES / "philly.csv"))
    parser.add_argument("--policy", action="append", help="default: default (one run per policy)")
    args = parser.parse_args()
    out = []
    for policy in args.policy or ["default"]:
        began = time.perf_counter()
        sim = prepare(trace=args.trace, policies=[policy], cluster="96x8", leaf_size=16)
        loaded = time.perf_counter() - began
        results = run(sim)
        wall = time.perf_counter() - began
        summary = report(sim, results)["results"][0]
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
            }
        )
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
