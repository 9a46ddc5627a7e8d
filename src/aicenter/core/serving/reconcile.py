"""The serving controller's decision, pure: from one service's snapshot to what to change.

Per service, every tick:

1. **Readiness.** A starting revision becomes ``ready`` when one of its replicas answered its readiness probe;
   it ``fails`` when a replica of it ended before any was ready, or when it was not ready within its
   ``ready_timeout_s``. A failed revision takes no traffic, and the revision that served before keeps serving.
2. **Traffic.** A ready revision moves toward its ``target_traffic``: at once (rollout ``all``, ``canary``) or by
   ``step_percent`` every ``step_interval_s`` (``steps``); the rest of the traffic stays with the stable revision.
   When a revision holds all the traffic it becomes the stable one and the others are retired (those with an A/B
   header value stay, for their header only).
3. **Replicas.** A ready revision with traffic (or a header that routes to it) is scaled by the autoscaler's
   decision (``autoscale.decide_scale``); a starting one runs its floor (at least one, to show it can become
   ready); a retired or failed one runs none, and a stopped service none at all.
4. **Drain.** A replica taken out (scale-down, retirement) is first marked draining: the gateways stop sending it
   requests within a refresh or two, and its job is stopped ``drain_s`` later; the stop lets the requests in
   flight finish (the model server finishes them on SIGTERM). Replicas that are not ready go first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from aicenter.core.serving.autoscale import ConcurrencySample, ScalePolicy, ScaleState, decide_scale
from aicenter.core.serving.spec import RevisionState, Rollout, RolloutStrategy, ServiceStatus

__all__ = [
    "DRAIN_S",
    "ReplicaSnapshot",
    "RevisionChange",
    "RevisionSnapshot",
    "ServiceDecision",
    "ServiceSnapshot",
    "decide_service",
]

DRAIN_S = 3.0
"""From draining to the replica's stop: long enough for every gateway to refresh its table (every second) and
stop choosing it."""


@dataclass(frozen=True, slots=True)
class ReplicaSnapshot:
    """One replica (a job of kind service).

    Attributes:
        job_id: Its job.
        active: Its job has not finished.
        ready: It answered its readiness probe.
        draining_since: When it was taken out of routing (None: it is routed to).
        message: Its job's last word when it finished (why it failed).
        created_at: When it was started.
    """

    job_id: int
    active: bool
    ready: bool
    draining_since: datetime | None = None
    message: str = ""
    created_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class RevisionSnapshot:
    id: int
    number: int
    state: RevisionState
    traffic: int
    target_traffic: int
    created_at: datetime
    policy: ScalePolicy
    rollout: Rollout = field(default_factory=Rollout)
    ready_timeout_s: float = 600.0
    header_value: str = ""
    replicas: tuple[ReplicaSnapshot, ...] = ()
    traffic_changed_at: datetime | None = None
    last_request_at: datetime | None = None  # the gateways' latest report, or an activation from zero
    ready_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class ServiceSnapshot:
    id: int
    status: ServiceStatus
    stopped: bool
    stable_revision_id: int | None
    revisions: tuple[RevisionSnapshot, ...]


@dataclass(slots=True)
class RevisionChange:
    """What changes on one revision (None: unchanged)."""

    state: RevisionState | None = None
    traffic: int | None = None
    target_traffic: int | None = None
    desired: int | None = None
    message: str | None = None


@dataclass(slots=True)
class ServiceDecision:
    """What to do to one service now.

    Attributes:
        start: Replicas to start, per revision id.
        drain: Replica jobs to take out of routing.
        stop: Replica jobs to stop (drained long enough).
        forget: Replica jobs that ended: unlink them (their job stays, with its machine time).
        revisions: Changes per revision id.
        status / message: The service's status and its word for people.
        stable_revision_id: The revision that now holds all traffic, when it changed.
        scale_states: The autoscaler's memory per revision id, for the next tick.
        reasons: The autoscaler's reason per revision id (for events).
    """

    start: dict[int, int] = field(default_factory=dict)
    drain: list[int] = field(default_factory=list)
    stop: list[int] = field(default_factory=list)
    forget: list[int] = field(default_factory=list)
    revisions: dict[int, RevisionChange] = field(default_factory=dict)
    status: ServiceStatus | None = None
    message: str | None = None
    stable_revision_id: int | None = None
    scale_states: dict[int, ScaleState] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)


def _change(decision: ServiceDecision, revision_id: int) -> RevisionChange:
    return decision.revisions.setdefault(revision_id, RevisionChange())


def _readiness(rev: RevisionSnapshot, now: datetime, decision: ServiceDecision) -> RevisionState:
    if rev.state is not RevisionState.STARTING:
        return rev.state
    if any(r.active and r.ready and r.draining_since is None for r in rev.replicas):
        _change(decision, rev.id).state = RevisionState.READY
        return RevisionState.READY
    ended = [r for r in rev.replicas if not r.active and r.draining_since is None]
    if ended:
        why = ended[0].message or "it ended before it was ready"
        return _fail(rev, decision, f"revision {rev.number} failed: its replica ended before it was ready: {why}")
    if now - rev.created_at > timedelta(seconds=rev.ready_timeout_s):
        return _fail(rev, decision, f"revision {rev.number} failed: not ready after {rev.ready_timeout_s:.0f} s")
    return RevisionState.STARTING


def _fail(rev: RevisionSnapshot, decision: ServiceDecision, message: str) -> RevisionState:
    change = _change(decision, rev.id)
    change.state, change.message, change.traffic, change.target_traffic = RevisionState.FAILED, message, 0, 0
    return RevisionState.FAILED


def _move_traffic(
    service: ServiceSnapshot, states: Mapping[int, RevisionState], now: datetime, decision: ServiceDecision
) -> dict[int, int]:
    """Each revision's traffic after this tick; the stable revision takes what the others do not."""
    traffic = {r.id: r.traffic for r in service.revisions}
    for rev in service.revisions:
        state = states[rev.id]
        if state in (RevisionState.FAILED, RevisionState.RETIRED):
            traffic[rev.id] = 0
        elif state is RevisionState.READY and rev.traffic < rev.target_traffic:
            if rev.rollout.strategy is RolloutStrategy.STEPS and rev.traffic > 0:
                last = rev.traffic_changed_at or rev.created_at
                if now - last >= timedelta(seconds=rev.rollout.step_interval_s):
                    traffic[rev.id] = min(rev.target_traffic, rev.traffic + rev.rollout.step_percent)
            elif rev.rollout.strategy is RolloutStrategy.STEPS:
                traffic[rev.id] = min(rev.target_traffic, rev.rollout.step_percent)
            else:
                traffic[rev.id] = rev.target_traffic
    movers = {r.id for r in service.revisions if r.id != service.stable_revision_id}
    stable = service.stable_revision_id
    if stable is not None and stable in traffic and states[stable] is RevisionState.READY:
        traffic[stable] = max(0, 100 - sum(traffic[i] for i in movers))
    elif sum(traffic.values()) != 100:
        # No stable revision serves (the first deploy, or it failed): the newest ready one takes it all.
        ready = [r for r in service.revisions if states[r.id] is RevisionState.READY]
        if ready:
            for i in traffic:
                traffic[i] = 0
            traffic[max(ready, key=lambda r: r.number).id] = 100
    for rev in service.revisions:
        if traffic[rev.id] != rev.traffic:
            _change(decision, rev.id).traffic = traffic[rev.id]
    full = [i for i, t in traffic.items() if t == 100 and states[i] is RevisionState.READY]
    if full and full[0] != stable:
        decision.stable_revision_id = full[0]
    holder = full[0] if full else None
    if holder is not None:
        # One revision holds everything: the others that served are done.
        for rev in service.revisions:
            if rev.id == holder or states[rev.id] is not RevisionState.READY:
                continue  # one still starting keeps its chance
            if not rev.header_value:
                change = _change(decision, rev.id)
                change.state, change.traffic, change.target_traffic = RevisionState.RETIRED, 0, 0
            elif rev.target_traffic > 0:
                # A revision routed to by its A/B header value stays, for its header only: left with its old
                # target it would take the traffic back at the next tick, and the two would swap forever.
                _change(decision, rev.id).target_traffic = 0
    return traffic


