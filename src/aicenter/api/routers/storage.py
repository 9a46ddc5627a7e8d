"""Storage quota and use per workspace; garbage collection and integrity checks of the artifact store."""

from __future__ import annotations

from fastapi import APIRouter

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.catalog import FsckIn, FsckOut, GcOut, StorageLimitIn, StorageOut
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.core.quantity import parse_memory
from aicenter.services import catalog

router = APIRouter(prefix="/api/v1", tags=["storage"], responses=ERROR_RESPONSES)


@router.get("/workspaces/{workspace_id}/storage", openapi_extra=access(Access.WORKSPACE))
async def get_storage(workspace_id: Id, actor: CurrentActor, session: ReadSession) -> StorageOut:
    """The workspace's storage quota and the logical size of its items' versions (copies count in full)."""
    return StorageOut.of(await catalog.storage_usage(session, actor, workspace_id))


@router.put("/workspaces/{workspace_id}/storage", openapi_extra=access(Access.ADMIN))
async def set_storage(workspace_id: Id, body: StorageLimitIn, actor: CurrentActor, session: WriteSession) -> StorageOut:
    """Set the storage quota ("100Gi", bytes) or remove it (null). Versions above a lowered quota stay."""
    limit = None if body.limit is None else parse_memory(body.limit, field="limit")
    return StorageOut.of(await catalog.set_storage_quota(session, actor, workspace_id, limit))


@router.post("/admin/storage/gc", openapi_extra=access(Access.ADMIN))
async def storage_gc(actor: CurrentActor, ctx: Ctx) -> GcOut:
    """Expire stale uploads, then delete blobs no version or open upload refers to (older than the grace time)."""
    report = await catalog.run_gc(ctx.db, ctx.store, ctx.settings, actor=actor)
    return GcOut.model_validate(report)


@router.post("/admin/storage/fsck", openapi_extra=access(Access.ADMIN))
async def storage_fsck(body: FsckIn, actor: CurrentActor, ctx: Ctx) -> FsckOut:
    """Re-hash every referenced blob; with repair, move damaged ones to quarantine. Reads the whole store."""
    report = await catalog.run_fsck(ctx.db, actor, ctx.store, repair=body.repair)
    return FsckOut.model_validate(report)
