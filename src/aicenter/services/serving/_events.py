"""A service's history for people: deployed, updated, revisions ready or failed, traffic moved, scaled, stopped,
started, deleted.

The events are rows of the cluster event log (``alerts.record_event``) with the service's id and its workspace, so
only that workspace's members and platform admins see them, there and in the cluster event list. Each is added to
the transaction that makes the change, so an event is never about a change that did not happen.

The controller's events come from comparing its decision with what the database holds (``record_decision``, called
before the decision is written): a revision's state, its traffic, its target replicas. A tick that changes none of
them records nothing, so a steady service's history stays quiet however often the controller looks at it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import Severity
from aicenter.core.jobs import JobStatus
from aicenter.core.serving.reconcile import ServiceDecision
from aicenter.core.serving.spec import RevisionState
from aicenter.db.models import ClusterEvent, Job, Service, ServiceReplica, ServiceRevision
from aicenter.db.pagination import Page
from aicenter.events import notify_after_commit, routes_changed
from aicenter.services import alerts
from aicenter.services.context import Actor
from aicenter.services.serving._access import load_service

__all__ = ["list_service_events", "record_decision", "record_service_event", "traffic_split"]


def record_service_event(
    session: AsyncSession,
    service: Service,
    kind: str,
    message: str,
    *,
    severity: Severity = Severity.INFO,
    details: dict[str, Any] | None = None,
) -> None:
    """Add one of the service's events (``service.<what>``) to the caller's transaction."""
    alerts.record_event(
        session,
        kind,
        f"service {service.name}: {message}",
        severity=severity,
        service_id=service.id,
        workspace_id=service.workspace_id,
        details={"service": service.name, **(details or {})},
    )


async def list_service_events(
    session: AsyncSession, actor: Actor, service_id: int, *, limit: int = 50, cursor: str | None = None
) -> Page[ClusterEvent]:
    """The service's events, newest first; as ``get_service``: its workspace's members and platform admins, else
    NotFound."""
    await load_service(session, actor, service_id)
    return await alerts.list_events(session, actor, service_id=service_id, limit=limit, cursor=cursor)


def traffic_split(traffic: Mapping[int, int]) -> str:
    """The split (revision number -> percent) as people read it: ``revision 2 90 %, revision 1 10 %``."""
    shares = [f"revision {n} {p} %" for n, p in sorted(traffic.items(), key=lambda kv: (-kv[1], -kv[0])) if p > 0]
    return ", ".join(shares) or "no revision"


def _scale_reason(reason: str, spec: Mapping[str, Any]) -> str:
    grace = float(spec.get("scale_to_zero_grace_s", 300))
    words = {
        "steady": f"for the load (target {spec.get('target_concurrency', 8)} requests in flight per replica)",
        "panic": "panic scale-up: a burst of requests",
        "from-zero": "scale from zero: requests are waiting",
        "to-zero": f"scale to zero after {grace:.0f} s without requests",
        "grace": f"one replica kept for the scale-to-zero grace ({grace:.0f} s after the last request)",
        "min": f"held at min_replicas ({spec.get('min_replicas', 0)})",
        "max": f"capped at max_replicas ({spec.get('max_replicas', 1)})",
    }
    return words.get(reason, reason)


async def record_decision(
    session: AsyncSession, service: Service, revisions: Mapping[int, ServiceRevision], decision: ServiceDecision
) -> None:
    """The events of one controller decision, from what it changes against the rows (not yet written)."""
    traffic = {r.number: r.traffic for r in revisions.values()}
    moved = False
    retired: list[int] = []
    failing: set[int] = set()
    for rev_id, change in decision.revisions.items():
        rev = revisions.get(rev_id)
        if rev is None:
            continue
        if change.state is not None and change.state.value != rev.state:
            if change.state is RevisionState.READY:
                what = f"model {rev.model_ref}" if rev.model_ref else f"runtime {rev.runtime}"
                record_service_event(
                    session, service, "service.revision_ready", f"revision {rev.number} is ready ({what})",
                    details={"revision": rev.number},
                )  # fmt: skip
            elif change.state is RevisionState.FAILED:
                failing.add(rev_id)
                reason = change.message or f"revision {rev.number} failed"
                record_service_event(
                    session, service, "service.revision_failed", reason, severity=Severity.WARNING,
                    details={"revision": rev.number, "reason": reason},
                )  # fmt: skip
            elif change.state is RevisionState.RETIRED:
                retired.append(rev.number)
        if change.traffic is not None and change.traffic != rev.traffic:
            traffic[rev.number] = change.traffic
            moved = True
        if (
            rev_id in decision.reasons
            and change.desired is not None
            and change.desired != rev.desired_replicas
            and service.stopped_at is None
        ):
            reason = decision.reasons[rev_id]
            record_service_event(
                session,
                service,
                "service.scaled",
                f"revision {rev.number} scaled from {rev.desired_replicas} to {change.desired} replicas: "
                f"{_scale_reason(reason, rev.spec)}",
                details={"revision": rev.number, "from": rev.desired_replicas, "to": change.desired, "reason": reason},
            )
    if moved or retired:
        message = f"traffic now {traffic_split(traffic)}"
        if retired:
            message += f"; revision {', '.join(map(str, retired))} retired"
        record_service_event(
            session, service, "service.traffic", message,
            details={"traffic": {str(n): p for n, p in traffic.items() if p > 0}, "retired": retired},
        )  # fmt: skip
    await _failed_replicas(session, service, revisions, decision, skip=failing)


async def _failed_replicas(
    session: AsyncSession,
    service: Service,
    revisions: Mapping[int, ServiceRevision],
    decision: ServiceDecision,
    *,
    skip: set[int],
) -> None:
    """A replica that failed (its job ended in failure) is unlinked once: one warning, with its job's word. A
    revision failing for it says so already (``skip``)."""
    if not decision.forget:
        return
    rows = await session.execute(
        select(ServiceReplica.revision_id, Job.id, Job.message)
        .join(Job, Job.id == ServiceReplica.job_id)
        .where(ServiceReplica.job_id.in_(decision.forget), Job.status == JobStatus.FAILED.value)
    )
    for revision_id, job_id, message in rows.all():
        rev = revisions.get(revision_id)
        if rev is None or revision_id in skip:
            continue
        record_service_event(
            session,
            service,
            "service.replica_failed",
            f"a replica of revision {rev.number} failed (job {job_id}): {message or 'no message'}",
            severity=Severity.WARNING,
            details={"revision": rev.number, "job_id": job_id},
        )


def notify_changed(session: AsyncSession) -> None:
    """Once committed: the job controllers act, and this process's gateway reloads its routes at once (a caller's
    next request sees the change, not the table of up to a refresh ago)."""
    notify_after_commit(session)
    routes_changed.notify_after_commit(session)
