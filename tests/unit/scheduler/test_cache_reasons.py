"""Dataset-cache affinity and eviction; pending reasons and the admission hook."""

from __future__ import annotations

from aicenter.scheduler import (
    ClusterState,
    Device,
    EvictCache,
    Job,
    Node,
    Place,
    PolicyConfig,
    ReplicaPlacement,
    ReplicaRequest,
    Scheduler,
    Task,
)

from .factories import cluster, job, node


def test_prefers_node_caching_the_dataset() -> None:
    state = ClusterState([node("n0", 8, cache=100), node("n1", 8, cache=100, cached={"ds1": 40})])
    state.allocate(job("busy", 6), [ReplicaPlacement("worker", 0, "n0", (0, 1, 2, 3, 4, 5), 6000)], 0.0)
    res = Scheduler("default").cycle(state, [job("j", 1, datasets=(("ds1", 40),))], 0.0)
    assert res.placed[0].placements[0].node == "n1"  # binpack alone would pick n0
    # Without affinity, binpack wins.
    state.release("j")
    res = Scheduler({"cache_affinity": False}).cycle(state, [job("k", 1, datasets=(("ds1", 40),))], 0.0)
    assert res.placed[0].placements[0].node == "n0"


def test_new_dataset_is_recorded_in_the_cache() -> None:
    state = ClusterState([node("n0", 8, cache=100)])
    Scheduler("default").cycle(state, [job("j", 1, datasets=(("ds", 30),))], 0.0)
    assert state.cached[0] == {"ds": 30}


def test_eviction_drops_obsolete_caches_on_the_best_node() -> None:
    state = ClusterState(
        [
            node("n0", 8, cache=100, cached={"used": 60, "old2": 30}),
            node("n1", 8, cache=100, cached={"old3": 50, "old4": 40}),
        ]
    )
    # A running job reads "used" on n0: n0 can only free 30 + 10 = 40 < 50; n1 can free 100.
    state.allocate(job("reader", 1, datasets=(("used", 60),)), [ReplicaPlacement("worker", 0, "n0", (0,), 1000)], 0.0)
    res = Scheduler("default").cycle(state, [job("j", 1, datasets=(("new", 50),))], 0.0)
    assert res.decisions[0] == EvictCache("n1", "old3")
    assert isinstance(res.decisions[1], Place)
    assert res.decisions[1].placements[0].node == "n1"
    assert state.cached[state.index["n1"]] == {"old4": 40, "new": 50}
    assert "used" in state.cached[state.index["n0"]]


def test_admission_hook_refuses_with_its_reason() -> None:
    state = cluster(1)

    def balance(j: Job) -> str | None:
        return "workspace broke has no balance left; top up to run" if j.workspace == "broke" else None

    res = Scheduler("default", admission=balance).cycle(state, [job("a", 1, ws="broke"), job("b", 1, ws="rich")], 0.0)
    assert res.pending == {"a": "workspace broke has no balance left; top up to run"}
    assert [p.job_id for p in res.placed] == ["b"]


def test_every_pending_job_has_a_reason() -> None:
    state = cluster(1, gpus=2)
    jobs = [job(f"j{i}", 1, t=i) for i in range(6)]
    res = Scheduler({"max_jobs_per_cycle": 3, "preemption": False}).cycle(state, jobs, 0.0)
    assert [p.job_id for p in res.placed] == ["j0", "j1"]
    assert set(res.pending) == {"j2", "j3", "j4", "j5"}
    assert res.pending["j2"] == "needs 1 accelerators on one node; the most free on one node is 0"
    assert res.pending["j5"].startswith("waiting in the queue: not among the jobs examined")


def test_reasons_for_cordoned_and_missing_pool() -> None:
    state = cluster(1)
    state.set_node_state("n0", "cordoned")
    res = Scheduler("default").cycle(state, [job("a", 1), job("b", 1, pool="gpu-h100")], 0.0)
    assert res.pending["a"] == "no node of pool default is ready: 1 cordoned or down"
    assert res.pending["b"] == "pool gpu-h100 has no node"
    state.set_node_state("n0", "ready")
    res = Scheduler("default").cycle(state, [job("a", 1)], 0.0)
    assert len(res.placed) == 1


def test_fraction_reason() -> None:
    state = cluster(1, gpus=1)
    state.allocate(job("x", milli=800), [ReplicaPlacement("worker", 0, "n0", (0,), 800)], 0.0)
    res = Scheduler("default").cycle(state, [job("f", milli=500)], 0.0)
    assert res.pending["f"] == (
        "needs 0.5 of one accelerator with 0 MiB device memory; the most free on one device is 0.2"
    )


def test_cpu_shortfall_next_to_a_free_fraction_is_named() -> None:
    # n0 has the GPU share but only 8 cores left; n1 has the cores but no GPU free.
    state = ClusterState([node("n0", 1, cpu=8_000), node("n1", 1, cpu=64_000)])
    state.allocate(job("gpu", 1, cpu=0), [ReplicaPlacement("worker", 0, "n1", (0,), 1000)], 0.0)
    res = Scheduler("default").cycle(state, [job("t", milli=810, cpu=12_000)], 1.0)
    assert res.pending["t"] == (
        "needs 12 CPUs and 0.81 of one accelerator on one node; the most CPUs free on a node with such an "
        "accelerator is 8"
    )


def test_reason_names_cpu_and_memory_when_no_node_has_both() -> None:
    """One node has the CPUs, the other the memory, both have a device share: the reason says so."""
    gpu = (Device(0, "t4", 16_000, None),)
    nodes = [
        Node("cpu-rich", cpu_milli=32_000, memory_mib=4_000, devices=gpu),
        Node("mem-rich", cpu_milli=2_000, memory_mib=64_000, devices=gpu),
    ]
    request = ReplicaRequest(cpu_milli=8_000, memory_mib=16_000, accelerator_milli=500)
    job = Job("j1", "ws", "u", 0, 0.0, (Task("worker", 1, request),))
    result = Scheduler(PolicyConfig.load("default")).cycle(ClusterState(nodes), [job], 0.0)
    reason = result.pending["j1"]
    assert "together on one node" in reason
    assert "none has both" in reason
