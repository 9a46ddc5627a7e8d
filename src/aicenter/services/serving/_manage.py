"""Changing a running service: traffic, promote and roll back a canary, scale bounds, stop, start, delete.

These write what is wanted; the serving controller moves replicas and traffic toward it (``controllers.serving``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import flag_modified

from aicenter.core.alerts import Severity
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, Forbidden, ValidationFailed
from aicenter.core.jobs import ACTIVE_STATUSES, translate
from aicenter.core.serving.spec import RevisionSpec, RevisionState, ServiceStatus, check_traffic
from aicenter.db.models import Job, Service, ServiceReplica, ServiceRevision
from aicenter.events import routes_changed
from aicenter.services import audit, billing
from aicenter.services.context import Actor
from aicenter.services.serving._access import load_service, require_manager
from aicenter.services.serving._events import notify_changed, record_service_event, traffic_split

__all__ = [
    "delete_service",
    "promote_service",
    "rollback_service",
    "scale_service",
    "set_traffic",
    "start_service",
    "stop_service",
]

_LIVE = (RevisionState.STARTING.value, RevisionState.READY.value)


async def _revisions(session: AsyncSession, service: Service) -> list[ServiceRevision]:
    stmt = select(ServiceRevision).where(ServiceRevision.service_id == service.id).order_by(ServiceRevision.number)
    return list((await session.scalars(stmt)).all())


def _canary(service: Service, revisions: list[ServiceRevision]) -> ServiceRevision:
    """The revision being rolled out: the newest live one that is not the stable one."""
    moving = [r for r in revisions if r.state in _LIVE and r.id != service.stable_revision_id]
    if not moving:
        raise Conflict(
            f"service {service.name} has no revision rolling out (deploy one with `aicenter service update`)"
        )
    return moving[-1]


async def set_traffic(session: AsyncSession, actor: Actor, service_id: int, traffic: Mapping[str, Any]) -> None:
    """Split traffic between ready revisions by percentage (revision number -> percent, summing to 100).

    Raises:
        ValidationFailed: Unknown revisions, percentages that are not whole numbers or do not sum to 100, or a
            share for a revision that is not ready (it would fail the requests sent to it).
    """
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "change the traffic of")
    revisions = await _revisions(session, service)
    by_number = {r.number: r for r in revisions}
    parsed: dict[int, Any] = {}
    for key, value in traffic.items():
        try:
            parsed[int(key)] = value
        except ValueError:
            raise ValidationFailed(f"{key!r} is not a revision number", field=f"traffic.{key}") from None
    wanted = check_traffic(parsed, set(by_number))
    for number, percent in wanted.items():
        if percent > 0 and by_number[number].state != RevisionState.READY.value:
            raise ValidationFailed(
                f"revision {number} is {by_number[number].state}: only a ready revision takes traffic",
                field=f"traffic.{number}",
            )
    now = utcnow()
    for revision in revisions:
        percent = wanted.get(revision.number, 0)
        if revision.state == RevisionState.READY.value:
            revision.traffic = revision.target_traffic = percent
            revision.updated_at = now
    full = [r for r in revisions if wanted.get(r.number) == 100]
    service.stable_revision_id = full[0].id if full else service.stable_revision_id
    audit.record(
        session,
        actor,
        "service.traffic",
        "service",
        service.id,
        workspace_id=service.workspace_id,
        details={"traffic": {str(k): v for k, v in wanted.items()}},
    )
    record_service_event(
        session, service, "service.traffic", f"traffic set by {actor.username}: {traffic_split(wanted)}",
        details={"traffic": {str(k): v for k, v in wanted.items() if v > 0}, "action": "set"},
    )  # fmt: skip
    notify_changed(session)


async def promote_service(session: AsyncSession, actor: Actor, service_id: int) -> ServiceRevision:
    """Send all traffic to the revision rolling out (a canary, or steps still under way), once it is ready."""
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "promote")
    canary = _canary(service, await _revisions(session, service))
    if canary.state != RevisionState.READY.value:
        raise Conflict(f"revision {canary.number} is not ready yet; promote it once it serves")
    canary.target_traffic = 100
    canary.spec = {**canary.spec, "rollout": {**canary.spec.get("rollout", {}), "strategy": "all"}}
    canary.updated_at = utcnow()
    audit.record(
        session, actor, "service.promote", "service", service.id, workspace_id=service.workspace_id,
        details={"revision": canary.number},
    )  # fmt: skip
    record_service_event(
        session, service, "service.traffic",
        f"revision {canary.number} promoted by {actor.username}: all traffic moves to it",
        details={"revision": canary.number, "action": "promote"},
    )  # fmt: skip
    notify_changed(session)
    return canary


async def rollback_service(session: AsyncSession, actor: Actor, service_id: int) -> ServiceRevision:
    """Retire the revision rolling out: all traffic returns to the stable revision at once."""
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "roll back")
    revisions = await _revisions(session, service)
    stable = next((r for r in revisions if r.id == service.stable_revision_id), None)
    if stable is None or stable.state != RevisionState.READY.value:
        raise Conflict(f"service {service.name} has no stable revision to return to")
    canary = _canary(service, revisions)
    now = utcnow()
    canary.state, canary.traffic, canary.target_traffic = RevisionState.RETIRED.value, 0, 0
    canary.retired_at = canary.updated_at = now
    canary.message = "rolled back"
    stable.traffic = stable.target_traffic = 100
    service.status = ServiceStatus.READY.value
    audit.record(
        session, actor, "service.rollback", "service", service.id, workspace_id=service.workspace_id,
        details={"revision": canary.number, "to": stable.number},
    )  # fmt: skip
    record_service_event(
        session, service, "service.traffic",
        f"revision {canary.number} rolled back by {actor.username}: all traffic returns to revision {stable.number}",
        details={"revision": canary.number, "to": stable.number, "action": "rollback"},
    )  # fmt: skip
    notify_changed(session)
    return canary


async def scale_service(
    session: AsyncSession,
    actor: Actor,
    service_id: int,
    *,
    min_replicas: int | None = None,
    max_replicas: int | None = None,
    target_concurrency: float | None = None,
) -> None:
    """Change the scale bounds of the service's live revisions (no new revision: the same replicas serve)."""
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "scale")
    changes = {
        k: v
        for k, v in (
            ("min_replicas", min_replicas),
            ("max_replicas", max_replicas),
            ("target_concurrency", target_concurrency),
        )
        if v is not None
    }
    if not changes:
        raise ValidationFailed("give min_replicas, max_replicas or target_concurrency", field="min_replicas")
    revisions = await _revisions(session, service)
    if min_replicas and any(
        min_replicas > int(r.spec.get("min_replicas") or 0) for r in revisions if r.state in _LIVE
    ):  # raising the floor starts replicas: refused in arrears; lowering it or the ceiling never is
        await billing.admit(session, service.workspace_id)
    for revision in revisions:
        if revision.state not in _LIVE:
            continue
        base = {k: v for k, v in revision.spec.items() if k != "rollout"}
        try:  # the bounds' rules (min <= max) name the field
            RevisionSpec.model_validate({**base, **changes})
        except ValidationError as exc:
            raise translate(exc) from None
        revision.spec = {**revision.spec, **changes}
        # A scale moves no traffic: updated_at (the steps rollout's clock) is written as it is, not by onupdate.
        flag_modified(revision, "updated_at")
    audit.record(
        session, actor, "service.scale", "service", service.id, workspace_id=service.workspace_id, details=changes
    )
    notify_changed(session)


