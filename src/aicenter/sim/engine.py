"""The discrete-event simulator: replays a trace through the real scheduler (the code the server runs).

Events are arrivals, completions and, for attained-service policies, the moments a running job crosses a LAS
threshold, plus periodic ticks while jobs wait (starvation promotion depends on waiting time). Events at the same
instant are applied together and followed by one scheduling cycle (``cycle_interval_s`` > 0 aligns cycles to a
period instead, like a server loop). A preempted job goes back to pending with the progress of its last
checkpoint; a restart costs ``restart_penalty_s`` of running without progress.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol

import numpy as np

from aicenter.scheduler.model import CycleResult, Job, Node, Place, Preempt, Quota, ReplicaRequest, Reserve, Task
from aicenter.scheduler.policy import PolicyConfig
from aicenter.scheduler.queue import PendingQueue
from aicenter.scheduler.scheduler import Scheduler
from aicenter.scheduler.state import ClusterState
from aicenter.sim.metrics import FloatArray, JobOutcome, Timeline
from aicenter.sim.workload import TraceJob

Mode = Literal["replay", "fill"]
Progress = Callable[[int, int, float], None]
"""Called now and then with (jobs done, jobs in the trace, simulated seconds)."""


class CycleRunner(Protocol):
    """What the simulator needs of a scheduler: ``aicenter.scheduler.Scheduler`` (tests may pass a stub)."""

    def cycle(self, state: ClusterState, pending: Sequence[Job], now: float) -> CycleResult: ...


_DONE, _THRESHOLD = 0, 1
_MAX_FILL_PASSES = 100  # a trace of tasks that need nothing would otherwise fill forever


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How the simulator behaves (not what the scheduler decides: that is the PolicyConfig).

    Attributes:
        mode: ``replay`` runs each job for its duration; ``fill`` places tasks in trace order, never releases
            them, and stops at the first task that does not fit.
        checkpoint_interval_s: A preempted job keeps the progress of its last checkpoint, taken every this
            many seconds of useful run; 0 = it checkpoints when preempted and loses nothing.
        restart_penalty_s: Seconds a restarted job holds its resources before making progress again.
        cycle_interval_s: 0 = a cycle right after each batch of simultaneous events; otherwise cycles run on
            multiples of this period (events in between are applied at their own times).
        tick_s: Extra cycles every this many seconds while jobs wait; ``None`` = 300 s for LAS policies
            (starvation promotion depends on waiting time) and none otherwise.
        fill_repeat: In fill mode, start the trace over (fresh ids) when every task fits, so the run always
            ends with a failed placement, as in the FGD paper's workload inflation.
        quotas: Workspace quotas for the ClusterState.
    """

    mode: Mode = "replay"
    checkpoint_interval_s: float = 0.0
    restart_penalty_s: float = 0.0
    cycle_interval_s: float = 0.0
    tick_s: float | None = None
    fill_repeat: bool = True
    quotas: tuple[Quota, ...] = ()


@dataclass(slots=True)
class FillOutcome:
    """Fill mode's result: the cluster when the first task failed to place."""

    total_gpus: float
    allocated_gpus: float
    tasks_placed: int
    arrived_gpus: float
    failed_task: TraceJob | None
    failed_reason: str | None
    passes: int

    @property
    def unallocated_gpus(self) -> float:
        return self.total_gpus - self.allocated_gpus


@dataclass(slots=True)
class SimResult:
    """Everything a run produced; ``metrics.summarize`` turns it into the report."""

    policy: str
    mode: Mode
    outcomes: list[JobOutcome]
    timeline: Timeline
    workspaces: list[str]
    total_gpus: float
    cycles: int
    wall_s: float
    scheduler_s: float
    fill: FillOutcome | None = None
    decisions: dict[str, int] = field(default_factory=dict)


