"""The serving controller's reads and writes: snapshots of the active services with the gateways' load, and a
decision applied in one transaction (revision states and traffic, replicas started, drained, stopped, unlinked).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import flag_modified

from aicenter.core.alerts import Severity
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError
from aicenter.core.jobs import FailureReason, JobStatus
from aicenter.core.jobs.serving import COMMAND_RUNTIME, V2_READY_PATH
from aicenter.core.serving.autoscale import ConcurrencySample, ScalePolicy
from aicenter.core.serving.reconcile import (
    ReplicaSnapshot,
    RevisionSnapshot,
    ServiceDecision,
    ServiceSnapshot,
)
from aicenter.core.serving.spec import RevisionState, Rollout, ServiceStatus
from aicenter.db.models import Job, Node, Replica, Service, ServiceLoad, ServiceReplica, ServiceRevision
from aicenter.events import notify_after_commit, routes_changed
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.serving._deploy import start_replicas
from aicenter.services.serving._events import record_decision, record_service_event
from aicenter.services.serving._routes import owner_actor

__all__ = ["Probe", "ServiceControl", "apply_decision", "load_controls", "mark_ready"]

_LIVE = (RevisionState.STARTING.value, RevisionState.READY.value)
_ACTOR = Actor.system("serving")


@dataclass(frozen=True, slots=True)
class Probe:
    """A running replica not yet seen ready: where the controller asks whether it is, with its serve token (sent in
    ``core.jobs.serving.SERVE_TOKEN_HEADER``; "" for none)."""

    job_id: int
    url: str
    token: str = field(default="", repr=False)


@dataclass(frozen=True, slots=True)
class ServiceControl:
    """One active service: its snapshot, the load per revision (all gateways summed), and what to probe."""

    snapshot: ServiceSnapshot
    load: dict[int, list[ConcurrencySample]] = field(default_factory=dict)
    held: dict[int, int] = field(default_factory=dict)
    probes: tuple[Probe, ...] = ()


def _policy(spec: dict[str, object]) -> ScalePolicy:
    def num(key: str, default: float) -> float:
        value = spec.get(key, default)
        return float(value) if isinstance(value, int | float) else default

    return ScalePolicy(
        min_replicas=int(num("min_replicas", 0)),
        max_replicas=max(1, int(num("max_replicas", 1))),
        target_concurrency=num("target_concurrency", 8.0),
        scale_to_zero_grace_s=num("scale_to_zero_grace_s", 300.0),
        stable_window_s=num("stable_window_s", 60.0),
    )


async def load_controls(
    session: AsyncSession, *, now: datetime, clock: float, secret_key: str, window_s: float = 60.0
) -> list[ServiceControl]:
    """Every service with a live revision (stopped ones too: their replicas must go). ``secret_key`` derives the
    probes' serve tokens (``jobs.serve_token``)."""
    revisions: dict[int, list[ServiceRevision]] = defaultdict(list)
    # Live revisions, and retired or failed ones that still have replicas to drain, stop or unlink.
    linked = select(ServiceReplica.revision_id)
    stmt = select(ServiceRevision).where(ServiceRevision.state.in_(_LIVE) | ServiceRevision.id.in_(linked))
    for rev in (await session.scalars(stmt)).all():
        revisions[rev.service_id].append(rev)
    if not revisions:
        return []
    services = (await session.scalars(select(Service).where(Service.id.in_(list(revisions))))).all()
    rev_ids = [r.id for revs in revisions.values() for r in revs]
    links = (
        await session.execute(
            select(
                ServiceReplica, Job.status, Job.message, Job.restart_count, Replica.ports, Node.address, Node.executor
            )
            .join(Job, Job.id == ServiceReplica.job_id)
            .outerjoin(Replica, (Replica.job_id == Job.id) & (Replica.attempt == Job.restart_count))
            .outerjoin(Node, Node.id == Replica.node_id)
            .where(ServiceReplica.revision_id.in_(rev_ids))
        )
    ).all()
    finished = {s.value for s in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED)}
    replicas: dict[int, list[ReplicaSnapshot]] = defaultdict(list)
    probes: dict[int, list[Probe]] = defaultdict(list)
    paths = {r.id: _ready_path(r) for revs in revisions.values() for r in revs}
    for link, status, message, attempt, ports, address, executor in links:
        active = status not in finished
        replicas[link.revision_id].append(
            ReplicaSnapshot(
                job_id=link.job_id,
                active=active,
                ready=link.ready_at is not None,
                draining_since=link.draining_since,
                message=message or "",
                created_at=link.created_at,
            )
        )
        if status == JobStatus.RUNNING.value and link.ready_at is None and link.draining_since is None and ports:
            host = jobs.publish_host(jobs.NodeRef(address or "", executor or "local") if executor else None)
            token = jobs.serve_token(secret_key, link.job_id, attempt) if secret_key else ""
            probes[link.service_id].append(
                Probe(link.job_id, f"http://{host}:{int(ports[-1])}{paths[link.revision_id]}", token)
            )
    load: dict[int, list[ConcurrencySample]] = defaultdict(list)
    held: dict[int, int] = {}
    window_s = max([window_s, *(float(r.spec.get("stable_window_s", 60)) for revs in revisions.values() for r in revs)])
    since = now - timedelta(seconds=window_s)
    rows = await session.execute(
        select(ServiceLoad.revision_id, ServiceLoad.at, ServiceLoad.concurrency, ServiceLoad.held)
        .where(ServiceLoad.revision_id.in_(rev_ids), ServiceLoad.at >= since)
        .order_by(ServiceLoad.at)
    )
    buckets: dict[tuple[int, int], float] = defaultdict(float)
    for revision_id, at, concurrency, held_now in rows.all():
        # Gateways report every second or so: reports of the same second are summed across gateways.
        second = int(_aware(at).timestamp())
        buckets[(revision_id, second)] += concurrency
        if now - _aware(at) < timedelta(seconds=3):
            held[revision_id] = max(held.get(revision_id, 0), held_now)
    for (revision_id, second), value in sorted(buckets.items(), key=lambda kv: kv[0][1]):
        load[revision_id].append(ConcurrencySample(clock - (now.timestamp() - second), value))
    out = []
    for service in services:
        revs = sorted(revisions[service.id], key=lambda r: r.number)
        snapshot = ServiceSnapshot(
            id=service.id,
            status=ServiceStatus(service.status),
            stopped=service.stopped_at is not None,
            stable_revision_id=service.stable_revision_id,
            revisions=tuple(
                RevisionSnapshot(
                    id=r.id,
                    number=r.number,
                    state=RevisionState(r.state),
                    traffic=r.traffic,
                    target_traffic=r.target_traffic,
                    created_at=_aware(r.created_at),
                    policy=_policy(r.spec),
                    rollout=Rollout.model_validate(r.spec.get("rollout") or {}),
                    ready_timeout_s=float(r.spec.get("ready_timeout_s", 600)),
                    header_value=r.header_value,
                    replicas=tuple(_aware_replica(x) for x in replicas[r.id]),
                    traffic_changed_at=_aware(r.updated_at),
                    last_request_at=_aware(r.last_request_at) if r.last_request_at else None,
                    ready_at=_aware(r.ready_at) if r.ready_at else None,
                )
                for r in revs
            ),
        )
        out.append(
            ServiceControl(
                snapshot,
                load={r.id: load[r.id] for r in revs if r.id in load},
                held={r.id: held[r.id] for r in revs if r.id in held},
                probes=tuple(probes[service.id]),
            )
        )
    return out


