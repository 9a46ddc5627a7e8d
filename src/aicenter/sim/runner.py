"""One call from inputs to a report: load the trace and the cluster, run every policy, summarize, plot."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from aicenter.core.errors import ValidationFailed
from aicenter.scheduler.policy import PolicyConfig
from aicenter.sim.cluster import ClusterInfo, describe, synthesize, to_nodes
from aicenter.sim.engine import Progress, SimOptions, SimResult, Simulator
from aicenter.sim.plots import plot_results
from aicenter.sim.report import summarize
from aicenter.sim.traces import load_openb_nodes, load_trace
from aicenter.sim.workload import NodeSpec, Trace


@dataclass(slots=True)
class Simulation:
    """What to simulate: a trace, a cluster, policies and simulator options."""

    trace: Trace
    nodes: list[NodeSpec]
    cluster: ClusterInfo
    policies: list[PolicyConfig]
    options: SimOptions = field(default_factory=SimOptions)


def load_policies(sources: Sequence[str]) -> list[PolicyConfig]:
    """Built-in names or policy document paths; duplicate names get ``#2``, ``#3`` so reports stay apart.

    Raises:
        ValidationFailed: an unknown name or an invalid document (naming the field).
    """
    out: list[PolicyConfig] = []
    seen: dict[str, int] = {}
    for source in sources or ["default"]:
        path = Path(source)
        if path.is_file():
            policy = PolicyConfig.load(path)
        elif path.suffix.lower() in (".yaml", ".yml", ".json"):
            raise ValidationFailed(f"no such policy file: {source}", field="policy")
        else:
            policy = PolicyConfig.builtin(source)  # names the built-ins when unknown
        if policy.name == "custom" and Path(source).is_file():
            policy = policy.model_copy(update={"name": Path(source).stem})
        seen[policy.name] = seen.get(policy.name, 0) + 1
        if seen[policy.name] > 1:
            policy = policy.model_copy(update={"name": f"{policy.name}#{seen[policy.name]}"})
        out.append(policy)
    return out


def load_cluster(
    *, cluster: str | None, leaf_size: int | None, nodes_path: str | Path | None
) -> tuple[list[NodeSpec], ClusterInfo]:
    """A synthesized cluster (``96x8``) or the nodes of a node list; exactly one of the two.

    Raises:
        ValidationFailed: neither or both given, or a malformed spec or file.
    """
    if (cluster is None) == (nodes_path is None):
        raise ValidationFailed("give either --cluster NxG or --nodes FILE", field="cluster")
    if nodes_path is not None:
        specs = load_openb_nodes(nodes_path)
        if leaf_size:
            specs = [replace(s, leaf=f"leaf-{i // leaf_size}", spine="spine-0") for i, s in enumerate(specs)]
        return specs, describe(str(nodes_path), specs, leaf_size)
    assert cluster is not None
    specs = synthesize(cluster, leaf_size=leaf_size)
    return specs, describe(cluster, specs, leaf_size)


def prepare(
    *,
    trace: str | Path,
    policies: Sequence[str],
    cluster: str | None = None,
    leaf_size: int | None = None,
    nodes: str | Path | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    trace_format: str = "auto",
    options: SimOptions | None = None,
    limit: int | None = None,
) -> Simulation:
    """Load everything a run needs; every input error surfaces here, before any simulation starts.

    Raises:
        ValidationFailed: on any malformed input.
    """
    if start is not None and end is not None and end <= start:
        raise ValidationFailed("--to must be after --from", field="to")
    loaded_policies = load_policies(policies)
    node_specs, info = load_cluster(cluster=cluster, leaf_size=leaf_size, nodes_path=nodes)
    max_gpus = max((s.gpus for s in node_specs), default=0)
    loaded = load_trace(trace, fmt=trace_format, start=start, end=end, gpus_per_node=max(1, max_gpus))
    if limit is not None:
        loaded = replace(loaded, jobs=loaded.jobs[:limit])
    return Simulation(
        trace=loaded, nodes=node_specs, cluster=info, policies=loaded_policies, options=options or SimOptions()
    )


def run(sim: Simulation, progress: Progress | None = None, on_policy: Any = None) -> list[SimResult]:
    """Run every policy on a fresh copy of the cluster, in order."""
    results = []
    for policy in sim.policies:
        if on_policy is not None:
            on_policy(policy.name)
        simulator = Simulator(to_nodes(sim.nodes), sim.trace.jobs, policy, sim.options)
        results.append(simulator.run(progress))
    return results


def report(sim: Simulation, results: Sequence[SimResult]) -> dict[str, Any]:
    """The JSON report of a run (all policies)."""
    trace = sim.trace
    return {
        "trace": {
            "source": trace.source,
            "format": trace.meta.get("format"),
            "jobs": len(trace.jobs),
            "workspaces": len(trace.workspaces),
            "origin": trace.origin.isoformat() if trace.origin else None,
            "window_s": list(trace.window_s) if trace.window_s else None,
        },
        "cluster": sim.cluster.as_dict(),
        "options": {
            "mode": sim.options.mode,
            "checkpoint_interval_s": sim.options.checkpoint_interval_s,
            "restart_penalty_s": sim.options.restart_penalty_s,
            "cycle_interval_s": sim.options.cycle_interval_s,
        },
        "results": [summarize(r, trace.window_s) for r in results],
    }


def plot(results: Sequence[SimResult], path: str | Path, title: str = "") -> Path:
    """The PNG with every policy overlaid."""
    return plot_results(results, path, title)
