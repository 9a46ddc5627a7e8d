"""Fragmentation on openb (default tasks, GPU nodes, fill mode): random-fit, best-fit and FGD in one run.

Goal: FGD leaves >= 40% fewer unallocated GPUs than best-fit when the first task fails to place.

    python bench/sim_fragmentation.py
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from aicenter.sim.engine import SimOptions
from aicenter.sim.runner import prepare, report, run

TRACES = Path(__file__).resolve().parents[1] / "../shared/traces"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pods", default=str(TRACES / "openb_pod_list_default.csv"))
    parser.add_argument("--nodes", default=str(TRACES / "openb_node_list_gpu_node.csv"))
    parser.add_argument("--policy", action="append", help="default: random-fit, best-fit, fgd")
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    sim = prepare(
        trace=args.pods,
        nodes=args.nodes,
        policies=args.policy or ["random-fit", "best-fit", "fgd"],
        options=SimOptions(mode="fill"),
    )
    began = time.perf_counter()
    results = run(sim)
    doc = report(sim, results)
    by_name = {r["policy"]: r["fill"] for r in doc["results"]}
    if "best-fit" in by_name and "fgd" in by_name:
        best, ours = by_name["best-fit"]["unallocated_gpus"], by_name["fgd"]["unallocated_gpus"]
        reduction = 1 - ours / best if best else 0.0
        doc["goals"] = {"fgd_reduction_vs_best_fit": round(reduction, 4), "reduction_ge_40pct": reduction >= 0.4}
    doc["bench_wall_s"] = round(time.perf_counter() - began, 1)
    if args.plot:
        from aicenter.sim.runner import plot

        plot(results, args.plot, title="openb default, GPU nodes, fill")
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
