"""The simulator's event loop with a stub scheduler: exact, hand-computed timelines."""

from __future__ import annotations

import pytest

from aicenter.scheduler.policy import PolicyConfig
from aicenter.sim.cluster import synthesize, to_nodes
from aicenter.sim.engine import SimOptions, Simulator
from aicenter.sim.report import summarize
from aicenter.sim.workload import TraceJob

from ._stub import StubScheduler


def job(id: str, submit: float, duration: float, gpus: int, priority: int = 0, ws: str = "w") -> TraceJob:
    return TraceJob(id=id, workspace=ws, user=ws, submit_time=submit, duration=duration, gpus=gpus, priority=priority)


def simulate(jobs: list[TraceJob], options: SimOptions | None = None, cluster: str = "1x8") -> Simulator:
    return Simulator(
        to_nodes(synthesize(cluster)), jobs, PolicyConfig.builtin("fifo"), options, scheduler_factory=StubScheduler
    )


def test_jobs_queue_and_complete() -> None:
    sim = simulate([job("a", 0, 10, 8), job("b", 1, 20, 8)])
    result = sim.run()
    a, b = result.outcomes
    assert (a.first_start, a.finish, b.first_start, b.finish) == (0, 10, 10, 30)
    report = summarize(result)
    assert report["jct_s"]["avg"] == (10 + 29) / 2
    assert report["queueing_delay_s"]["avg"] == 4.5
    assert report["makespan_s"] == 30
    assert report["gpu_allocation"]["avg_fraction"] == 1.0
    assert report["fairness"]["jain_index"] == 1.0
    assert sim.state.running == {}


def test_preemption_keeps_checkpointed_progress_and_pays_restart() -> None:
    options = SimOptions(checkpoint_interval_s=20, restart_penalty_s=5)
    result = simulate([job("a", 0, 100, 8), job("b", 30, 10, 8, priority=1)], options).run()
    a, b = result.outcomes
    assert (b.first_start, b.finish) == (30, 40)
    # a ran 30 s, checkpointed at 20 s; restarts at 40, makes progress from 45, needs 80 more.
    assert a.preemptions == 1
    assert a.finish == 125
    assert a.run_s == 30 + 85
    assert summarize(result)["preemptions"] == 1


def test_preempted_job_reports_attained_service() -> None:
    sim = simulate([job("a", 0, 100, 4), job("b", 30, 10, 8, priority=1)])
    seen: list[float] = []
    inner = sim.scheduler.cycle

    def spy(state, pending, now):  # type: ignore[no-untyped-def]
        seen.extend(j.attained_service for j in pending if j.id == "a")
        return inner(state, pending, now)

    sim.scheduler.cycle = spy  # type: ignore[method-assign]
    result = sim.run()
    assert seen == [0.0, pytest.approx(4 * 30)]  # back in pending after 4 GPUs x 30 s
    assert result.outcomes[0].finish == 40 + 70  # no checkpoint interval: nothing lost


def test_fair_share_metric_sees_a_hog() -> None:
    # w1 floods the 8-GPU node for 100 s while w2's job waits: w2 gets nothing it was entitled to.
    jobs = [job(f"h{i}", 0, 100, 2, ws="w1") for i in range(4)] + [job("x", 1, 100, 2, ws="w2")]
    report = summarize(simulate(jobs).run())
    assert report["fairness"]["workspaces"] == 2
    assert report["fairness"]["jain_index"] < 0.9


def test_unplaceable_job_ends_the_run() -> None:
    result = simulate([job("big", 0, 10, 16)]).run()
    assert result.outcomes[0].finish is None
    assert summarize(result)["unfinished"] == 1
