"""Upload sessions (parts, bundles, commit) and resolving a version reference: /api/v1/uploads, /catalog/resolve.

Routes that move bytes hold no database session while they do: they authorize in a short read, then stream
the request body into the store's staging area. A request session would keep a pooled connection busy for the
whole transfer, and a handful of slow uploads would starve every other request.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, ReadSession, WriteSession
from aicenter.api.params import Id, Index
from aicenter.api.schemas.catalog import BundleReceived, UploadOut, VersionOut
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.core.catalog import ItemKind
from aicenter.services import catalog

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


def _raw_body(description: str) -> dict[str, Any]:
    """OpenAPI for a raw request body, which FastAPI cannot infer from ``request.stream()``."""
    return {
        "requestBody": {
            "required": True,
            "description": description,
            "content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}},
        }
    }


@router.get("/catalog/resolve", tags=["catalog"], openapi_extra=access(Access.USER))
async def resolve(
    actor: CurrentActor,
    session: ReadSession,
    kind: Annotated[ItemKind, Query(description="dataset, algorithm, image or model.")],
    ref: Annotated[
        str,
        Query(
            min_length=1,
            max_length=256,
            description='"name:3", "name" (latest ready), "owner/name:3", "preset/name:3" or "#<version id>".',
        ),
    ],
    workspace_id: Annotated[Id | None, Query(description="Prefer versions shared with this workspace.")] = None,
) -> VersionOut:
    """The version a reference names, as jobs and the CLI write it."""
    return VersionOut.of(await catalog.resolve_version(session, actor, kind, ref, workspace_id=workspace_id))


@router.get("/uploads/{upload_id}", tags=["uploads"], openapi_extra=access(Access.USER))
async def get_upload(upload_id: Id, actor: CurrentActor, session: ReadSession, ctx: Ctx) -> UploadOut:
    """An upload of yours, with the parts still missing: what a resumed transfer must send."""
    return UploadOut.of(await catalog.get_upload(session, actor, ctx.store, upload_id))


@router.put(
    "/uploads/{upload_id}/files/{index}/parts/{part}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["uploads"],
    openapi_extra={
        **access(Access.USER),
        **_raw_body("Bytes part*part_size .. of the file: exactly part_size, less for the file's last part."),
    },
)
async def put_part(
    upload_id: Id,
    index: Index,
    part: Index,
    request: Request,
    actor: CurrentActor,
    ctx: Ctx,
    part_sha256: Annotated[
        str,
        Header(
            alias="X-Part-Sha256",
            pattern=r"^[0-9a-fA-F]{64}$",
            description="sha256 of this part's bytes (64 hex digits).",
        ),
    ],
) -> None:
    """Send part ``part`` (from 0) of file ``index``. Parts may come in any order and in parallel; re-sending
    a received part is harmless. 422 hash_mismatch if the bytes do not hash to X-Part-Sha256."""
    async with ctx.db.read() as session:
        target = await catalog.part_target(session, actor, upload_id, index, part)
    await catalog.receive_part(ctx.store, target, part_sha256.lower(), request.stream())


@router.post(
    "/uploads/{upload_id}/bundle",
    tags=["uploads"],
    openapi_extra={
        **access(Access.USER),
        **_raw_body(
            "Whole small files back to back, each a 48-byte ASCII header (16 hex digits of the index, 16 of the "
            'size, 16 "0") followed by its bytes.'
        ),
    },
)
async def post_bundle(
    upload_id: Id,
    request: Request,
    actor: CurrentActor,
    ctx: Ctx,
    content_type: Annotated[
        str,
        Header(alias="Content-Type", pattern=r"^application/octet-stream", description="application/octet-stream"),
    ],
) -> BundleReceived:
    """Several whole files in one request (what makes uploading many small files fast). Files before a bad one
    stay received."""
    async with ctx.db.read() as session:
        target = await catalog.bundle_target(session, actor, upload_id)
    received = await catalog.receive_bundle(ctx.store, target, request.stream())
    return BundleReceived(received=received)


@router.post(
    "/uploads/{upload_id}/commit",
    status_code=status.HTTP_201_CREATED,
    tags=["uploads"],
    openapi_extra=access(Access.USER),
)
async def commit_upload(upload_id: Id, actor: CurrentActor, ctx: Ctx) -> VersionOut:
    """Turn the upload into a new version; 409 upload_incomplete (details.missing) while parts are missing.
    Retrying a commit that succeeded answers the same version."""
    # No request session: the commit hashes and moves files outside any transaction, then writes in one.
    return VersionOut.of(await catalog.commit_upload(ctx.db, actor, ctx.store, ctx.settings, upload_id))


@router.delete(
    "/uploads/{upload_id}", status_code=status.HTTP_204_NO_CONTENT, tags=["uploads"], openapi_extra=access(Access.USER)
)
async def abort_upload(upload_id: Id, actor: CurrentActor, session: WriteSession, ctx: Ctx) -> None:
    """Abandon the upload and drop what was received."""
    await catalog.abort_upload(session, actor, ctx.store, upload_id)
