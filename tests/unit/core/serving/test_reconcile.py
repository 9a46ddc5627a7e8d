"""The serving controller's traffic decisions tick after tick (``decide_service``, pure)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from aicenter.core.serving.autoscale import ScalePolicy
from aicenter.core.serving.reconcile import RevisionSnapshot, ServiceSnapshot, decide_service
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
