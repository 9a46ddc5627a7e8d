"""What the serving gateway reads and writes: the route table (every second, one set of queries for all
services), the load it observed (every few seconds, one batch), and an activation when a request arrives for a
revision with no replica (the cold path only). Never per request."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from datetime import timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.core.jobs.serving import COMMAND_RUNTIME, V2_READY_PATH
from aicenter.core.serving.routing import (
    Endpoint,
    RevisionLoad,
    RevisionRoute,
    RouteTable,
    ServiceRoute,
    ServingProtocol,
)
from aicenter.core.serving.spec import RevisionState
from aicenter.db.models import (
    Job,
    Membership,
    Node,
    Replica,
    Service,
    ServiceKey,
    ServiceLoad,
    ServiceReplica,
    ServiceRevision,
    User,
    Workspace,
)
from aicenter.events import notify_after_commit
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.serving._deploy import start_replicas

__all__ = ["LOAD_KEEP_S", "activate_revision", "load_route_table", "member_workspaces", "record_load"]

LOAD_KEEP_S = 3600
"""Load reports older than this are pruned (the console charts the last hour; the autoscaler reads a minute)."""


async def load_route_table(session: AsyncSession, *, secret_key: str, version: int = 0) -> RouteTable:
    """Every service that is not deleted, with its routable revisions and their running replicas.

    ``secret_key`` (the server's) derives each replica's serve token (``jobs.serve_token``), which the gateway
    sends it with every request: the same key planned the replica, so nothing is stored or read per request.
    """
    services = (await session.scalars(select(Service))).all()
    if not services:
        return RouteTable({}, version)
    workspaces = dict((await session.execute(select(Workspace.id, Workspace.name))).all())
    revisions: dict[int, list[ServiceRevision]] = defaultdict(list)
    live = (RevisionState.STARTING.value, RevisionState.READY.value)
    for rev in (await session.scalars(select(ServiceRevision).where(ServiceRevision.state.in_(live)))).all():
        revisions[rev.service_id].append(rev)
    keys: dict[int, set[str]] = defaultdict(set)
    for service_id, digest in (
        await session.execute(select(ServiceKey.service_id, ServiceKey.key_hash).where(ServiceKey.revoked_at.is_(None)))
    ).all():
        keys[service_id].add(digest)
    endpoints: dict[int, list[Endpoint]] = defaultdict(list)
    rows = await session.execute(
        select(
            ServiceReplica.revision_id,
            ServiceReplica.job_id,
            ServiceReplica.draining_since,
            Replica.attempt,
            Replica.ports,
            Node,
        )
        .join(Job, Job.id == ServiceReplica.job_id)
        .join(Replica, (Replica.job_id == Job.id) & (Replica.attempt == Job.restart_count))
        .outerjoin(Node, Node.id == Replica.node_id)
        .where(Job.status == JobStatus.RUNNING.value)
    )
    for revision_id, job_id, draining_since, attempt, ports, node in rows.all():
        if not ports:
            continue
        ref = jobs.NodeRef(node.address or "", node.executor) if node is not None else None
        token = jobs.serve_token(secret_key, job_id, attempt) if secret_key else ""
        endpoints[revision_id].append(
            Endpoint(job_id, jobs.publish_host(ref), int(ports[-1]), draining=draining_since is not None, token=token)
        )
    table = {}
    for s in services:
        routes = tuple(
            _revision_route(rev, tuple(sorted(endpoints[rev.id], key=lambda e: e.replica_job_id)))
            for rev in sorted(revisions[s.id], key=lambda r: r.number)
        )
        ws = workspaces.get(s.workspace_id, "")
        table[(ws, s.name)] = ServiceRoute(
            service_id=s.id,
            workspace=ws,
            workspace_id=s.workspace_id,
            name=s.name,
            revisions=routes,
            key_hashes=frozenset(keys[s.id]),
            ab_header=s.ab_header,
            max_body_bytes=s.max_body_bytes,
            stopped=s.stopped_at is not None,
        )
    return RouteTable(table, version)


def _revision_route(rev: ServiceRevision, endpoints: tuple[Endpoint, ...]) -> RevisionRoute:
    spec = rev.spec
    command = rev.runtime == COMMAND_RUNTIME
    return RevisionRoute(
        revision_id=rev.id,
        number=rev.number,
        traffic=rev.traffic,
        protocol=ServingProtocol.COMMAND if command else ServingProtocol.V2,
        ready_path=str(spec.get("ready_path") or V2_READY_PATH) if command else V2_READY_PATH,
        endpoints=endpoints,
        header_value=rev.header_value,
        min_replicas=int(spec.get("min_replicas", 0)),
        max_replicas=int(spec.get("max_replicas", 1)),
        activation_timeout_s=float(spec.get("activation_timeout_s", 60)),
    )


async def member_workspaces(session: AsyncSession, user_id: int) -> frozenset[int]:
    """The workspaces whose services a user's token may call."""
    rows = await session.scalars(select(Membership.workspace_id).where(Membership.user_id == user_id))
    return frozenset(int(w) for w in rows.all())


async def record_load(
    session: AsyncSession, source: str, loads: Mapping[int, RevisionLoad], ready: Iterable[int] = ()
) -> None:
    """Append one interval's load reports of a gateway (``source``); mark the replicas it saw ready; prune old
    reports. ``ready``: replica jobs the gateway saw answer their readiness probe."""
    now = utcnow()
    known = set((await session.scalars(select(ServiceRevision.id).where(ServiceRevision.id.in_(list(loads))))).all())
    used = []
    for load in loads.values():
        if load.revision_id not in known:
            continue  # deleted meanwhile
        session.add(
            ServiceLoad(
                revision_id=load.revision_id,
                source=source[:64],
                at=now,
                interval_s=load.window_s,
                concurrency=load.average_concurrency,
                peak=load.peak_concurrency,
                held=load.held,
                requests=load.requests,
                errors=load.errors,
                p50_ms=None if load.latency_p50_s is None else load.latency_p50_s * 1000,
                p99_ms=None if load.latency_p99_s is None else load.latency_p99_s * 1000,
            )
        )
        if load.requests or load.held or load.peak_concurrency:
            used.append(load.revision_id)
    if used:
        # updated_at is the steps rollout's clock (when the traffic last moved): setting it to itself keeps its
        # onupdate from restarting that clock every second while requests flow.
        await session.execute(
            update(ServiceRevision)
            .where(ServiceRevision.id.in_(used))
            .values(last_request_at=now, updated_at=ServiceRevision.updated_at)
        )
    ready_jobs = list(ready)
    if ready_jobs:
        links = await session.scalars(
            select(ServiceReplica).where(ServiceReplica.job_id.in_(ready_jobs), ServiceReplica.ready_at.is_(None))
        )
        for link in links.all():
            link.ready_at = now
    await session.execute(delete(ServiceLoad).where(ServiceLoad.at < now - timedelta(seconds=LOAD_KEEP_S)))


async def activate_revision(session: AsyncSession, revision_id: int) -> int:
    """A request waits for a revision with no replica running: start one now, as the service's owner, without
    waiting for the controller's next tick. Returns the replicas started (0: one is starting already).

    Idempotent across gateways: the revision row is locked, and a live replica (not draining) counts.
    """
    revision = await session.scalar(select(ServiceRevision).where(ServiceRevision.id == revision_id).with_for_update())
    if revision is None or revision.state not in (RevisionState.READY.value, RevisionState.STARTING.value):
        return 0
    service = await session.get(Service, revision.service_id)
    if service is None or service.stopped_at is not None:
        return 0
    revision.last_request_at = utcnow()
    live = await session.scalar(
        select(ServiceReplica.id)
        .join(Job, Job.id == ServiceReplica.job_id)
        .where(
            ServiceReplica.revision_id == revision.id,
            ServiceReplica.draining_since.is_(None),
            Job.finished_at.is_(None),
        )
        .limit(1)
    )
    if live is not None:
        return 0
    owner = await owner_actor(session, service)
    revision.desired_replicas = max(1, revision.desired_replicas)
    await start_replicas(session, owner, service, revision, 1)
    notify_after_commit(session)
    return 1


async def owner_actor(session: AsyncSession, service: Service) -> Actor:
    """The actor the platform starts replicas as: the service's owner (their workspace membership and the
    versions they can read decide, as when they deployed), else the platform itself."""
    user = await session.get(User, service.user_id) if service.user_id is not None else None
    if user is None:
        return Actor.system("serving")
    return Actor(user_id=user.id, username=user.username, is_platform_admin=user.is_platform_admin)
