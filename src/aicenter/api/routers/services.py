"""Inference services: deploy, list, get, update (a new revision), traffic, promote, rollback, scale, stop,
start, delete, API keys, the service's events and the load the gateways saw.

A service's replicas are jobs (kind ``service``): their logs, events and machine time are the jobs'
(``/api/v1/jobs/{id}/...``). The service itself answers under ``/serve/<workspace>/<service>/`` (the gateway).
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Response, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.alerts import ClusterEventOut
from aicenter.api.schemas.common import ADMISSION_RESPONSES, Page
from aicenter.api.schemas.serving import (
    CreatedKeyOut,
    KeyIn,
    KeyOut,
    LoadPointOut,
    ScaleIn,
    ServiceDeploy,
    ServiceDetail,
    ServiceOut,
    ServiceUpdate,
    TrafficIn,
)
from aicenter.core.serving.apidoc import build_api_doc
from aicenter.services import serving

router = APIRouter(prefix="/api/v1/services", tags=["services"], responses=ADMISSION_RESPONSES)


async def _one(actor: CurrentActor, session: ReadSession | WriteSession, service_id: int) -> ServiceDetail:
    return ServiceDetail.from_view(await serving.get_service(session, actor, service_id))


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def deploy_service(body: ServiceDeploy, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Deploy a model version as a service: its first revision starts one replica at once and takes all
    traffic once ready. Refused whole (4xx naming the field) when it could never run."""
    service_id = await serving.deploy_service(session, actor, body.spec, workspace_id=body.workspace_id)
    return await _one(actor, session, service_id)


@router.get("", openapi_extra=access(Access.USER))
async def list_services(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    workspace_id: Id | None = None,
    name: Annotated[str | None, Query(description="Only the service of this name.")] = None,
    status_: Annotated[
        str | None, Query(alias="status", description="deploying, ready, updating, failed, stopped")
    ] = None,
) -> Page[ServiceOut]:
    """Services of your workspaces, newest first (platform admins: every workspace's)."""
    page = await serving.list_services(
        session, actor, workspace_id=workspace_id, name=name, status=status_, cursor=paging.cursor, limit=paging.limit
    )
    return Page(items=[ServiceOut.from_view(v) for v in page.items], next_cursor=page.next_cursor)


@router.get("/{service_id}", openapi_extra=access(Access.USER))
async def get_service(service_id: Id, actor: CurrentActor, session: ReadSession) -> ServiceDetail:
    """The service with its revisions (traffic, state, scaling) and live replicas."""
    return await _one(actor, session, service_id)


@router.patch("/{service_id}", openapi_extra=access(Access.USER))
async def update_service(
    service_id: Id, body: ServiceUpdate, actor: CurrentActor, session: WriteSession
) -> ServiceDetail:
    """Deploy a new revision (the current one's spec with these changes); traffic moves to it once it is ready,
    all at once, by steps, or held at a canary percentage until promoted or rolled back."""
    await serving.update_service(session, actor, service_id, body.spec)
    return await _one(actor, session, service_id)