def to_job(tj: TraceJob, *, submit_time: float | None = None, job_id: str | None = None) -> Job:
    """The scheduler's view of a trace job: one task of ``replicas`` identical replicas, a gang."""
    request = ReplicaRequest(
        cpu_milli=tj.cpu_milli,
        memory_mib=tj.memory_mib,
        accelerators=tj.gpus,
        accelerator_milli=tj.gpu_milli,
        accelerator_types=tj.gpu_types,
    )
    return Job(
        id=job_id or tj.id,
        workspace=tj.workspace,
        user=tj.user,
        priority=tj.priority,
        submit_time=tj.submit_time if submit_time is None else submit_time,
        tasks=(Task("worker", tj.replicas, request),),
        preemptible=tj.preemptible,
        estimate_s=tj.estimate_s,
    )


@dataclass(slots=True)
class _Run:
    trace: TraceJob
    job: Job
    outcome: JobOutcome
    ws: int
    gpus: float
    progress: float = 0.0
    started: float | None = None
    progress_from: float = 0.0
    epoch: int = 0


class Simulator:
    """Drives one ``Scheduler`` over one trace on one cluster.

    Args:
        nodes: The cluster.
        jobs: The trace's jobs, sorted by submit time.
        policy: The scheduling policy.
        options: Simulator options.
        scheduler_factory: Builds the scheduler from the policy (default: ``aicenter.scheduler.Scheduler``).
    """

    def __init__(
        self,
        nodes: Sequence[Node],
        jobs: Sequence[TraceJob],
        policy: PolicyConfig,
        options: SimOptions | None = None,
        scheduler_factory: Callable[[PolicyConfig], CycleRunner] | None = None,
    ) -> None:
        self.nodes = list(nodes)
        self.jobs = list(jobs)
        self.policy = policy
        self.options = options or SimOptions()
        self.scheduler: CycleRunner = (scheduler_factory or Scheduler)(policy)
        self.state = ClusterState(self.nodes, self.options.quotas)
        self.total_gpus = float(sum(len(n.devices) for n in self.nodes))
        self.workspaces = sorted({j.workspace for j in self.jobs})
        self._ws_index = {w: i for i, w in enumerate(self.workspaces)}
        self.timeline = Timeline()
        self._ws_alloc: FloatArray = np.zeros(len(self.workspaces))
        self._ws_demand: FloatArray = np.zeros(len(self.workspaces))
        self.allocated = 0.0
        self.cycles = 0
        self.scheduler_s = 0.0
        self.decisions = {"place": 0, "preempt": 0, "reserve": 0, "evict_cache": 0}
        self._las = policy.queue_order == "las"
        self._thresholds = tuple(policy.las_thresholds) if self._las and policy.preemption else ()
        tick = self.options.tick_s
        self._tick = tick if tick is not None else (300.0 if self._las else 0.0)

    # ----- the cycle --------------------------------------------------------------------------------------
    def _cycle(self, pending: Sequence[Job], now: float) -> tuple[list[Place | Preempt], Mapping[str, str]]:
        """One scheduling cycle: the Place and Preempt decisions in order, and the pending reasons."""
        began = time.perf_counter()
        result = self.scheduler.cycle(self.state, pending, now)
        self.scheduler_s += time.perf_counter() - began
        self.cycles += 1
        acted: list[Place | Preempt] = []
        for d in result.decisions:
            if isinstance(d, Place):
                acted.append(d)
                self.decisions["place"] += 1
            elif isinstance(d, Preempt):
                acted.append(d)
                self.decisions["preempt"] += 1
            elif isinstance(d, Reserve):
                self.decisions["reserve"] += 1
            else:
                self.decisions["evict_cache"] += 1
        return acted, result.pending

    def _record(self, now: float, queued: int, running: int) -> None:
        self.timeline.record(now, self.allocated, queued, running, self._ws_alloc, self._ws_demand)

    # ----- replay -----------------------------------------------------------------------------------------
    def run(self, progress: Progress | None = None) -> SimResult:
        """Run the whole trace and return what happened."""
        began = time.perf_counter()
        fill = self._fill(progress) if self.options.mode == "fill" else None
        if fill is None:
            self._replay(progress)
        return SimResult(
            policy=self.policy.name,
            mode=self.options.mode,
            outcomes=self._outcomes,
            timeline=self.timeline,
            workspaces=self.workspaces,
            total_gpus=self.total_gpus,
            cycles=self.cycles,
            wall_s=time.perf_counter() - began,
            scheduler_s=self.scheduler_s,
            fill=fill,
            decisions=dict(self.decisions),
        )

    def _replay(self, progress: Progress | None) -> None:
        opts = self.options
        runs = [
            _Run(
                trace=tj,
                job=to_job(tj),
                ws=self._ws_index[tj.workspace],
                gpus=tj.total_gpus,
                outcome=JobOutcome(
                    id=tj.id, workspace=tj.workspace, submit=tj.submit_time, duration=tj.duration, gpus=tj.total_gpus
                ),
            )
            for tj in self.jobs
        ]
        self._outcomes = [r.outcome for r in runs]
        by_id = {r.job.id: r for r in runs}
        pending: dict[str, _Run] = {}
        queue = PendingQueue()  # the same jobs, kept in FIFO order: a cycle reads its head, not all of it
        running: dict[str, _Run] = {}
        events: list[tuple[float, int, int, int]] = []  # (time, kind, run index, epoch)
        index_of = {r.job.id: i for i, r in enumerate(runs)}
        next_arrival = 0
        done = 0
        next_tick = math.inf
        last_report = time.perf_counter()
        interval = opts.cycle_interval_s

        def start(r: _Run, now: float) -> None:
            restart = r.outcome.first_start is not None
            if not restart:
                r.outcome.first_start = now
            r.started = now
            r.progress_from = now + (opts.restart_penalty_s if restart else 0.0)
            r.epoch += 1
            i = index_of[r.job.id]
            heapq.heappush(events, (r.progress_from + r.trace.duration - r.progress, _DONE, i, r.epoch))
            if self._thresholds and r.gpus > 0:
                self._push_threshold(events, r, i, now)
            running[r.job.id] = r
            self.allocated += r.gpus
            self._ws_alloc[r.ws] += r.gpus

        def stop(r: _Run, now: float) -> None:
            assert r.started is not None
            held = now - r.started
            r.outcome.run_s += held
            self.allocated -= r.gpus
            self._ws_alloc[r.ws] -= r.gpus
            del running[r.job.id]
            r.epoch += 1
            r.started = None
            return

        while True:
            t_arrival = runs[next_arrival].trace.submit_time if next_arrival < len(runs) else math.inf
            t_event = events[0][0] if events else math.inf
            t_next = min(t_arrival, t_event, next_tick)
            if t_next == math.inf:
                break
            t_cycle = t_next if interval <= 0 else math.ceil(t_next / interval) * interval
            wanted = t_next == next_tick
            # Apply every event up to the cycle time, each at its own time.
            while True:
                t_arrival = runs[next_arrival].trace.submit_time if next_arrival < len(runs) else math.inf
                t_event = events[0][0] if events else math.inf
                if min(t_arrival, t_event) > t_cycle:
                    break
                if t_event <= t_arrival:
                    t, kind, i, epoch = heapq.heappop(events)
                    r = runs[i]
                    if epoch != r.epoch:
                        continue  # stale: the job was preempted since
                    if kind == _DONE:
                        self.state.release(r.job.id)
                        stop(r, t)
                        r.outcome.finish = t
                        r.progress = r.trace.duration
                        self._ws_demand[r.ws] -= r.gpus
                        done += 1
                        wanted = True
                        self._record(t, len(pending), len(running))
                    elif kind == _THRESHOLD:
                        self._push_threshold(events, r, i, t)
                        wanted = True
                else:
                    r = runs[next_arrival]
                    next_arrival += 1
                    pending[r.job.id] = r
                    queue.add(r.job)
                    self._ws_demand[r.ws] += r.gpus
                    wanted = True
            now = t_cycle
            if wanted and pending:
                acted, _ = self._cycle(queue, now)
                for d in acted:
                    if isinstance(d, Preempt):
                        r = by_id[d.job_id]
                        self._preempt(r, now, stop)
                        pending[r.job.id] = r
                        queue.add(r.job)
                    else:
                        queue.remove(d.job_id)
                        start(pending.pop(d.job_id), now)
                if not running and not acted and next_arrival >= len(runs):
                    break  # nothing runs, nothing will arrive, and what waits cannot be placed
            self._record(now, len(pending), len(running))
            next_tick = now + self._tick if (self._tick > 0 and pending) else math.inf
            if progress is not None and time.perf_counter() - last_report > 1.0:
                progress(done, len(runs), now)
                last_report = time.perf_counter()
        end = max(self.timeline.t[-1] if self.timeline.t else 0.0, 0.0)
        self._record(end, len(pending), len(running))
        if progress is not None:
            progress(done, len(runs), end)

    def _push_threshold(self, events: list[tuple[float, int, int, int]], r: _Run, i: int, now: float) -> None:
        """Queue the moment ``r`` crosses its next LAS threshold (its rank drops: a preemption may follow)."""
        assert r.started is not None
        attained = r.job.attained_service + r.gpus * (now - r.started)
        for threshold in self._thresholds:
            if threshold > attained + 1e-6:
                heapq.heappush(events, (now + (threshold - attained) / r.gpus, _THRESHOLD, i, r.epoch))
                return

    def _preempt(self, r: _Run, now: float, stop: Callable[[_Run, float], None]) -> None:
        """The cycle released ``r``; keep the progress of its last checkpoint and queue it again."""
        assert r.started is not None
        started, progress_from = r.started, r.progress_from
        useful = max(0.0, now - progress_from)
        interval = self.options.checkpoint_interval_s
        kept = useful if interval <= 0 else math.floor(useful / interval) * interval
        checkpoint_at = progress_from + kept if kept > 0 else r.job.last_checkpoint_at
        r.progress = min(r.trace.duration, r.progress + kept)
        r.outcome.preemptions += 1
        stop(r, now)
        r.job = replace(
            r.job,
            attained_service=r.job.attained_service + r.gpus * (now - started),
            last_checkpoint_at=checkpoint_at,
            started_at=started,
        )

    # ----- fill -------------------------------------------------------------------------------------------
    def _fill(self, progress: Progress | None) -> FillOutcome:
        """Place tasks in trace order, never releasing any, until the first one fails."""
        self._outcomes = []
        placed = 0
        arrived = 0.0
        passes = 1
        last_report = time.perf_counter()
        failed: TraceJob | None = None
        reason: str | None = None
        self._record(0.0, 0, 0)
        while failed is None and self.jobs and passes <= _MAX_FILL_PASSES:
            for n, tj in enumerate(self.jobs):
                job_id = tj.id if passes == 1 else f"{tj.id}#{passes}"
                job = to_job(tj, submit_time=float(placed), job_id=job_id)
                arrived += tj.total_gpus
                self._ws_demand[self._ws_index[tj.workspace]] += tj.total_gpus
                acted, reasons = self._cycle([job], float(placed))
                if not acted:
                    failed, reason = tj, reasons.get(job_id, "not placed")
                    break
                placed += 1
                self.allocated += tj.total_gpus
                self._ws_alloc[self._ws_index[tj.workspace]] += tj.total_gpus
                self._record(arrived, 0, placed)
                if progress is not None and time.perf_counter() - last_report > 1.0:
                    progress(n, len(self.jobs), arrived)
                    last_report = time.perf_counter()
            else:
                if not self.options.fill_repeat:
                    break
                passes += 1
        if progress is not None:
            progress(placed, len(self.jobs), arrived)
        return FillOutcome(
            total_gpus=self.total_gpus,
            allocated_gpus=self.allocated,
            tasks_placed=placed,
            arrived_gpus=arrived,
            failed_task=failed,
            failed_reason=reason,
            passes=passes,
        )
