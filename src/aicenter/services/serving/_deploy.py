"""Deploying a service and new revisions of it, and starting a revision's replicas.

Deploy resolves the model version as the deployer sees it, picks the runtime from the model's format and files,
and writes the service, its first revision and that revision's first replica job in one transaction: the job's
submission checks the resource spec, the pool and the quota exactly as for any job, so a deploy that would never
run is refused whole, and nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError, Conflict, Forbidden, NotFound, ValidationFailed
from aicenter.core.jobs import load_document
from aicenter.core.jobs.serving import COMMAND_RUNTIME
from aicenter.core.serving.runtimes import choose_runtime
from aicenter.core.serving.spec import (
    AUTO_RUNTIME,
    RevisionSpec,
    RevisionState,
    Rollout,
    RolloutStrategy,
    ServiceStatus,
    parse_deploy_spec,
    parse_revision_spec,
    replica_job_spec,
)
from aicenter.db.models import CatalogItem, Service, ServiceReplica, ServiceRevision, VersionFile
from aicenter.services import audit, billing, catalog, jobs
from aicenter.services.context import Actor
from aicenter.services.serving._access import load_service, require_manager
from aicenter.services.serving._events import notify_changed, record_service_event

__all__ = ["deploy_service", "start_replicas", "update_service"]


async def _model(session: AsyncSession, actor: Actor, spec: RevisionSpec, workspace_id: int) -> tuple[Any, str]:
    """The model version (a catalog view, or None for a command without one) and the runtime that serves it."""
    if spec.model is None:
        return None, COMMAND_RUNTIME
    try:
        version = await catalog.resolve_version(session, actor, ItemKind.MODEL, spec.model, workspace_id=workspace_id)
    except NotFound:
        raise NotFound(f"model: model {spec.model} not found", details={"field": "model"}) from None
    except (ValidationFailed, Conflict) as exc:
        raise type(exc)(f"model: {exc.message.removeprefix('ref: ')}", details={"field": "model"}) from None
    if not version.can_read_content:
        raise Forbidden(
            f"model: model {spec.model} is not shared with you; platform admins see the metadata of user "
            "models, not their content",
            details={"field": "model"},
        )
    if spec.runtime == COMMAND_RUNTIME:
        return version, COMMAND_RUNTIME
    item = await session.get(CatalogItem, version.item_id)
    files = list((await session.scalars(select(VersionFile.path).where(VersionFile.version_id == version.id))).all())
    metadata = {**(item.meta if item is not None else {}), **version.metadata}
    try:
        runtime = choose_runtime(files, metadata, None if spec.runtime == AUTO_RUNTIME else spec.runtime)
    except ValueError as exc:
        raise ValidationFailed(f"model {version.ref}: {exc}", field="runtime") from None
    return version, runtime


async def _revision(
    session: AsyncSession,
    actor: Actor,
    service: Service,
    spec: RevisionSpec,
    *,
    target_traffic: int,
    rollout: Rollout,
) -> ServiceRevision:
    """A new revision (starting) and its first replicas."""
    version, runtime = await _model(session, actor, spec, service.workspace_id)
    signature = (version.metadata.get("signature") or None) if version is not None else None
    number = service.next_revision
    service.next_revision = number + 1
    job_spec = replica_job_spec(
        service=service.name,
        revision=number,
        spec=spec,
        runtime=runtime,
        model_version_id=version.id if version is not None else None,
        model_version=str(version.number) if version is not None else "",
        algorithm_version_id=None,
        image_version_id=None,
        signature=signature,
        max_body_bytes=service.max_body_bytes,
    ).normalized()
    # The image and algorithm keep the deployer's references: the first replica's submission resolves them
    # (with the deployer's view) and the revision then pins the ids it got.
    if spec.image != "host":
        job_spec["image"] = spec.image
    if spec.algorithm is not None:
        job_spec["algorithm"] = spec.algorithm
    revision = ServiceRevision(
        service_id=service.id,
        number=number,
        model_version_id=version.id if version is not None else None,
        model_ref=version.ref if version is not None else "",
        runtime=runtime,
        spec={**spec.model_dump(mode="json", exclude_none=True), "rollout": rollout.model_dump(mode="json")},
        job_spec=job_spec,
        signature=signature,
        traffic=0,
        target_traffic=target_traffic,
        header_value=spec.header_value,
        state=RevisionState.STARTING.value,
        desired_replicas=spec.scaling_floor(),
        created_by=actor.user_id or None,
    )
    session.add(revision)
    await session.flush()
    first = await start_replicas(session, actor, service, revision, spec.scaling_floor())
    # Pin what the first submission resolved: later replicas serve exactly this image and code.
    if first:
        job = first[0]
        if job.image_version_id is not None:
            job_spec = {**job_spec, "image": f"#{job.image_version_id}"}
        if job.algorithm_version_id is not None:
            job_spec = {**job_spec, "algorithm": f"#{job.algorithm_version_id}"}
        revision.job_spec = job_spec
    return revision


async def start_replicas(
    session: AsyncSession, actor: Actor, service: Service, revision: ServiceRevision, count: int
) -> list[Any]:
    """Submit ``count`` replica jobs of the revision (as ``actor``: the deployer, or the service's owner when the
    platform scales it) and link them. Returns the jobs."""
    started = []
    for _ in range(count):
        try:
            view = await jobs.submit_job(
                session, actor, revision.job_spec, workspace_id=service.workspace_id, service=True
            )
        except AicenterError as exc:
            raise _as_revision_field(exc) from None
        session.add(ServiceReplica(revision_id=revision.id, service_id=service.id, job_id=view.job.id))
        started.append(view.job)
    if started:
        await session.flush()
    return started


def _as_revision_field(exc: AicenterError) -> AicenterError:
    """A replica job's ``tasks[0].resources.x`` is the service's ``resources.x``."""
    field = exc.details.get("field")
    if isinstance(field, str) and field.startswith("tasks[0]."):
        exc.details["field"] = field.removeprefix("tasks[0].")
        exc.message = exc.message.replace(field, exc.details["field"], 1)
        exc.args = (exc.message,)
    return exc


async def deploy_service(
    session: AsyncSession, actor: Actor, source: str | Mapping[str, Any], *, workspace_id: int | None = None
) -> int:
    """Deploy a model version as a new service; returns its id.

    Raises:
        ValidationFailed: A malformed request (``field`` names the problem); a model whose format no runtime
            serves; resources outside the pools.
        NotFound: The workspace, or a model version the deployer cannot see.
        Conflict: A service of that name exists in the workspace; the version is not ready.
        QuotaExceeded: Its first replica is larger than the workspace's quota.
    """
    spec = parse_deploy_spec(source)
    workspace = await jobs.resolve_workspace(session, actor, spec.workspace, workspace_id)
    await billing.admit(session, workspace.id)
    taken = await session.scalar(
        select(Service.id).where(Service.workspace_id == workspace.id, Service.name == spec.name)
    )
    if taken is not None:
        raise Conflict(
            f'workspace {workspace.name} has a service named "{spec.name}" already (service {taken}); '
            "update it with a new revision, or pick another name",
            details={"field": "name", "service_id": taken},
        )
    service = Service(
        workspace_id=workspace.id,
        user_id=actor.user_id or None,
        name=spec.name,
        description=spec.description,
        status=ServiceStatus.DEPLOYING.value,
        ab_header=spec.ab_header,
        max_body_bytes=spec.max_body_bytes,
    )
    session.add(service)
    await session.flush()
    revision = await _revision(session, actor, service, spec.revision(), target_traffic=100, rollout=Rollout())
    audit.record(
        session,
        actor,
        "service.deploy",
        "service",
        service.id,
        workspace_id=workspace.id,
        details={"name": service.name, "model": revision.model_ref, "runtime": revision.runtime},
    )
    record_service_event(
        session, service, "service.deployed",
        f"deployed by {actor.username}: revision 1, {_serves(revision)}",
        details={"revision": revision.number, "model": revision.model_ref, "runtime": revision.runtime},
    )  # fmt: skip
    notify_changed(session)  # the gateway knows the service (or revision) at once
    return service.id


async def update_service(
    session: AsyncSession, actor: Actor, service_id: int, source: str | Mapping[str, Any]
) -> ServiceRevision:
    """Deploy a new revision: the current revision's spec overlaid with the request's changes, and a
    ``rollout`` (``{"strategy": "all" | "steps" | "canary", ...}``) saying how traffic moves once it is ready.

    Raises:
        ValidationFailed, NotFound, Conflict, QuotaExceeded: As for deploy.
        Conflict: Another revision is still starting or a canary is under way (promote or roll it back first).
    """
    service = await load_service(session, actor, service_id, for_update=True)
    await require_manager(session, actor, service, "update")
    await billing.admit(session, service.workspace_id)  # a new revision starts replicas
    data = dict(_mapping(source))
    rollout = Rollout.model_validate(data.pop("rollout", None) or {})
    revisions = list(
        (await session.scalars(select(ServiceRevision).where(ServiceRevision.service_id == service.id))).all()
    )
    busy = [
        r
        for r in revisions
        if r.state == RevisionState.STARTING.value
        or (r.state == RevisionState.READY.value and r.id != service.stable_revision_id and r.traffic > 0)
    ]
    if busy:
        raise Conflict(
            f"revision {busy[0].number} of service {service.name} is still rolling out; promote or roll it back first",
            details={"revision": busy[0].number},
        )
    base = _base_spec(revisions, service.stable_revision_id)
    spec = parse_revision_spec(data, base)
    # A canary of 0 % is an A/B test by header only (the revision's header_value routes to it).
    target = rollout.canary_percent if rollout.strategy is RolloutStrategy.CANARY else 100
    if target == 0 and not spec.header_value:
        raise ValidationFailed("a 0 % canary is reached by its header only: give header_value", field="header_value")
    revision = await _revision(session, actor, service, spec, target_traffic=target, rollout=rollout)
    service.status = ServiceStatus.UPDATING.value
    service.updated_at = utcnow()
    audit.record(
        session,
        actor,
        "service.update",
        "service",
        service.id,
        workspace_id=service.workspace_id,
        details={"revision": revision.number, "model": revision.model_ref, "rollout": rollout.strategy.value},
    )
    how = f"canary {rollout.canary_percent} %" if rollout.strategy is RolloutStrategy.CANARY else rollout.strategy.value
    record_service_event(
        session, service, "service.updated",
        f"revision {revision.number} deployed by {actor.username}: {_serves(revision)}, rollout {how}",
        details={"revision": revision.number, "model": revision.model_ref, "rollout": rollout.strategy.value},
    )  # fmt: skip
    notify_changed(session)  # the gateway knows the service (or revision) at once
    return revision


def _serves(revision: ServiceRevision) -> str:
    if revision.model_ref:
        return f"model {revision.model_ref} ({revision.runtime})"
    return f"runtime {revision.runtime}"


def _mapping(source: str | Mapping[str, Any]) -> Mapping[str, Any]:
    """A revision's fields from their text form (as the CLI sends a spec file) or as given."""
    if isinstance(source, str):
        data = load_document(source)
        if not isinstance(data, Mapping):
            raise ValidationFailed("a revision is a mapping of fields (model, runtime, resources, rollout, ...)")
        return data
    return source


def _base_spec(revisions: list[ServiceRevision], stable_id: int | None) -> dict[str, Any]:
    """The spec a new revision starts from: the stable revision's, else the newest one's."""
    base = next((r for r in revisions if r.id == stable_id), None) or max(
        revisions, key=lambda r: r.number, default=None
    )
    if base is None:
        return {}
    spec = dict(base.spec)
    spec.pop("rollout", None)
    return spec