async def stop_service(session: AsyncSession, actor: Actor, service_id: int) -> None:
    """Stop it: its replicas drain and stop, requests get 503 until it is started. Its owner, the workspace's
    admins, and platform admins (a force stop, audited as such)."""
    service = await load_service(session, actor, service_id, for_update=True)
    forced = False
    try:
        await require_manager(session, actor, service, "stop")
    except Forbidden:
        if not actor.is_platform_admin:
            raise
        forced = True
    if service.stopped_at is None:
        service.stopped_at = utcnow()
        service.stop_requested_by = actor.user_id or None
        service.status = ServiceStatus.STOPPED.value
        service.message = "stopped by a platform admin" if forced else "stopped"
        record_service_event(
            session, service, "service.force_stopped" if forced else "service.stopped",
            f"stopped by {'platform admin ' if forced else ''}{actor.username}: its replicas drain and stop",
            severity=Severity.WARNING if forced else Severity.INFO,
        )  # fmt: skip
    audit.record(
        session, actor, "service.force_stop" if forced else "service.stop", "service", service.id,
        workspace_id=service.workspace_id,
    )  # fmt: skip
    notify_changed(session)


async def start_service(session: AsyncSession, actor: Actor, service_id: int) -> None:
    """Start a stopped service again: its revisions scale as before (from zero at the first request)."""
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "start")
    if service.stopped_at is None:
        raise Conflict(f"service {service.name} is not stopped")
    await billing.admit(session, service.workspace_id)
    service.stopped_at = None
    service.stop_requested_by = None
    service.status = ServiceStatus.READY.value if service.stable_revision_id else ServiceStatus.DEPLOYING.value
    service.message = ""
    now = utcnow()
    for revision in await _revisions(session, service):
        if revision.state in _LIVE:
            revision.last_request_at = now  # a start is a use: its replicas come back for the grace
    audit.record(session, actor, "service.start", "service", service.id, workspace_id=service.workspace_id)
    record_service_event(session, service, "service.started", f"started by {actor.username}")
    notify_changed(session)


