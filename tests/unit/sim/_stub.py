"""A tiny deterministic scheduler for the simulator's own mechanics (events, preemption, checkpoints).

Priority first, then submit time; each job needs one node with enough whole free devices; a job that does not fit
preempts the lowest-priority running job below it. The real policies are tested in tests/unit/scheduler.
"""

from __future__ import annotations

from collections.abc import Sequence

from aicenter.scheduler.model import CycleResult, Job, Place, Preempt, ReplicaPlacement
from aicenter.scheduler.policy import PolicyConfig
from aicenter.scheduler.state import ClusterState

FULL = 1000


class StubScheduler:
    def __init__(self, policy: PolicyConfig) -> None:
        self.policy = policy

    def _fit(self, state: ClusterState, need: int) -> int | None:
        for i in range(len(state.names)):
            if int((state.dev_free[i] == FULL).sum()) >= need:
                return i
        return None

    def cycle(self, state: ClusterState, pending: Sequence[Job], now: float) -> CycleResult:
        result = CycleResult()
        for job in sorted(pending, key=lambda j: (-j.priority, j.submit_time)):
            need = job.tasks[0].request.accelerators
            i = self._fit(state, need)
            while i is None:
                victims = [rj for rj in state.running.values() if rj.job.priority < job.priority]
                if not victims:
                    break
                victim = min(victims, key=lambda rj: (rj.job.priority, -rj.started_at))
                state.release(victim.job.id)
                result.decisions.append(Preempt(victim.job.id, "priority", job.id))
                i = self._fit(state, need)
            if i is None:
                result.pending[job.id] = "does not fit"
                continue
            free = [j for j in range(state.dev_free.shape[1]) if state.dev_free[i, j] == FULL][:need]
            devices = tuple(int(state.dev_idx[i, j]) for j in free)
            placements = (ReplicaPlacement("worker", 0, state.names[i], devices, FULL * need),)
            state.allocate(job, placements, now)
            result.decisions.append(Place(job.id, placements))
        return result
