"""``aicenter simulate``: replay a trace through the scheduler and report metrics (docs/simulator.md)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import typer

from aicenter.core.errors import AicenterError, ValidationFailed

MODES = ("replay", "fill")


def _date(value: str | None, option: str) -> Any:
    if value is None:
        return None
    from aicenter.sim.traces import parse_time

    try:
        return parse_time(value)
    except ValidationFailed as exc:
        raise ValidationFailed(exc.message, field=option) from None


class _Progress:
    """Progress on stderr, at most once a second; nothing for runs shorter than that."""

    def __init__(self, enabled: bool, fill: bool = False) -> None:
        self.enabled = enabled
        self.fill = fill
        self.policy = ""
        self.began = time.perf_counter()

    def start(self, policy: str) -> None:
        self.policy = policy
        self.began = time.perf_counter()

    def __call__(self, done: int, total: int, now: float) -> None:
        if not self.enabled:
            return
        elapsed = time.perf_counter() - self.began
        if self.fill:
            line = f"[{self.policy}] {done:,}/{total:,} tasks, {now:,.0f} GPUs arrived, {elapsed:.0f} s"
        else:
            line = f"[{self.policy}] {done:,}/{total:,} jobs, simulated {now / 86400:.1f} d, {elapsed:.0f} s"
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def _table(doc: dict[str, Any]) -> str:
    lines = []
    for r in doc["results"]:
        if "fill" in r:
            f = r["fill"]
            lines.append(
                f"{r['policy']:<16} unallocated GPUs {f['unallocated_gpus']:>9.1f} of {f['total_gpus']:.0f}"
                f" ({100 * (f['unallocated_fraction'] or 0):.1f}%), {f['tasks_placed']:,} tasks placed"
            )
        else:
            jct = r["jct_s"]
            alloc = r["gpu_allocation"]["avg_fraction"]
            jain = r["fairness"]["jain_index"]
            avg = jct["avg"] if jct["avg"] is not None else float("nan")
            p99 = r["queueing_delay_s"]["p99"]
            lines.append(
                f"{r['policy']:<16} avg JCT {avg:>10.0f} s  p99 queue {p99 or 0:>10.0f} s"
                f"  alloc {100 * (alloc or 0):5.1f}%  jain {jain or 0:.3f}"
                f"  preemptions {r['preemptions']:,}  unfinished {r['unfinished']:,}"
            )
    return "\n".join(lines)


def simulate(
    trace: str = typer.Option(..., "--trace", help="Trace file: philly.csv, openb pods CSV, or generic CSV/JSON."),
    start: str | None = typer.Option(None, "--from", help="Keep jobs submitted from this date (UTC)."),
    end: str | None = typer.Option(None, "--to", help="Keep jobs submitted before this date (UTC)."),
    cluster: str | None = typer.Option(None, "--cluster", help="Synthesized cluster NODESxGPUS, e.g. 96x8."),
    leaf_size: int | None = typer.Option(None, "--leaf-size", help="Nodes per leaf switch (spines above)."),
    nodes: str | None = typer.Option(None, "--nodes", help="Node list CSV (openb format) instead of --cluster."),
    mode: str = typer.Option("replay", "--mode", help="replay: jobs run their duration; fill: place until full."),
    policy: list[str] = typer.Option(
        ["default"], "--policy", help="Built-in policy name or policy document; repeat to compare."
    ),
    json_out: str | None = typer.Option(None, "--json", help="Write the JSON report here ('-' = stdout)."),
    plot_out: str | None = typer.Option(None, "--plot", help="Write a PNG plot here."),
    trace_format: str = typer.Option("auto", "--format", help="auto, philly, openb or generic."),
    checkpoint_interval: float = typer.Option(
        0.0, "--checkpoint-interval", help="Seconds between checkpoints (0: checkpoint at preemption)."
    ),
    restart_penalty: float = typer.Option(0.0, "--restart-penalty", help="Seconds lost when a job restarts."),
    cycle_interval: float = typer.Option(
        0.0, "--cycle-interval", help="Seconds between scheduling cycles (0: after every event)."
    ),
    limit: int | None = typer.Option(None, "--limit", help="Only the first N jobs of the trace."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress on stderr."),
) -> None:
    """Replay a trace through the scheduler and report JCT, queueing, allocation, fairness (or fragmentation)."""
    try:
        from aicenter.sim.engine import SimOptions
        from aicenter.sim.runner import plot, prepare, report, run

        if mode not in MODES:
            raise ValidationFailed(f"must be one of {', '.join(MODES)}, got {mode!r}", field="--mode")
        for name, value in (
            ("--checkpoint-interval", checkpoint_interval),
            ("--restart-penalty", restart_penalty),
            ("--cycle-interval", cycle_interval),
        ):
            if value < 0:
                raise ValidationFailed(f"must be >= 0, got {value:g}", field=name)
        options = SimOptions(
            mode="fill" if mode == "fill" else "replay",
            checkpoint_interval_s=checkpoint_interval,
            restart_penalty_s=restart_penalty,
            cycle_interval_s=cycle_interval,
        )
        sim = prepare(
            trace=trace,
            policies=policy,
            cluster=cluster,
            leaf_size=leaf_size,
            nodes=nodes,
            start=_date(start, "--from"),
            end=_date(end, "--to"),
            trace_format=trace_format,
            options=options,
            limit=limit,
        )
        progress = _Progress(enabled=not quiet, fill=mode == "fill")
        results = run(sim, progress=progress, on_policy=progress.start)
        doc = report(sim, results)
        if json_out == "-":
            typer.echo(json.dumps(doc, indent=2))
        else:
            typer.echo(_table(doc))
            if json_out:
                Path(json_out).write_text(json.dumps(doc, indent=2) + "\n")
        if plot_out:
            plot(results, plot_out, title=Path(trace).name)
    except AicenterError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(2) from None
    except OSError as exc:
        typer.echo(f"error: {exc.filename or ''}: {exc.strerror}", err=True)
        raise typer.Exit(2) from None
