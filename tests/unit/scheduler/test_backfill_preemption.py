"""EASY backfill and reservations; preemption: minimal, gang-aware, preferences, protection."""

from __future__ import annotations

from aicenter.scheduler import ClusterState, ReplicaPlacement, Reserve, Scheduler

from .factories import cluster, job


def _run(
    state: ClusterState, jid: str, node: str, devices: tuple[int, ...], *, start: float = 0.0, **kw: object
) -> None:
    j = job(jid, len(devices), **kw)
    state.allocate(j, [ReplicaPlacement("worker", 0, node, devices, 1000 * len(devices))], start)


def test_easy_backfill_with_estimates_never_delays_the_reservation() -> None:
    state = cluster(1)
    _run(state, "r", "n0", (0, 1, 2, 3, 4, 5), estimate_s=100.0)
    jobs = [job("head", 8, t=1), job("long", 2, t=2, estimate_s=500.0), job("short", 2, t=3, estimate_s=50.0)]
    res = Scheduler({"queue_order": "fifo", "backfill": "easy", "preemption": False}).cycle(state, jobs, 0.0)
    assert [d for d in res.decisions if isinstance(d, Reserve)] == [Reserve("head", ("n0",), 100.0)]
    assert [p.job_id for p in res.placed] == ["short"]  # ends at 50 <= 100
    assert res.pending["long"] == "behind the reservation of job head"
    assert res.pending["head"] == "needs 8 accelerators on one node; the most free on one node is 2"


def test_easy_backfill_without_estimates_uses_the_shadow() -> None:
    state = cluster(2)
    _run(state, "r0", "n0", (0, 1, 2, 3))
    _run(state, "r1", "n1", (0, 1, 2, 3, 4, 5))
    jobs = [job("head", 8, t=1), job("three", 3, t=2), job("two", 2, t=3)]
    res = Scheduler({"queue_order": "fifo", "backfill": "easy", "preemption": False}).cycle(state, jobs, 0.0)
    assert [d for d in res.decisions if isinstance(d, Reserve)] == [Reserve("head", ("n0",), None)]
    assert res.pending["three"] == "behind the reservation of job head"
    assert [(p.job_id, p.placements[0].node) for p in res.placed] == [("two", "n1")]
    assert int(state.full_free_all[state.index["n0"]]) == 4  # the reservation's node is untouched


def test_greedy_backfill_runs_whatever_fits() -> None:
    state = cluster(2)
    _run(state, "r0", "n0", (0, 1, 2, 3))
    _run(state, "r1", "n1", (0, 1, 2, 3, 4, 5))
    res = Scheduler({"queue_order": "fifo", "backfill": "greedy", "preemption": False}).cycle(
        state, [job("head", 8, t=1), job("three", 3, t=2)], 0.0
    )
    assert [p.job_id for p in res.placed] == ["three"]
    assert not [d for d in res.decisions if isinstance(d, Reserve)]


def test_preemption_evicts_the_fewest_jobs() -> None:
    state = cluster(2, gpus=4)
    _run(state, "a", "n0", (0,), start=0.0)
    _run(state, "b", "n0", (1,), start=0.0)
    _run(state, "c", "n0", (2, 3), start=0.0)
    _run(state, "d", "n1", (0, 1, 2, 3), start=0.0)
    res = Scheduler("priority").cycle(state, [job("vip", 2, prio=10)], 10.0)
    assert [(p.job_id, p.for_job_id) for p in res.preempted] == [("c", "vip")]
    assert res.placed[0].placements[0].node == "n0"
    assert set(state.running) == {"a", "b", "d", "vip"}
    state.check_invariants()


def test_preemption_prefers_recent_checkpoint_and_short_runs() -> None:
    state = cluster(1, gpus=2)
    _run(state, "old", "n0", (0,), start=0.0)
    _run(state, "fresh", "n0", (1,), start=50.0, last_checkpoint_at=90.0)
    res = Scheduler("priority").cycle(state, [job("vip", 1, prio=1)], 100.0)
    assert [p.job_id for p in res.preempted] == ["fresh"]


def test_preemption_spares_non_preemptible_and_equal_priority() -> None:
    state = cluster(1, gpus=2)
    _run(state, "pinned", "n0", (0,), preemptible=False)
    _run(state, "peer", "n0", (1,), prio=5)
    res = Scheduler("priority").cycle(state, [job("vip", 1, prio=5)], 100.0)
    assert res.preempted == []
    assert res.pending["vip"] == "needs 1 accelerators on one node; the most free on one node is 0"


def test_preemption_is_gang_aware() -> None:
    state = cluster(2, gpus=1)
    gang = job("gang", 1, replicas=2)
    state.allocate(
        gang, [ReplicaPlacement("worker", 0, "n0", (0,), 1000), ReplicaPlacement("worker", 1, "n1", (0,), 1000)], 0.0
    )
    res = Scheduler("priority").cycle(state, [job("vip", 1, prio=3)], 10.0)
    assert [p.job_id for p in res.preempted] == ["gang"]
    assert int(state.full_free_all.sum()) == 1  # the whole gang left; vip holds one device
    assert state.running["vip"].by_preemption


def test_job_started_by_preemption_is_protected() -> None:
    state = cluster(1, gpus=1)
    sched = Scheduler({"queue_order": "priority", "preemption_protect_s": 300})
    _run(state, "low", "n0", (0,))
    sched.cycle(state, [job("mid", 1, prio=5)], 0.0)
    res = sched.cycle(state, [job("top", 1, prio=9)], 100.0)
    assert res.preempted == []
    res = sched.cycle(state, [job("top", 1, prio=9)], 400.0)
    assert [p.job_id for p in res.preempted] == ["mid"]
