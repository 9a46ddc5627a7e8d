"""aicenter.sim: replay job traces through the real scheduler and measure the result.

``prepare(...)`` loads a trace, a cluster and policies; ``run(sim)`` drives ``aicenter.scheduler.Scheduler`` over
the trace once per policy; ``report(sim, results)`` is the JSON report and ``plot(results, path)`` the PNG.
Definitions of every metric: docs/simulator.md.
"""

from aicenter.sim.cluster import ClusterInfo, synthesize, to_nodes
from aicenter.sim.engine import FillOutcome, SimOptions, SimResult, Simulator, to_job
from aicenter.sim.metrics import JobOutcome, Timeline, jain_index, max_min_share
from aicenter.sim.runner import Simulation, load_cluster, load_policies, plot, prepare, report, run
from aicenter.sim.workload import NodeSpec, Trace, TraceJob

__all__ = [
    "ClusterInfo",
    "FillOutcome",
    "JobOutcome",
    "NodeSpec",
    "SimOptions",
    "SimResult",
    "Simulation",
    "Simulator",
    "Timeline",
    "Trace",
    "TraceJob",
    "jain_index",
    "load_cluster",
    "load_policies",
    "max_min_share",
    "plot",
    "prepare",
    "report",
    "run",
    "synthesize",
    "to_job",
    "to_nodes",
]
