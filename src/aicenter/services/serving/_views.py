"""Reading services: a page of them with the seed's list fields, or one with its revisions, replicas and the
requests the gateways saw."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import ACTIVE_STATUSES
from aicenter.db.models import Job, Replica, Service, ServiceLoad, ServiceReplica, ServiceRevision, User, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services.access import member_workspace_ids
from aicenter.services.context import Actor
from aicenter.services.serving._access import load_service

__all__ = [
    "LoadPoint",
    "ReplicaSpan",
    "ReplicaView",
    "ServiceView",
    "get_service",
    "list_services",
    "replica_history",
    "service_load",
]


@dataclass(frozen=True)
class ReplicaView:
    job_id: int
    revision: int
    status: str
    ready: bool
    draining: bool
    node: str | None
    started_at: datetime | None


@dataclass(frozen=True)
class ServiceView:
    """A service as lists and details show it. ``revisions`` and ``replicas`` are filled by ``get_service``."""

    service: Service
    workspace_name: str
    username: str | None
    model_ref: str  # the stable revision's (else the newest one's)
    runtime: str
    replicas_ready: int
    replicas_total: int
    revisions: list[ServiceRevision] = field(default_factory=list)
    replicas: list[ReplicaView] = field(default_factory=list)

    @property
    def url_path(self) -> str:
        return f"/serve/{self.workspace_name}/{self.service.name}"

    @property
    def running_s(self) -> float:
        """How long it has served since it first became ready (0 while stopped or never ready)."""
        if self.service.ready_at is None or self.service.stopped_at is not None:
            return 0.0
        return max(0.0, (utcnow() - self.service.ready_at).total_seconds())


async def _views(session: AsyncSession, services: list[Service], *, detail: bool = False) -> list[ServiceView]:
    if not services:
        return []
    ids = [s.id for s in services]
    workspaces = dict(
        (
            await session.execute(
                select(Workspace.id, Workspace.name).where(Workspace.id.in_({s.workspace_id for s in services}))
            )
        ).all()
    )
    user_ids = {s.user_id for s in services if s.user_id is not None}
    users = (
        dict((await session.execute(select(User.id, User.username).where(User.id.in_(user_ids)))).all())
        if user_ids
        else {}
    )
    revisions: dict[int, list[ServiceRevision]] = defaultdict(list)
    for rev in (
        await session.scalars(
            select(ServiceRevision).where(ServiceRevision.service_id.in_(ids)).order_by(ServiceRevision.number)
        )
    ).all():
        revisions[rev.service_id].append(rev)
    rows = (
        await session.execute(
            select(ServiceReplica, Job.status, Job.started_at, Replica.node_name)
            .join(Job, Job.id == ServiceReplica.job_id)
            # The replica's current attempt (a service replica job has one replica): where it runs, once placed.
            .outerjoin(Replica, (Replica.job_id == Job.id) & (Replica.attempt == Job.restart_count))
            .where(ServiceReplica.service_id.in_(ids))
        )
    ).all()
    number = {r.id: r.number for revs in revisions.values() for r in revs}
    replicas: dict[int, list[ReplicaView]] = defaultdict(list)
    active = {s.value for s in ACTIVE_STATUSES}
    for link, status, started_at, node in rows:
        if status not in active:
            continue
        replicas[link.service_id].append(
            ReplicaView(
                job_id=link.job_id,
                revision=number.get(link.revision_id, 0),
                status=status,
                ready=link.ready_at is not None and link.draining_since is None,
                draining=link.draining_since is not None,
                node=node,
                started_at=started_at,
            )
        )
    out = []
    for s in services:
        revs = revisions[s.id]
        shown = next((r for r in revs if r.id == s.stable_revision_id), None) or (revs[-1] if revs else None)
        mine = replicas[s.id]
        out.append(
            ServiceView(
                service=s,
                workspace_name=workspaces.get(s.workspace_id, ""),
                username=users.get(s.user_id) if s.user_id is not None else None,
                model_ref=shown.model_ref if shown is not None else "",
                runtime=shown.runtime if shown is not None else "",
                replicas_ready=sum(1 for r in mine if r.ready),
                replicas_total=len(mine),
                revisions=revs if detail else [],
                replicas=sorted(mine, key=lambda r: r.job_id) if detail else [],
            )
        )
    return out


async def get_service(session: AsyncSession, actor: Actor, service_id: int) -> ServiceView:
    """One service with its revisions and live replicas (members of its workspace, platform admins)."""
    service = await load_service(session, actor, service_id)
    return (await _views(session, [service], detail=True))[0]


async def list_services(
    session: AsyncSession,
    actor: Actor,
    *,
    workspace_id: int | None = None,
    name: str | None = None,
    status: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[ServiceView]:
    """Services the actor sees (platform admins: all), newest first."""
    stmt = select(Service)
    if workspace_id is not None:
        stmt = stmt.where(Service.workspace_id == workspace_id)
    if not actor.is_platform_admin:
        stmt = stmt.where(Service.workspace_id.in_(member_workspace_ids(actor)))
    if name:
        stmt = stmt.where(Service.name == name)
    if status:
        stmt = stmt.where(Service.status == status)
    page = await paginate(session, stmt, Service.id, cursor=cursor, limit=limit, descending=True)
    return Page(items=await _views(session, list(page.items)), next_cursor=page.next_cursor)


@dataclass(frozen=True)
class LoadPoint:
    """Requests one revision served over one interval, all gateways together."""

    at: datetime
    revision: int
    requests: int
    errors: int
    concurrency: float
    p50_ms: float | None
    p99_ms: float | None


async def service_load(session: AsyncSession, actor: Actor, service_id: int, *, minutes: int = 60) -> list[LoadPoint]:
    """The request rate, errors, concurrency and latency the gateways reported, per revision and interval."""
    service = await load_service(session, actor, service_id)
    since = utcnow() - timedelta(minutes=minutes)
    stmt = (
        select(
            ServiceLoad.at,
            ServiceRevision.number,
            func.sum(ServiceLoad.requests),
            func.sum(ServiceLoad.errors),
            func.sum(ServiceLoad.concurrency),
            func.max(ServiceLoad.p50_ms),
            func.max(ServiceLoad.p99_ms),
        )
        .join(ServiceRevision, ServiceRevision.id == ServiceLoad.revision_id)
        .where(ServiceRevision.service_id == service.id, ServiceLoad.at >= since)
        .group_by(ServiceLoad.at, ServiceRevision.number)
        .order_by(ServiceLoad.at)
    )
    return [
        LoadPoint(at, int(number), int(req or 0), int(err or 0), float(conc or 0), p50, p99)
        for at, number, req, err, conc, p50, p99 in (await session.execute(stmt)).all()
    ]


@dataclass(frozen=True)
class ReplicaSpan:
    """When one replica ran and served: the console's replicas-over-time chart counts these."""

    job_id: int
    revision: int
    started_at: datetime | None  # its job started (None: not yet)
    ready_at: datetime | None  # a gateway saw it answer its readiness probe
    draining_since: datetime | None  # taken out of routing
    finished_at: datetime | None  # its job ended


async def replica_history(
    session: AsyncSession, actor: Actor, service_id: int, *, minutes: int = 60
) -> list[ReplicaSpan]:
    """The service's replicas that ran at some time in the last ``minutes`` (members, platform admins)."""
    service = await load_service(session, actor, service_id)
    since = utcnow() - timedelta(minutes=minutes)
    stmt = (
        select(ServiceReplica, ServiceRevision.number, Job.started_at, Job.finished_at)
        .join(Job, Job.id == ServiceReplica.job_id)
        .join(ServiceRevision, ServiceRevision.id == ServiceReplica.revision_id)
        .where(ServiceReplica.service_id == service.id, (Job.finished_at.is_(None)) | (Job.finished_at >= since))
        .order_by(ServiceReplica.job_id)
    )
    return [
        ReplicaSpan(link.job_id, int(number), started, link.ready_at, link.draining_since, finished)
        for link, number, started, finished in (await session.execute(stmt)).all()
    ]