def _ready_path(rev: ServiceRevision) -> str:
    if rev.runtime == COMMAND_RUNTIME:
        return str(rev.spec.get("ready_path") or V2_READY_PATH)
    return V2_READY_PATH


def _aware(at: datetime) -> datetime:
    return at if at.tzinfo else at.replace(tzinfo=UTC)


def _aware_replica(r: ReplicaSnapshot) -> ReplicaSnapshot:
    return ReplicaSnapshot(
        r.job_id,
        r.active,
        r.ready,
        _aware(r.draining_since) if r.draining_since else None,
        r.message,
        _aware(r.created_at) if r.created_at else None,
    )


async def mark_ready(session: AsyncSession, job_ids: Iterable[int]) -> None:
    """Replicas the controller saw answer their readiness probe."""
    ids = list(job_ids)
    if not ids:
        return
    now = utcnow()
    for link in (
        await session.scalars(
            select(ServiceReplica).where(ServiceReplica.job_id.in_(ids), ServiceReplica.ready_at.is_(None))
        )
    ).all():
        link.ready_at = now


async def apply_decision(session: AsyncSession, service_id: int, decision: ServiceDecision, *, now: datetime) -> None:
    """Write one service's decision. Replicas are started as the service's owner, so quota and access apply
    as when they deployed; a start refused (quota full, the model no longer readable) is the revision's message."""
    service = await session.scalar(select(Service).where(Service.id == service_id).with_for_update())
    if service is None:
        return
    revisions = {
        r.id: r
        for r in (await session.scalars(select(ServiceRevision).where(ServiceRevision.service_id == service.id))).all()
    }
    await record_decision(session, service, revisions, decision)  # before the rows change: it compares with them
    changed = False
    moved: set[int] = set()
    for rev_id, change in decision.revisions.items():
        rev = revisions.get(rev_id)
        if rev is None:
            continue
        if change.state is not None and change.state.value != rev.state:
            rev.state = change.state.value
            changed = True
            if change.state is RevisionState.READY:
                rev.ready_at = now
                service.ready_at = service.ready_at or now
            if change.state is RevisionState.RETIRED:
                rev.retired_at = now
        if change.traffic is not None and change.traffic != rev.traffic:
            rev.traffic = change.traffic
            rev.updated_at = now
            moved.add(rev.id)
            changed = True
        if change.target_traffic is not None:
            rev.target_traffic = change.target_traffic
        if change.desired is not None:
            rev.desired_replicas = change.desired
        if change.message is not None:
            rev.message = change.message
    _keep_traffic_clocks(session, revisions.values(), moved)  # now: the queries below flush these rows
    if decision.stable_revision_id is not None:
        service.stable_revision_id = decision.stable_revision_id
    if decision.status is not None and service.stopped_at is None:
        service.status = decision.status.value
        service.message = decision.message or ""
    if decision.drain:
        for link in (
            await session.scalars(select(ServiceReplica).where(ServiceReplica.job_id.in_(decision.drain)))
        ).all():
            link.draining_since = link.draining_since or now
        changed = True
    for job_id in decision.stop:
        job = await session.scalar(select(Job).where(Job.id == job_id).with_for_update())
        if job is not None and job.finished_at is None and job.stop_requested_at is None:
            await jobs.request_stop(session, job, _ACTOR, FailureReason.STOPPED)
    if decision.forget:
        await session.execute(delete(ServiceReplica).where(ServiceReplica.job_id.in_(decision.forget)))
        changed = True
    if decision.start and service.stopped_at is None:
        owner = await owner_actor(session, service)
        for rev_id, count in decision.start.items():
            rev = revisions.get(rev_id)
            if rev is None or rev.state not in _LIVE:
                continue
            try:
                async with session.begin_nested():
                    await start_replicas(session, owner, service, rev, count)
            except AicenterError as exc:  # a refused submission is a fact about the revision, not a crash
                message = f"cannot start a replica: {exc.message}"
                if message != rev.message:  # once per new refusal, not every tick it stays refused
                    record_service_event(
                        session, service, "service.replica_refused", f"revision {rev.number}: {message}",
                        severity=Severity.WARNING, details={"revision": rev.number},
                    )  # fmt: skip
                rev.message = message
            else:
                changed = True
    _keep_traffic_clocks(session, revisions.values(), moved)  # and what changed since (a refusal's message)
    if changed:
        routes_changed.notify_after_commit(session)
    notify_after_commit(session)


def _keep_traffic_clocks(session: AsyncSession, revisions: Iterable[ServiceRevision], moved: set[int]) -> None:
    """A revision's ``updated_at`` is when its traffic last moved (the steps rollout's clock, ``load_controls``):
    a write that does not move it (replicas wanted, a message) must not restart it through the column's onupdate,
    which an explicit value in the UPDATE overrides. Before each flush: a flushed row is no longer modified."""
    for rev in revisions:
        if rev.id not in moved and session.is_modified(rev):
            flag_modified(rev, "updated_at")
