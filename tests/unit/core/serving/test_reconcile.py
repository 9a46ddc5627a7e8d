"""``decide_service``: a revision that becomes ready keeps its replica for the scale-to-zero grace."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from aicenter.core.serving.autoscale import ScalePolicy
from aicenter.core.serving.reconcile import ReplicaSnapshot, RevisionSnapshot, ServiceSnapshot, decide_service
from aicenter.core.serving.spec import RevisionState, ServiceStatus

NOW = datetime(2026, 1, 1, tzinfo=UTC)


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