def decide_service(
    service: ServiceSnapshot,
    *,
    now: datetime,
    clock: float,
    load: Mapping[int, Sequence[ConcurrencySample]],
    held: Mapping[int, int],
    scale_states: Mapping[int, ScaleState],
) -> ServiceDecision:
    """What to do to one service now.

    Args:
        service: The snapshot.
        now: Wall-clock time (revision and replica times are on it).
        clock: The load samples' clock (seconds) at ``now``.
        load: Concurrency samples per revision id (all gateways summed).
        held: Requests the gateways hold for each revision id right now.
        scale_states: The autoscaler's memory per revision id.
    """
    decision = ServiceDecision()
    states = {rev.id: _readiness(rev, now, decision) for rev in service.revisions}
    traffic = _move_traffic(service, states, now, decision)
    for rev_id, change in decision.revisions.items():
        if change.state is not None:
            states[rev_id] = change.state

    for rev in service.revisions:
        state = states[rev.id]
        live = [r for r in rev.replicas if r.active and r.draining_since is None]
        decision.forget += [r.job_id for r in rev.replicas if not r.active]
        decision.stop += [
            r.job_id
            for r in rev.replicas
            if r.active and r.draining_since is not None and (now - r.draining_since).total_seconds() >= DRAIN_S
        ]
        routed = traffic[rev.id] > 0 or bool(rev.header_value) or held.get(rev.id, 0) > 0
        if service.stopped or state in (RevisionState.FAILED, RevisionState.RETIRED):
            desired = 0
        elif state is RevisionState.STARTING:
            desired = max(1, rev.policy.min_replicas)
        elif not routed:
            desired = 0
        else:
            ready = sum(1 for r in live if r.ready)
            scaled = decide_scale(
                load.get(rev.id, ()),
                ready=ready,
                now=clock,
                policy=rev.policy,
                # No ready_at yet: it became ready on this tick (the snapshot predates it).
                state=_scale_state(rev, scale_states.get(rev.id), now=now, clock=clock, ready_at=rev.ready_at or now),
                held=held.get(rev.id, 0),
            )
            decision.scale_states[rev.id] = scaled.state
            decision.reasons[rev.id] = scaled.reason
            desired = scaled.desired
        _change(decision, rev.id).desired = desired
        if len(live) < desired:
            decision.start[rev.id] = desired - len(live)
        elif len(live) > desired:
            # Not-ready replicas go first (they serve nothing), then the newest.
            order = sorted(live, key=lambda r: (r.ready, -(r.created_at or now).timestamp()))
            decision.drain += [r.job_id for r in order[: len(live) - desired]]

    decision.status, decision.message = _status(service, states, traffic)
    return decision


