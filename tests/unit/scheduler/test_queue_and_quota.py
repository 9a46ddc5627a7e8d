"""Queue orders (FIFO, priority, DRF fair share, user round robin, LAS, SJF) and quotas."""

from __future__ import annotations

from aicenter.scheduler import ClusterState, Quota, Scheduler
from aicenter.scheduler.policy import PolicyConfig
from aicenter.scheduler.queue import LasRank, las_queue

from .factories import cluster, job


def _order(policy: str | dict[str, object], state: ClusterState, jobs: list, now: float = 0.0) -> list[str]:  # type: ignore[type-arg]
    res = Scheduler(policy).cycle(state, jobs, now)
    return [p.job_id for p in res.placed]


def test_fifo_and_strict_blocking() -> None:
    state = cluster(1)
    jobs = [job("b", 8, t=2), job("a", 4, t=1), job("c", 1, t=3)]
    res = Scheduler("fifo").cycle(state, jobs, 0.0)
    assert [p.job_id for p in res.placed] == ["a"]
    assert res.pending["b"] == "needs 8 accelerators on one node; the most free on one node is 4"
    assert res.pending["c"] == "waiting behind job b (strict order, no backfill)"


def test_priority_order() -> None:
    state = cluster(1, gpus=2)
    jobs = [job("low", 1, prio=1, t=0), job("high", 1, prio=5, t=9), job("mid", 1, prio=3, t=1)]
    assert _order({"queue_order": "priority", "preemption": False}, state, jobs) == ["high", "mid"]


def test_sjf_uses_estimates() -> None:
    state = cluster(1, gpus=2)
    jobs = [job("long", 1, estimate_s=900.0), job("none", 1, t=-1), job("short", 1, estimate_s=10.0)]
    assert _order("sjf", state, jobs) == ["short", "long"]


def test_drf_alternates_workspaces() -> None:
    state = cluster(1, gpus=4)
    jobs = [job(f"a{i}", 1, ws="a", t=i) for i in range(4)] + [job(f"b{i}", 1, ws="b", t=10 + i) for i in range(4)]
    assert sorted(_order("fair-share", state, jobs)) == ["a0", "a1", "b0", "b1"]


def test_drf_favours_the_workspace_below_its_share() -> None:
    state = cluster(1, gpus=8)
    sched = Scheduler("fair-share")
    sched.cycle(state, [job("a0", 3, ws="a")], 0.0)
    got = sched.cycle(
        state,
        [job("a1", 1, ws="a", t=0), job("b0", 1, ws="b", t=5), job("b1", 1, ws="b", t=6), job("b2", 1, ws="b", t=7)],
        1.0,
    )
    # a holds 3; b gets turns until it holds as much: b0, b1, b2 before a1... only 5 devices left.
    assert [p.job_id for p in got.placed][:3] == ["b0", "b1", "b2"]


def test_user_round_robin_inside_workspace() -> None:
    state = cluster(1, gpus=3)
    jobs = [
        job("x1", 1, user="x", t=1),
        job("x2", 1, user="x", t=2),
        job("x3", 1, user="x", t=3),
        job("y1", 1, user="y", t=4),
        job("z1", 1, user="z", t=5),
    ]
    assert sorted(_order("fair-share", state, jobs)) == ["x1", "y1", "z1"]
    state = cluster(1, gpus=3)
    assert _order({"queue_order": "fair-share", "user_round_robin": False}, state, jobs) == ["x1", "x2", "x3"]
    state = cluster(1, gpus=3)
    assert sorted(_order({"queue_order": "user-round-robin"}, state, jobs)) == ["x1", "y1", "z1"]


def test_las_queues_and_starvation() -> None:
    p = PolicyConfig(queue_order="las", las_thresholds=(100.0, 1000.0), las_starvation_s=0, las_starvation_factor=2.0)
    assert [las_queue(x, p.las_thresholds) for x in (0, 99, 100, 999, 5000)] == [0, 0, 1, 1, 2]
    rank = LasRank(p, now=1000.0)
    fresh = job("fresh", 1, t=990.0)
    served = job("served", 1, t=900.0, attained_service=500.0)
    starved = job("starved", 1, t=0.0, attained_service=200.0)  # ran 200 s, waited 800 s > 2 x 200
    assert [rank.pending(j) for j in (fresh, served, starved)] == [0, 1, 0]


