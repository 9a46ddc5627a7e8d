"""Overlapping pools: a node serves every pool it belongs to; quotas, capacity and reasons stay per pool."""

from __future__ import annotations

from aicenter.scheduler import ClusterState, Quota, ReplicaPlacement, Scheduler

from .factories import job, node, nodes_of

SHARED = ("default", "a100")


def test_a_node_in_two_pools_takes_the_jobs_of_both() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED)])
    res = Scheduler("default").cycle(state, [job("d", 2, pool="default"), job("a", 2, pool="a100")], 0.0)
    assert sorted((p.job_id, p.placements[0].node) for p in res.placed) == [("a", "n0"), ("d", "n0")]
    assert dict(res.pending) == {}
    state.check_invariants()


def test_a_job_runs_only_on_members_of_its_pool() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED), node("n1", 8, pools=("default",))])
    res = Scheduler("default").cycle(state, [job("a1", 8, pool="a100", t=0), job("a2", 8, pool="a100", t=1)], 0.0)
    assert [(p.job_id, nodes_of(p.placements)) for p in res.placed] == [("a1", ["n0"])]
    assert res.pending["a2"] == "needs 8 accelerators on one node; the most free on one node is 0"  # n1 is not a100
    res = Scheduler("default").cycle(state, [job("d", 8, pool="default")], 0.0)
    assert nodes_of(res.placed[0].placements) == ["n1"]


def test_capacity_of_overlapping_pools_counts_a_shared_node_in_each() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED), node("n1", 4, pools=("default",))])
    assert state.capacity("default")["accelerators"] == 12
    assert state.capacity("a100")["accelerators"] == 8
    assert state.capacity("nope")["accelerators"] == 0


def test_quotas_count_per_pool_on_a_shared_node() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED)], [Quota("ws", "a100", {}, {"accelerators": 2})])
    res = Scheduler("default").cycle(
        state,
        [job("d", 6, pool="default", t=0), job("a", 2, pool="a100", t=1), job("a-more", 1, pool="a100", t=2)],
        0.0,
    )
    assert sorted(p.job_id for p in res.placed) == ["a", "d"]  # the default job is not charged to the a100 quota
    assert res.pending["a-more"] == "workspace ws is at its maximum of 2 accelerators"
    assert state.usage[("ws", "default")]["accelerators"] == 6
    assert state.usage[("ws", "a100")]["accelerators"] == 2


def test_reasons_name_the_pool_with_no_node_or_no_ready_node() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED)])
    state.set_node_state("n0", "down")
    res = Scheduler("default").cycle(state, [job("a", 1, pool="a100"), job("h", 1, pool="h100")], 0.0)
    assert res.pending["a"] == "no node of pool a100 is ready: 1 cordoned or down"
    assert res.pending["h"] == "pool h100 has no node"


def test_a_higher_priority_job_preempts_a_job_of_another_pool_on_a_shared_node() -> None:
    state = ClusterState([node("n0", 8, pools=SHARED), node("b0", 8, pools=("b",))])
    low = job("low-a100", 8, pool="a100")
    state.allocate(low, [ReplicaPlacement("worker", 0, "n0", tuple(range(8)), 8000)], 0.0)
    elsewhere = job("low-b", 8, pool="b")
    state.allocate(elsewhere, [ReplicaPlacement("worker", 0, "b0", tuple(range(8)), 8000)], 0.0)
    res = Scheduler("priority").cycle(state, [job("vip", 8, prio=10, pool="default")], 10.0)
    assert [(p.job_id, p.for_job_id) for p in res.preempted] == [("low-a100", "vip")]
    assert nodes_of(res.placed[0].placements) == ["n0"]
    assert "low-b" in state.running  # not on a node of the default pool: never a victim


def test_reclaim_stays_within_one_pool() -> None:
    quotas = [Quota("b", "default", {"accelerators": 4}, {"accelerators": 8})]
    state = ClusterState([node("n0", 8, pools=SHARED)], quotas)
    for i in range(8):  # workspace a borrows the whole node, in pool a100 (no quota there: all of it is borrowed)
        state.allocate(job(f"a{i}", 1, ws="a", pool="a100"), [ReplicaPlacement("worker", 0, "n0", (i,), 1000)], 0.0)
    res = Scheduler("default").cycle(state, [job("b0", 1, ws="b", pool="default")], 10.0)
    assert res.preempted == []
    assert res.pending["b0"] == "needs 1 accelerators on one node; the most free on one node is 0"