def _scale_state(
    rev: RevisionSnapshot, kept: ScaleState | None, *, now: datetime, clock: float, ready_at: datetime
) -> ScaleState:
    """The autoscaler's memory, with the last request the database knows of (an activation from zero comes
    before any load report; a controller that just took over knows nothing else). A revision that just became
    ready counts as just used: it gets its whole grace before scaling to zero."""
    state = kept or ScaleState()
    seen = [t for t in (rev.last_request_at, ready_at) if t is not None]
    at = clock - (now - max(seen)).total_seconds()
    if state.last_request_at is None or at > state.last_request_at:
        return ScaleState(state.panic_until, state.panic_floor, at)
    return state


def _status(
    service: ServiceSnapshot, states: Mapping[int, RevisionState], traffic: Mapping[int, int]
) -> tuple[ServiceStatus, str]:
    if service.stopped:
        return ServiceStatus.STOPPED, "stopped"
    serving = [r for r in service.revisions if states[r.id] is RevisionState.READY and traffic[r.id] > 0]
    starting = [r for r in service.revisions if states[r.id] is RevisionState.STARTING]
    moving = [
        r
        for r in service.revisions
        if r.id != service.stable_revision_id
        and states[r.id] is RevisionState.READY
        and traffic[r.id] < r.target_traffic
    ]
    if serving:
        if starting or moving:
            return ServiceStatus.UPDATING, ""
        return ServiceStatus.READY, ""
    if starting:
        return ServiceStatus.DEPLOYING, ""
    failed = [r for r in service.revisions if states[r.id] is RevisionState.FAILED]
    return ServiceStatus.FAILED, "no revision can serve" if failed else "no revision takes traffic"