def test_las_serves_least_attained_first() -> None:
    state = cluster(1, gpus=1)
    jobs = [job("old", 1, t=0, attained_service=50_000.0), job("new", 1, t=5)]
    assert _order("tiresias", state, jobs, now=10.0) == ["new"]


def test_las_preempts_demoted_job() -> None:
    state = cluster(1, gpus=1)
    sched = Scheduler({"queue_order": "las", "las_thresholds": [100.0], "backfill": "greedy"})
    sched.cycle(state, [job("runner", 1)], 0.0)
    res = sched.cycle(state, [job("newcomer", 1, t=150.0)], 200.0)  # runner has 200 s of service: queue 1
    assert [(d.job_id, d.for_job_id) for d in res.preempted] == [("runner", "newcomer")]
    assert [p.job_id for p in res.placed] == ["newcomer"]
    # The newcomer (started by preemption) is protected: the runner cannot take it back at once.
    res = sched.cycle(state, [job("runner", 1, attained_service=0.0)], 210.0)
    assert res.preempted == []


def test_quota_maximum_is_never_exceeded() -> None:
    state = cluster(2, quotas=[Quota("vision", "default", {}, {"accelerators": 4})])
    res = Scheduler("default").cycle(state, [job(f"v{i}", 1, ws="vision", t=i) for i in range(6)], 0.0)
    assert len(res.placed) == 4
    assert res.pending["v4"] == "workspace vision is at its maximum of 4 accelerators"
    assert state.usage[("vision", "default")]["accelerators"] == 4
    big = Scheduler("default").cycle(
        cluster(2, quotas=[Quota("vision", "default", {}, {"accelerators": 4})]), [job("huge", 8, ws="vision")], 0.0
    )
    assert big.pending["huge"] == "job needs 8 accelerators, more than workspace vision's maximum of 4 accelerators"


def test_per_type_quota_checked_on_real_devices() -> None:
    from .factories import A100, V100, node

    state = ClusterState(
        [node("v", 2, gpu_type=V100), node("a", 2, gpu_type=A100)], [Quota("ws", "default", {}, {A100: 1})]
    )
    res = Scheduler({"placement": "spread"}).cycle(state, [job("x", 2), job("y", 2)], 0.0)
    assert [(p.job_id, p.placements[0].node) for p in res.placed] == [("x", "v")]
    assert res.pending["y"] == "job needs 2 nvidia-a100, more than workspace ws's maximum of 1 nvidia-a100"
    assert A100 not in state.usage[("ws", "default")] or state.usage[("ws", "default")][A100] == 0


def test_borrowing_idle_capacity_and_reclaim() -> None:
    quotas = [
        Quota("a", "default", {"accelerators": 4}, {"accelerators": 8}),
        Quota("b", "default", {"accelerators": 4}, {"accelerators": 8}),
    ]
    state = cluster(1, gpus=8, quotas=quotas)
    sched = Scheduler("default")
    # b is idle: a borrows up to its maximum of 8.
    res = sched.cycle(state, [job(f"a{i}", 1, ws="a", t=i) for i in range(10)], 0.0)
    assert len(res.placed) == 8
    assert res.pending["a8"] == "workspace a is at its maximum of 8 accelerators"
    # b wants its guarantee back: exactly the lent devices come back, newest borrowed jobs first.
    res = sched.cycle(state, [job(f"b{i}", 1, ws="b", t=100 + i) for i in range(5)], 100.0)
    assert sorted(p.job_id for p in res.placed) == ["b0", "b1", "b2", "b3"]
    assert len(res.preempted) == 4
    assert all("reclaims its guaranteed quota" in p.reason for p in res.preempted)
    assert state.usage[("a", "default")]["accelerators"] == 4
    assert state.usage[("b", "default")]["accelerators"] == 4
    # b4 would take b past its guarantee, so it may not reclaim; nothing is idle.
    assert res.pending["b4"].startswith("needs 1 accelerators on one node")
    # a is back within its guarantee: b cannot take more from it, and a cannot take back from b (no loop).
    res = sched.cycle(state, [job("a9", 1, ws="a", t=200)], 200.0)
    assert res.preempted == []
