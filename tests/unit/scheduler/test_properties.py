"""Property-based: whatever the cluster, jobs and policy, no decision oversubscribes a device, a node or a quota,
and every replica runs on a node of its job's pool (pools overlap)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicenter.scheduler import (
    BUILTIN_POLICIES,
    ClusterState,
    Job,
    Place,
    Preempt,
    Quota,
    ReplicaRequest,
    Reserve,
    Scheduler,
    Task,
)

from .factories import A100, V100, node

WORKSPACES = ("a", "b", "c")
POOLS = ("default", "a100")


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[ClusterState, list[Job], str, int]:
    n = draw(st.integers(1, 6))
    nodes = [
        node(
            f"n{i}",
            draw(st.sampled_from([1, 2, 4, 8])),
            gpu_type=draw(st.sampled_from([A100, V100])),
            leaf=f"l{i // 2}",
            spine=f"s{i // 4}",
            cpu=draw(st.sampled_from([8_000, 32_000])),
            mem=64_000,
            domains=draw(st.sampled_from([1, 2])),
            pools=draw(st.sampled_from([("default",), ("default",), POOLS, ("a100",)])),
        )
        for i in range(n)
    ]
    quotas = [
        Quota(
            ws,
            pool,
            {"accelerators": draw(st.integers(0, 6))},
            {"accelerators": draw(st.integers(1, 12)), "cpu": 40_000},
        )
        for ws in WORKSPACES
        for pool in POOLS
    ]
    jobs = []
    for k in range(draw(st.integers(1, 25))):
        kind = draw(st.sampled_from(["whole", "whole", "fraction", "cpu"]))
        if kind == "whole":
            req = ReplicaRequest(
                draw(st.sampled_from([0, 1_000, 4_000])),
                1_000,
                accelerators=draw(st.sampled_from([1, 2, 4, 8])),
                accelerator_types=draw(st.sampled_from([frozenset(), frozenset({A100})])),
            )
        elif kind == "fraction":
            req = ReplicaRequest(
                500,
                500,
                accelerator_milli=draw(st.integers(1, 999)),
                accelerator_memory_mib=draw(st.sampled_from([0, 10_000])),
            )
        else:
            req = ReplicaRequest(draw(st.integers(1, 8)) * 1_000, 1_000)
        replicas = draw(st.integers(1, 4))
        jobs.append(
            Job(
                f"j{k}",
                draw(st.sampled_from(WORKSPACES)),
                draw(st.sampled_from(["u1", "u2"])),
                draw(st.integers(0, 3)),
                float(k),
                (Task("w", replicas, req),),
                min_replicas=draw(st.sampled_from([None, 1])),
                estimate_s=draw(st.sampled_from([None, 50.0, 500.0])),
                attained_service=draw(st.sampled_from([0.0, 1e6])),
                pool=draw(st.sampled_from(["default", "default", "a100"])),
            )
        )
    policy = draw(st.sampled_from(sorted(BUILTIN_POLICIES)))
    return ClusterState(nodes, quotas), jobs, policy, draw(st.integers(0, 2**16))


def _check(state: ClusterState) -> None:
    state.check_invariants()
    for (ws, pool), used in state.usage.items():
        q = state.quota(ws, pool)
        assert q is not None
        for r, mx in q.maximum.items():
            assert used.get(r, 0.0) <= mx + 1e-9, (ws, r, used.get(r), mx)
    # Every running replica's devices exist and the free arrays add up.
    used_milli: dict[tuple[str, int], int] = {}
    for rj in state.running.values():
        for p in rj.placements:
            share = p.accelerator_milli // max(1, len(p.devices))
            for d in p.devices:
                used_milli[(p.node, d)] = used_milli.get((p.node, d), 0) + share
    for (name, d), m in used_milli.items():
        i = state.index[name]
        assert m + state.dev_free[i, state.dev_pos[i][d]] == 1000


@settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_no_decision_oversubscribes(scenario: tuple[ClusterState, list[Job], str, int]) -> None:
    state, jobs, policy, seed = scenario
    rng = random.Random(seed)
    sched = Scheduler(policy)
    pending = {j.id: j for j in jobs}
    now = 0.0
    for _ in range(4):
        res = sched.cycle(state, list(pending.values()), now)
        _check(state)
        reserved: Reserve | None = None
        for d in res.decisions:
            if isinstance(d, Reserve):
                reserved = d
            elif isinstance(d, Place):
                job = pending.pop(d.job_id)
                assert len(d.placements) >= job.gang_min  # gang: never partial
                assert all(job.pool in state.node(p.node).pools for p in d.placements)
                if reserved is not None and {p.node for p in d.placements} & set(reserved.nodes):
                    # Backfill never delays the reservation: only jobs that end before it starts use its nodes.
                    assert reserved.start_at is not None
                    assert job.estimate_s is not None
                    assert now + job.estimate_s <= reserved.start_at
            elif isinstance(d, Preempt):
                assert d.job_id not in state.running
        assert set(res.pending) == set(pending) - set(state.running)
        for jid in list(state.running):
            if rng.random() < 0.3:
                state.release(jid)
        _check(state)
        now += 100.0
