"""PendingQueue (incremental FIFO order) and PendingReasons (lazy reasons) never change a decision."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicenter.scheduler import ClusterState, Job, PendingQueue, PolicyConfig, Preempt, Quota, Scheduler

from .factories import cluster, job
from .test_memo import scenarios


def test_queue_keeps_fifo_order_through_adds_and_removes() -> None:
    q = PendingQueue([job("c", t=2.0), job("a", t=1.0), job("b", t=1.0)])
    assert q.ids() == ["a", "b", "c"]
    q.add(job("d", t=0.5))
    assert [j.id for j in q] == ["d", "a", "b", "c"]
    assert q.remove("a").id == "a"
    assert q.ids() == ["d", "b", "c"]
    assert len(q) == 3
    assert q[0].id == "d"
    assert [j.id for j in q[1:]] == ["b", "c"]
    q.add(replace(job("b", t=1.0), attained_service=5.0))  # replaces, and counts as served
    assert q.ids() == ["d", "b", "c"]
    assert [j.id for j in q.served()] == ["b"]
    assert [j.id for j in q.fresh_head(5)] == ["d", "c"]
    assert q.has("c")
    assert not q.has("a")
    assert q.get("a") is None
    with pytest.raises(KeyError):
        q.remove("a")


def test_reasons_are_lazy_but_complete() -> None:
    state = cluster(1, gpus=2)
    jobs = [job(f"j{i}", 1, t=i) for i in range(6)]
    res = Scheduler({"max_jobs_per_cycle": 3, "preemption": False}).cycle(state, PendingQueue(jobs), 0.0)
    assert [p.job_id for p in res.placed] == ["j0", "j1"]
    assert res.pending["j5"].startswith("waiting in the queue: not among the jobs examined")
    with pytest.raises(KeyError):
        res.pending["j0"]  # placed: no reason
    with pytest.raises(KeyError):
        res.pending["nobody"]
    assert set(res.pending) == {"j2", "j3", "j4", "j5"}
    assert len(res.pending) == 4


def test_strict_fifo_stops_at_the_blocker_and_everyone_behind_shares_its_reason() -> None:
    state = cluster(1, gpus=4)
    jobs = [job("a", 2, t=0), job("big", 8, t=1)] + [job(f"s{i}", 1, t=2 + i) for i in range(5)]
    res = Scheduler({"base": "fifo", "max_jobs_per_cycle": 3}).cycle(state, jobs, 0.0)
    assert [p.job_id for p in res.placed] == ["a"]
    assert res.pending["big"].startswith("needs 8 accelerators")
    assert {res.pending[f"s{i}"] for i in range(5)} == {"waiting behind job big (strict order, no backfill)"}
    assert "a" not in res.pending


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios(), st.sampled_from([3, 1000]))
def test_queue_gives_the_same_decisions_as_a_list(
    scenario: tuple[list[object], list[Quota], list[Job], str, int], limit: int
) -> None:
    nodes, quotas, jobs, policy, seed = scenario
    runs = []
    for use_queue in (True, False):
        state = ClusterState(nodes, quotas)  # type: ignore[arg-type]
        sched = Scheduler(PolicyConfig.from_dict({"base": policy, "max_jobs_per_cycle": limit}))
        rng = random.Random(seed)
        pending = {j.id: j for j in jobs}
        queue = PendingQueue(jobs)
        trace = []
        now = 0.0
        for _ in range(4):
            listed = list(pending.values())
            rng.shuffle(listed)  # any order of a plain list gives the same decisions
            res = sched.cycle(state, queue if use_queue else listed, now)
            trace.append((res.decisions, dict(res.pending)))
            for d in res.decisions:
                jid = getattr(d, "job_id", "")
                if isinstance(d, Preempt):  # requeued with its service, as the simulator does
                    again = replace(pending.get(jid) or _running_job(jid, jobs), attained_service=1e7)
                    pending[jid] = again
                    queue.add(again)
                elif jid in pending and jid in state.running:
                    del pending[jid]
                    queue.remove(jid)
            for jid in sorted(state.running):
                if rng.random() < 0.3:
                    state.release(jid)
            now += 100.0
        runs.append(trace)
    assert runs[0] == runs[1]


def _running_job(jid: str, jobs: list[Job]) -> Job:
    return next(j for j in jobs if j.id == jid)
