"""Placement: gang, accelerator types, strategies, topology, fractional packing."""

from __future__ import annotations

from aicenter.scheduler import ClusterState, PolicyConfig, ReplicaPlacement, Scheduler

from .factories import A100, V100, cluster, job, node, nodes_of


def _hold(state: ClusterState, jid: str, node_name: str, devices: tuple[int, ...], milli: int = 0) -> None:
    """Occupy devices with a running job (a fraction when ``milli``)."""
    j = job(jid, len(devices), milli=milli, cpu=0, mem=0)
    share = milli or 1000 * len(devices)
    state.allocate(j, [ReplicaPlacement("worker", 0, node_name, devices, share)], 0.0)


def _place(policy: str | dict[str, object], state: ClusterState, *jobs: object):  # type: ignore[no-untyped-def]
    return Scheduler(PolicyConfig.load(policy)).cycle(state, list(jobs), 1.0)  # type: ignore[arg-type]


def test_gang_is_all_or_nothing() -> None:
    state = cluster(2)
    res = _place("default", state, job("big", 8, replicas=3))
    assert res.placed == []
    assert res.pending["big"] == "needs 24 accelerators in replicas of 8; 16 usable of 16 free in the pool"
    assert state.running == {}
    assert int(state.full_free_all.sum()) == 16
    state.check_invariants()


def test_gang_minimum_places_at_least_min_replicas() -> None:
    state = cluster(2)
    res = _place("default", state, job("elastic", 8, replicas=3, min_replicas=2))
    assert [len(p.placements) for p in res.placed] == [2]


def test_accelerator_type_matching() -> None:
    state = ClusterState([node("v", 8, gpu_type=V100), node("a", 8, gpu_type=A100)])
    res = _place("default", state, job("j", 2, types={A100}), job("k", 1, types={"nvidia-h100"}))
    assert nodes_of(res.placed[0].placements) == ["a"]
    assert res.pending["k"] == "no node in the cluster has accelerator type nvidia-h100"
    assert state.usage[("ws", "default")][A100] == 2


def test_binpack_and_spread() -> None:
    for policy, expected in (("default", "n0"), ({"placement": "spread"}, "n1")):
        state = cluster(2)
        _hold(state, "busy", "n0", (0, 1, 2, 3, 4, 5))
        res = _place(policy, state, job("j", 1))
        assert nodes_of(res.placed[0].placements) == [expected], policy


def test_best_fit_uses_normalised_leftover() -> None:
    state = ClusterState([node("roomy", 8, cpu=64_000), node("tight", 8, cpu=8_000)])
    res = _place("best-fit", state, job("j", 1, cpu=8_000))
    assert nodes_of(res.placed[0].placements) == ["tight"]


def test_random_fit_is_seeded() -> None:
    picks = set()
    for seed in (1, 2, 3, 4, 5, 6):
        state = cluster(8)
        res = _place({"base": "random-fit", "seed": seed}, state, job("j", 1))
        picks.add(res.placed[0].placements[0].node)
    assert len(picks) > 1
    again = [
        _place({"base": "random-fit", "seed": 3}, cluster(8), job("j", 1)).placed[0].placements[0].node
        for _ in range(2)
    ]
    assert again[0] == again[1]


def test_topology_same_node_first() -> None:
    state = cluster(8)
    res = _place("default", state, job("j", 4, replicas=2))
    assert nodes_of(res.placed[0].placements) == ["n0", "n0"]


def test_topology_nvlink_domain() -> None:
    state = ClusterState([node("n", 8, domains=2)])
    _hold(state, "one", "n", (0,))
    res = _place("default", state, job("j", 4))
    assert res.placed[0].placements[0].devices == (4, 5, 6, 7)


def test_topology_same_leaf_before_spreading() -> None:
    state = cluster(16)  # leaves l0..l3 of 4 nodes; spines s0 = l0+l1, s1 = l2+l3
    _hold(state, "x", "n1", (0,))  # leaf l0 has only 3 whole nodes left
    res = _place("default", state, job("j", 8, replicas=4))
    assert nodes_of(res.placed[0].placements) == ["n4", "n5", "n6", "n7"]


