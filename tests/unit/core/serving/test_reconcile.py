"""The serving controller's decisions (``decide_service``, pure): traffic tick after tick, and a revision that
becomes ready keeps its replica for the scale-to-zero grace."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from aicenter.core.serving.autoscale import ScalePolicy
from aicenter.core.serving.reconcile import ReplicaSnapshot, RevisionSnapshot, ServiceSnapshot, decide_service
from aicenter.core.serving.spec import RevisionState, Rollout, RolloutStrategy, ServiceStatus

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
POLICY = ScalePolicy(
    min_replicas=1, max_replicas=1, target_concurrency=8, scale_to_zero_grace_s=300, stable_window_s=60
)


def _revision(rid: int, traffic: int, *, header: str, rollout: Rollout | None = None) -> RevisionSnapshot:
    return RevisionSnapshot(
        id=rid, number=rid, state=RevisionState.READY, traffic=traffic, target_traffic=100,
        created_at=NOW - timedelta(minutes=10), policy=POLICY, rollout=rollout or Rollout(), header_value=header,
        traffic_changed_at=NOW - timedelta(minutes=1), ready_at=NOW - timedelta(minutes=5),
    )  # fmt: skip


def _tick(service: ServiceSnapshot, now: datetime) -> ServiceSnapshot:
    """The service after one decision is written."""
    decision = decide_service(service, now=now, clock=now.timestamp(), load={}, held={}, scale_states={})
    revisions = []
    for rev in service.revisions:
        change = decision.revisions.get(rev.id)
        if change is not None:
            rev = replace(
                rev,
                state=change.state or rev.state,
                traffic=rev.traffic if change.traffic is None else change.traffic,
                target_traffic=rev.target_traffic if change.target_traffic is None else change.target_traffic,
                traffic_changed_at=now if change.traffic not in (None, rev.traffic) else rev.traffic_changed_at,
            )
        revisions.append(rev)
    return replace(
        service,
        revisions=tuple(revisions),
        stable_revision_id=decision.stable_revision_id or service.stable_revision_id,
    )


def test_a_revision_kept_for_its_ab_header_does_not_take_the_traffic_back() -> None:
    """Steps from revision 1 (A/B value "a") to revision 2 (value "b"): once 2 holds everything, 1 stays for its
    header only, and the traffic stays on 2 tick after tick."""
    steps = Rollout(strategy=RolloutStrategy.STEPS, step_percent=50, step_interval_s=3)
    service = ServiceSnapshot(
        id=1, status=ServiceStatus.UPDATING, stopped=False, stable_revision_id=1,
        revisions=(_revision(1, 50, header="a"), _revision(2, 50, header="b", rollout=steps)),
    )  # fmt: skip
    seen = []
    for second in range(10):
        service = _tick(service, NOW + timedelta(seconds=second))
        seen.append([(r.state.value, r.traffic) for r in service.revisions])
    assert seen[0] == [("ready", 0), ("ready", 100)]
    assert all(step == seen[0] for step in seen), seen
    assert service.stable_revision_id == 2
    assert [r.target_traffic for r in service.revisions] == [0, 100]


def _service(**revision: object) -> ServiceSnapshot:
    fields: dict[str, object] = {
        "id": 7,
        "number": 1,
        "state": RevisionState.STARTING,
        "traffic": 0,
        "target_traffic": 100,
        "created_at": NOW - timedelta(seconds=30),
        "policy": ScalePolicy(min_replicas=0, max_replicas=3, scale_to_zero_grace_s=300),
        "replicas": (ReplicaSnapshot(job_id=1, active=True, ready=True, created_at=NOW - timedelta(seconds=30)),),
        **revision,
    }
    return ServiceSnapshot(
        id=1,
        status=ServiceStatus.DEPLOYING,
        stopped=False,
        stable_revision_id=None,
        revisions=(RevisionSnapshot(**fields),),  # type: ignore[arg-type]
    )


def test_a_revision_ready_on_this_tick_is_not_scaled_to_zero_at_once() -> None:
    decision = decide_service(_service(), now=NOW, clock=1000.0, load={}, held={}, scale_states={})
    change = decision.revisions[7]
    assert (change.state, change.traffic, change.desired) == (RevisionState.READY, 100, 1)
    assert decision.reasons[7] == "grace"
    assert decision.drain == []


def test_an_idle_ready_revision_scales_to_zero_after_its_grace() -> None:
    long_ago = NOW - timedelta(hours=1)
    service = _service(state=RevisionState.READY, traffic=100, ready_at=long_ago, last_request_at=long_ago)
    decision = decide_service(service, now=NOW, clock=1000.0, load={}, held={}, scale_states={})
    assert (decision.revisions[7].desired, decision.reasons[7]) == (0, "to-zero")
    assert decision.drain == [1]
