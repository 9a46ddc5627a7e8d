"""The per-cycle placement memo never changes a decision (compared with the memo off)."""

from __future__ import annotations

import random

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicenter.scheduler import (
    BUILTIN_POLICIES,
    ClusterState,
    Job,
    Quota,
    ReplicaPlacement,
    ReplicaRequest,
    Scheduler,
    Task,
)
from aicenter.scheduler.memo import PlacementMemo

from .factories import A100, V100, cluster, job, node

WORKSPACES = ("a", "b", "c")
# random-fit draws from a generator on successful placements; the memo skips placements whose outcome it
# knows, so the stream (not the rule) differs. Every other policy is deterministic.
POLICIES = sorted(set(BUILTIN_POLICIES) - {"random-fit"})

_REQUESTS = st.one_of(
    st.builds(
        lambda cpu, acc, types: ReplicaRequest(cpu, 1_000, accelerators=acc, accelerator_types=types),
        st.sampled_from([0, 1_000, 4_000, 24_000]),
        st.sampled_from([1, 2, 4, 8]),
        st.sampled_from([frozenset(), frozenset({A100})]),
    ),
    st.builds(
        lambda cpu, milli, dm: ReplicaRequest(cpu, 500, accelerator_milli=milli, accelerator_memory_mib=dm),
        st.sampled_from([500, 6_000]),
        st.sampled_from([250, 500, 810]),
        st.sampled_from([0, 10_000]),
    ),
    st.builds(lambda c: ReplicaRequest(c * 1_000, 1_000), st.integers(1, 8)),
)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[object], list[Quota], list[Job], str, int]:
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
        )
        for i in range(n)
    ]
    quotas = []
    if draw(st.booleans()):
        quotas = [
            Quota(ws, "default", {"accelerators": draw(st.integers(0, 6))}, {"accelerators": draw(st.integers(1, 12))})
            for ws in WORKSPACES
        ]
    # Few shapes, many jobs: the memo's case (identical and dominated shapes in one cycle).
    shapes = draw(st.lists(_REQUESTS, min_size=1, max_size=4))
    jobs = []
    for k in range(draw(st.integers(1, 30))):
        tasks = [Task("w", draw(st.integers(1, 4)), draw(st.sampled_from(shapes)))]
        if draw(st.integers(0, 5)) == 0:
            tasks.append(Task("ps", 1, draw(st.sampled_from(shapes))))
        jobs.append(
            Job(
                f"j{k}",
                draw(st.sampled_from(WORKSPACES)),
                draw(st.sampled_from(["u1", "u2"])),
                draw(st.integers(0, 2)),
                float(k),
                tuple(tasks),
                min_replicas=draw(st.sampled_from([None, None, 1])),
                estimate_s=draw(st.sampled_from([None, 50.0, 500.0])),
                attained_service=draw(st.sampled_from([0.0, 1e6])),
            )
        )
    return nodes, quotas, jobs, draw(st.sampled_from(POLICIES)), draw(st.integers(0, 2**16))


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(scenarios())
def test_memo_does_not_change_decisions(scenario: tuple[list[object], list[Quota], list[Job], str, int]) -> None:
    nodes, quotas, jobs, policy, seed = scenario
    runs = []
    for memoize in (True, False):
        state = ClusterState(nodes, quotas)  # type: ignore[arg-type]
        sched = Scheduler(policy, memoize=memoize)
        rng = random.Random(seed)
        pending = {j.id: j for j in jobs}
        trace = []
        now = 0.0
        for _ in range(4):
            res = sched.cycle(state, list(pending.values()), now)
            trace.append((res.decisions, sorted(res.pending)))
            assert all(res.pending.values())
            for d in res.decisions:
                pending.pop(getattr(d, "job_id", ""), None)
            for jid in sorted(state.running):
                if rng.random() < 0.3:
                    state.release(jid)
            now += 100.0
        runs.append(trace)
    assert runs[0] == runs[1]


def test_failure_holds_across_placements_and_dominates() -> None:
    state = cluster(2, 8, leaf_size=2)
    memo = PlacementMemo(state, gang=True, cache=False)
    small, big = job("s", 8, 3), job("b", 8, 4)
    memo.record_failure(memo.shape(small), False, "needs 24")
    state.allocate(job("x", 1), [ReplicaPlacement("worker", 0, "n0", (0,), 1000)], 0.0)  # capacity only shrank
    assert memo.failure(memo.shape(small), False) == (True, "needs 24")
    assert memo.failure(memo.shape(big), False) == (True, None)  # bigger in every dimension
    assert memo.failure(memo.shape(job("c", 4, 3)), False) == (False, None)  # smaller: unknown
    assert memo.failure(memo.shape(small), True) == (True, "needs 24")  # all nodes -> outside a reservation


def test_release_forgets_failures() -> None:
    state = cluster(1, 8)
    s = Scheduler("fifo")
    first = s.cycle(state, [job("a", 8), job("b", 8)], 0.0)
    assert "b" in first.pending
    memo = PlacementMemo(state, gang=True, cache=False)
    memo.record_failure(memo.shape(job("b", 8)), False, "full")
    state.release("a")
    assert memo.failure(memo.shape(job("b", 8)), False) == (False, None)


def test_preemption_inside_the_cycle_invalidates_the_memo() -> None:
    # h1 fails, preempts the 8-GPU low-priority job and takes 4 GPUs; h2, of the same shape, now fits.
    state = cluster(1, 8)
    s = Scheduler("priority")
    s.cycle(state, [job("low", 8, prio=0)], 0.0)
    res = s.cycle(state, [job("h1", 4, prio=5, t=1.0), job("h2", 4, prio=5, t=2.0)], 10.0)
    kinds = [(type(d).__name__, d.job_id) for d in res.decisions]  # type: ignore[attr-defined]
    assert kinds == [("Preempt", "low"), ("Place", "h1"), ("Place", "h2")]
    assert res.pending == {}