def test_topology_same_spine_before_cluster() -> None:
    state = cluster(16)
    for name in ("n1", "n2", "n5", "n13"):
        _hold(state, name + "x", name, (0,))
    # 5 whole nodes: no leaf has them; spine s0 (l0 + l1) has 2 + 3, s1 has 4 + 3. Binpack takes the
    # tighter spine, and inside it the roomier leaf first.
    res = _place("default", state, job("j", 8, replicas=5))
    assert nodes_of(res.placed[0].placements) == ["n4", "n6", "n7", "n0", "n3"]


def test_topology_limit_gives_reason() -> None:
    state = cluster(8)
    res = _place({"topology_limit": "leaf"}, state, job("j", 8, replicas=5, types={A100}))
    assert res.pending["j"] == "needs 40 nvidia-a100 under one leaf; the most free under one leaf is 32"


def test_fraction_goes_to_the_exact_fit() -> None:
    for policy in ("default", "best-fit", "fgd"):
        state = ClusterState([node("n", 4)])
        _hold(state, "a", "n", (1,), milli=700)
        res = _place(policy, state, job("f", milli=300))
        assert res.placed[0].placements[0].devices == (1,), policy
        assert res.placed[0].placements[0].accelerator_milli == 300
    state = ClusterState([node("n", 4)])
    _hold(state, "a", "n", (1,), milli=700)
    res = _place({"fractional_placement": "spread"}, state, job("f", milli=300))
    assert res.placed[0].placements[0].devices == (0,)


def test_fgd_keeps_devices_usable_for_the_common_size() -> None:
    # Device 0 has 600 free, device 1 has 500. The workload is mostly 500-milli tasks.
    classes = [{"accelerator_milli": 500, "weight": 9}, {"accelerator_milli": 100, "weight": 1}]
    fgd = {"base": "fgd", "fgd_task_classes": classes}
    state = ClusterState([node("n", 2)])
    _hold(state, "a", "n", (0,), milli=400)
    _hold(state, "b", "n", (1,), milli=500)
    # best-fit takes the tightest device (1) and leaves 400 there that no 500-task can use;
    # FGD takes device 0 (600 -> 500) and both devices still fit a 500-task.
    assert _place("best-fit", state, job("f", milli=100)).placed[0].placements[0].devices == (1,)
    state.release("f")
    assert _place(fgd, state, job("g", milli=100)).placed[0].placements[0].devices == (0,)


def test_fgd_learns_the_distribution() -> None:
    sched = Scheduler("fgd")
    state = ClusterState([node("n", 2)])
    sched.cycle(state, [job(f"j{i}", milli=500, cpu=0, mem=0) for i in range(3)], 0.0)
    assert len(sched.distribution) == 1
    assert state.dev_free.tolist() == [[0, 500]]


def test_many_fractions_pack_one_device() -> None:
    state = cluster(2)
    res = _place("default", state, *[job(f"f{i}", milli=250) for i in range(4)])
    assert {p.placements[0].node for p in res.placed} == {"n0"}
    assert {p.placements[0].devices for p in res.placed} == {(0,)}
    assert int(state.full_free_all.sum()) == 15


def test_cpu_only_job() -> None:
    state = cluster(1)
    res = _place("default", state, job("c", 0, cpu=4_000, mem=1_000))
    assert res.placed[0].placements[0].devices == ()
    res = _place("default", state, job("d", 0, cpu=100_000))
    assert res.pending["d"] == "needs 100 cpu on one node; the most free on one node is 60"


def test_pools_are_separate() -> None:
    state = ClusterState([node("a0", 8, pools=("a",)), node("b0", 8, pools=("b",))])
    res = _place("default", state, job("j", 8, pool="b"), job("k", 8, pool="b"))
    assert nodes_of(res.placed[0].placements) == ["b0"]
    assert res.pending["k"] == "needs 8 accelerators on one node; the most free on one node is 0"


def test_gang_off_starts_what_fits() -> None:
    state = cluster(2)
    res = _place({"gang": False}, state, job("j", 8, replicas=3))
    assert [len(p.placements) for p in res.placed] == [2]


def test_stale_pending_entry_is_ignored() -> None:
    state = cluster(1)
    sched = Scheduler("default")
    first = job("j", 1)
    sched.cycle(state, [first], 0.0)
    res = sched.cycle(state, [first], 1.0)
    assert res.decisions == []
    assert res.pending == {}