@router.put("/{service_id}/traffic", openapi_extra=access(Access.USER))
async def set_traffic(service_id: Id, body: TrafficIn, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Split traffic between ready revisions by percentage (summing to 100)."""
    await serving.set_traffic(session, actor, service_id, body.traffic)
    return await _one(actor, session, service_id)


@router.post("/{service_id}/promote", openapi_extra=access(Access.USER))
async def promote_service(service_id: Id, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Send all traffic to the revision rolling out (a canary); the old revision drains and stops."""
    await serving.promote_service(session, actor, service_id)
    return await _one(actor, session, service_id)


@router.post("/{service_id}/rollback", openapi_extra=access(Access.USER))
async def rollback_service(service_id: Id, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Retire the revision rolling out: all traffic returns to the stable revision at once."""
    await serving.rollback_service(session, actor, service_id)
    return await _one(actor, session, service_id)


@router.post("/{service_id}/scale", openapi_extra=access(Access.USER))
async def scale_service(service_id: Id, body: ScaleIn, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Change the scale bounds (min 0 allows scale to zero) or the target concurrency per replica."""
    await serving.scale_service(
        session,
        actor,
        service_id,
        min_replicas=body.min_replicas,
        max_replicas=body.max_replicas,
        target_concurrency=body.target_concurrency,
    )
    return await _one(actor, session, service_id)


@router.post("/{service_id}/stop", openapi_extra=access(Access.USER))
async def stop_service(service_id: Id, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Stop it (its owner, a workspace admin; platform admins force-stop): replicas drain and stop, requests get
    503 until it is started again."""
    await serving.stop_service(session, actor, service_id)
    return await _one(actor, session, service_id)


@router.post("/{service_id}/start", openapi_extra=access(Access.USER))
async def start_service(service_id: Id, actor: CurrentActor, session: WriteSession) -> ServiceDetail:
    """Start a stopped service again."""
    await serving.start_service(session, actor, service_id)
    return await _one(actor, session, service_id)


@router.delete("/{service_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_service(service_id: Id, actor: CurrentActor, session: WriteSession) -> Response:
    """Delete a stopped service (its replica jobs stay, with their machine time)."""
    await serving.delete_service(session, actor, service_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{service_id}/keys", openapi_extra=access(Access.USER))
async def list_keys(service_id: Id, actor: CurrentActor, session: ReadSession) -> list[KeyOut]:
    """The service's live API keys (names and prefixes; the keys themselves are shown once, at creation)."""
    return [KeyOut.from_row(k) for k in await serving.list_keys(session, actor, service_id)]


@router.post("/{service_id}/keys", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def create_key(service_id: Id, body: KeyIn, actor: CurrentActor, session: WriteSession) -> CreatedKeyOut:
    """A new API key (send it as `Authorization: Bearer <key>` or `X-Api-Key`); shown this once."""
    created = await serving.create_key(session, actor, service_id, body.name)
    return CreatedKeyOut.from_created(created)


@router.delete("/{service_id}/keys/{key_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def revoke_key(service_id: Id, key_id: Id, actor: CurrentActor, session: WriteSession) -> Response:
    """Revoke a key: calls with it are refused within a second."""
    await serving.revoke_key(session, actor, service_id, key_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.get("/{service_id}/events", openapi_extra=access(Access.USER))
async def list_service_events(
    service_id: Id, actor: CurrentActor, session: ReadSession, paging: Paging
) -> Page[ClusterEventOut]:
    """The service's history, newest first: deployed, updated, revisions ready or failed, traffic moves, the
    autoscaler's changes of target (with its reason), stopped, started. Members of its workspace and platform
    admins."""
    page = await serving.list_service_events(session, actor, service_id, limit=paging.limit, cursor=paging.cursor)
    return Page(items=[ClusterEventOut.model_validate(e) for e in page.items], next_cursor=page.next_cursor)


@router.get("/{service_id}/load", openapi_extra=access(Access.USER))
async def service_load(
    service_id: Id,
    actor: CurrentActor,
    session: ReadSession,
    minutes: Annotated[int, Query(ge=1, le=60, description="How far back.")] = 60,
) -> list[LoadPointOut]:
    """Requests, errors, concurrency and latency per revision as the gateways reported them (every second or
    so, all gateways summed): the console's charts."""
    return [LoadPointOut.from_point(p) for p in await serving.service_load(session, actor, service_id, minutes=minutes)]


@router.get("/{service_id}/openapi.json", openapi_extra=access(Access.USER))
async def service_openapi(service_id: Id, actor: CurrentActor, session: ReadSession, ctx: Ctx) -> dict[str, Any]:
    """The service's own API as OpenAPI 3.1: the Open Inference Protocol v2 endpoints with its stable revision's
    inputs and outputs (or the OpenAI-compatible ``/v1`` API for a command runtime), at the server's public URL."""
    view = await serving.get_service(session, actor, service_id)
    stable = next((r for r in view.revisions if r.id == view.service.stable_revision_id), None)
    doc = build_api_doc(
        service_name=view.service.name,
        url_path=view.url_path,
        base_url=ctx.settings.api_url,
        signature=stable.signature if stable is not None else None,
        runtime=stable.runtime if stable is not None else view.runtime,
        revision=stable.number if stable is not None else None,
    )
    return doc.openapi