async def delete_service(session: AsyncSession, actor: Actor, service_id: int) -> None:
    """Delete a stopped service whose replicas have all stopped (their jobs stay, with their machine time).

    Raises:
        Conflict: It is not stopped, or replicas are still stopping.
    """
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "delete")
    if service.stopped_at is None:
        raise Conflict(f"service {service.name} is running; stop it first (`aicenter service stop {service.name}`)")
    running = await session.scalar(
        select(Job.id)
        .join(ServiceReplica, ServiceReplica.job_id == Job.id)
        .where(ServiceReplica.service_id == service.id, Job.status.in_([s.value for s in ACTIVE_STATUSES]))
        .limit(1)
    )
    if running is not None:
        raise Conflict(f"service {service.name} still has replicas stopping; delete it once they stopped")
    audit.record(
        session, actor, "service.delete", "service", service.id, workspace_id=service.workspace_id,
        details={"name": service.name},
    )  # fmt: skip
    record_service_event(session, service, "service.deleted", f"deleted by {actor.username}")
    await session.delete(service)
    await session.flush()
    routes_changed.notify_after_commit(session)


async def stop_for_arrears(session: AsyncSession, workspace_id: int, workspace: str) -> list[int]:
    """Stop every running service of a workspace whose billing policy stops work in arrears (the billing
    controller): their replicas drain and stop, as for ``stop_service``; returns their ids. They stay stopped
    after a recharge: their managers start them again (admitted once the balance is positive)."""
    services = (
        await session.scalars(
            select(Service)
            .where(Service.workspace_id == workspace_id, Service.stopped_at.is_(None))
            .order_by(Service.id)
            .with_for_update()
        )
    ).all()
    now = utcnow()
    for service in services:
        service.stopped_at = now
        service.stop_requested_by = None
        service.status = ServiceStatus.STOPPED.value
        service.message = f"stopped: workspace {workspace} is in arrears"
        record_service_event(
            session, service, "service.stopped", f"stopped: workspace {workspace} is in arrears; its replicas drain "
            "and stop", severity=Severity.WARNING, details={"reason": "arrears"},
        )  # fmt: skip
    if services:
        notify_changed(session)
    return [s.id for s in services]
