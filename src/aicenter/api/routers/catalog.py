"""Catalog items of one kind, their versions and their content: /api/v1/datasets, /algorithms, /images, /models.

The four collections have the same shape, so one factory builds them (``catalog_router(kind)``); images add the
build routes. Content answers (files, archives) are checked before the response starts, so a refusal is a JSON
error and never a truncated download; bytes are streamed after the request's session is closed.
"""

from __future__ import annotations

from functools import partial
from pathlib import PurePosixPath
from typing import Annotated, Any, Literal
from urllib.parse import quote

from fastapi import APIRouter, Query, status
from fastapi.responses import FileResponse, StreamingResponse
from starlette.concurrency import iterate_in_threadpool

from aicenter.api.access import Access, access
from aicenter.api.blobresponse import BlobResponse
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.catalog import (
    ArchiveRequest,
    BuildOut,
    CopyIn,
    FileOut,
    ImportIn,
    ItemCreate,
    ItemOut,
    ItemUpdate,
    PreviewOut,
    ShareIn,
    UploadCreate,
    UploadOut,
    VersionCreate,
    VersionOut,
    VersionUpdate,
)
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.core.catalog import ItemKind, Scope, Visibility
from aicenter.services import catalog
from aicenter.storage import BlobStore, FileEntry, iter_tar, quarantine_damaged

Sort = Literal["-updated_at", "updated_at", "name", "-name", "created_at", "-created_at"]

_FILE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/octet-stream": {}}, "description": "The file's bytes; ETag is its sha256."},
    206: {"content": {"application/octet-stream": {}}, "description": "The requested byte range."},
    416: {"description": "The range lies beyond the end of the file (Content-Range: bytes */size)."},
    500: {"description": "`damaged`: the stored content is missing or has the wrong length (then quarantined)."},
}
_TAR_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/x-tar": {}}, "description": "An uncompressed POSIX tar, streamed."}
}


def _attachment(filename: str) -> str:
    """A Content-Disposition header value; non-ASCII names in RFC 5987 form."""
    quoted = quote(filename)
    if quoted == filename:
        return f'attachment; filename="{filename}"'
    return f"attachment; filename*=utf-8''{quoted}"


def _tar_response(store: BlobStore, entries: list[FileEntry], filename: str) -> StreamingResponse:
    # iter_tar reads blobs with blocking I/O: each chunk is produced in a worker thread.
    return StreamingResponse(
        iterate_in_threadpool(iter_tar(store, entries)),
        media_type="application/x-tar",
        headers={"Content-Disposition": _attachment(filename)},
    )


def catalog_router(kind: ItemKind) -> APIRouter:
    """The routes of one kind under ``/api/v1/<kind.plural>``."""
    router = APIRouter(prefix=f"/api/v1/{kind.plural}", tags=[kind.plural], responses=ERROR_RESPONSES)
    noun = kind.value

    # --- items ---------------------------------------------------------------------------------------------

    @router.get("", openapi_extra=access(Access.USER), summary=f"List {kind.plural}")
    async def list_items(
        actor: CurrentActor,
        session: ReadSession,
        paging: Paging,
        scope: Annotated[
            Scope, Query(description="mine, workspace (shared with my workspaces), public, preset, all (admins).")
        ] = Scope.MINE,
        workspace_id: Annotated[Id | None, Query(description="With scope=workspace: only this workspace.")] = None,
        q: Annotated[str | None, Query(max_length=256, description="Substring of name or description.")] = None,
        tag: Annotated[str | None, Query(max_length=64, description="Only items carrying this tag.")] = None,
        sort: Annotated[Sort, Query(description="Order; a leading - is descending.")] = "-updated_at",
    ) -> Page[ItemOut]:
        page = await catalog.list_items(
            session,
            actor,
            kind,
            scope=scope,
            workspace_id=workspace_id,
            q=q,
            tag=tag,
            sort=sort,
            limit=paging.limit,
            cursor=paging.cursor,
        )
        return Page(items=[ItemOut.of(v) for v in page.items], next_cursor=page.next_cursor)

    @router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER), summary=f"Create a {noun}")
    async def create_item(body: ItemCreate, actor: CurrentActor, session: WriteSession) -> ItemOut:
        view = await catalog.create_item(
            session,
            actor,
            kind,
            name=body.name,
            workspace_id=body.workspace_id,
            description=body.description,
            tags=body.tags,
            metadata=body.metadata,
            preset=body.preset,
        )
        return ItemOut.of(view)

    @router.get("/{item_id}", openapi_extra=access(Access.USER), summary=f"Get a {noun}")
    async def get_item(item_id: Id, actor: CurrentActor, session: ReadSession) -> ItemOut:
        return ItemOut.of(await catalog.get_item(session, actor, kind, item_id))

    @router.patch("/{item_id}", openapi_extra=access(Access.USER), summary=f"Update a {noun}")
    async def update_item(item_id: Id, body: ItemUpdate, actor: CurrentActor, session: WriteSession) -> ItemOut:
        return ItemOut.of(await catalog.update_item(session, actor, kind, item_id, **body.changes()))

    @router.delete(
        "/{item_id}",
        status_code=status.HTTP_204_NO_CONTENT,
        openapi_extra=access(Access.USER),
        summary=f"Delete a {noun}",
    )
    async def delete_item(item_id: Id, actor: CurrentActor, session: WriteSession) -> None:
        """Delete the item and its versions; 409 in_use while a job or service uses one of them."""
        await catalog.delete_item(session, actor, kind, item_id)

    # --- versions ------------------------------------------------------------------------------------------

    @router.get("/{item_id}/versions", openapi_extra=access(Access.USER), summary=f"List versions of a {noun}")
    async def list_versions(item_id: Id, actor: CurrentActor, session: ReadSession, paging: Paging) -> Page[VersionOut]:
        """The versions you can see, newest first."""
        page = await catalog.list_versions(session, actor, kind, item_id, limit=paging.limit, cursor=paging.cursor)
        return Page(items=[VersionOut.of(v) for v in page.items], next_cursor=page.next_cursor)

    @router.post(
        "/{item_id}/versions",
        status_code=status.HTTP_201_CREATED,
        openapi_extra=access(Access.USER),
        summary=f"Create a {noun} version without files",
    )
    async def create_version(
        item_id: Id, body: VersionCreate, actor: CurrentActor, session: WriteSession
    ) -> VersionOut:
        """A version without files: for images the build spec (a venv spec queues a build); versions with files
        come from uploads."""
        view = await catalog.create_version(
            session, actor, kind, item_id, description=body.description, metadata=body.metadata
        )
        return VersionOut.of(view)

    @router.get("/{item_id}/versions/{number}", openapi_extra=access(Access.USER), summary=f"Get a {noun} version")
    async def get_version(item_id: Id, number: Id, actor: CurrentActor, session: ReadSession) -> VersionOut:
        return VersionOut.of(await catalog.get_version(session, actor, kind, item_id, number))

    @router.patch("/{item_id}/versions/{number}", openapi_extra=access(Access.USER), summary=f"Update a {noun} version")
    async def update_version(
        item_id: Id, number: Id, body: VersionUpdate, actor: CurrentActor, session: WriteSession
    ) -> VersionOut:
        """Description and metadata only: a version's files never change."""
        return VersionOut.of(await catalog.update_version(session, actor, kind, item_id, number, **body.changes()))

    @router.delete(
        "/{item_id}/versions/{number}",
        status_code=status.HTTP_204_NO_CONTENT,
        openapi_extra=access(Access.USER),
        summary=f"Delete a {noun} version",
    )
    async def delete_version(item_id: Id, number: Id, actor: CurrentActor, session: WriteSession) -> None:
        """409 in_use while a job or service uses the version."""
        await catalog.delete_version(session, actor, kind, item_id, number)

    @router.post(
        "/{item_id}/versions/{number}/share", openapi_extra=access(Access.USER), summary=f"Share a {noun} version"
    )
    async def share_version(
        item_id: Id, number: Id, body: ShareIn, actor: CurrentActor, session: WriteSession
    ) -> VersionOut:
        """Share with a workspace you are a member of (default: the item's) or with everyone (public)."""
        view = await catalog.share_version(
            session,
            actor,
            kind,
            item_id,
            number,
            visibility=Visibility(body.visibility),
            workspace_id=body.workspace_id,
        )
        return VersionOut.of(view)

    @router.post(
        "/{item_id}/versions/{number}/unshare",
        openapi_extra=access(Access.USER),
        summary=f"Make a {noun} version private again",
    )
    async def unshare_version(item_id: Id, number: Id, actor: CurrentActor, session: WriteSession) -> VersionOut:
        return VersionOut.of(await catalog.unshare_version(session, actor, kind, item_id, number))

    @router.post(
        "/{item_id}/versions/{number}/copy",
        status_code=status.HTTP_201_CREATED,
        openapi_extra=access(Access.USER),
        summary=f"Copy a {noun} version into your own item",
    )
    async def copy_version(
        item_id: Id, number: Id, body: CopyIn, actor: CurrentActor, session: WriteSession
    ) -> VersionOut:
        """A new private version of your item (created if missing) with the same files; no bytes are copied,
        but the copy counts against the storage quota in full."""
        view = await catalog.copy_version(
            session,
            actor,
            kind,
            item_id,
            number,
            name=body.name,
            workspace_id=body.workspace_id,
            description=body.description,
        )
        return VersionOut.of(view)

    # --- content -------------------------------------------------------------------------------------------

    @router.get(
        "/{item_id}/versions/{number}/files",
        openapi_extra=access(Access.USER),
        summary=f"List the files of a {noun} version",
    )
    async def list_files(
        item_id: Id,
        number: Id,
        actor: CurrentActor,
        session: ReadSession,
        prefix: Annotated[str | None, Query(max_length=1024, description="Only paths starting with this.")] = None,
        limit: Annotated[int, Query(ge=1, le=1000, description="Files per page.")] = 1000,
        cursor: Annotated[str | None, Query(description="The next_cursor of the previous page.")] = None,
    ) -> Page[FileOut]:
        page = await catalog.list_files(
            session, actor, kind, item_id, number, prefix=prefix, limit=limit, cursor=cursor
        )
        return Page(items=[FileOut.of(f) for f in page.items], next_cursor=page.next_cursor)

    @router.get(
        "/{item_id}/versions/{number}/files/{path:path}",
        response_class=FileResponse,
        responses=_FILE_RESPONSES,
        openapi_extra=access(Access.USER),
        summary=f"Download a file of a {noun} version",
    )
    async def download_file(
        item_id: Id, number: Id, path: str, actor: CurrentActor, session: ReadSession, ctx: Ctx
    ) -> FileResponse:
        """The file's bytes. Supports ``Range: bytes=a-b`` (206 with Content-Range; 416 beyond the end) and
        ``If-Range`` with the ETag, which is the file's sha256, so an interrupted download resumes safely."""
        # The service checks the blob's length and gives its stat: a missing or damaged blob is a 500 `damaged`
        # before any byte is sent, instead of an error (or wrong bytes) after the response started.
        view, blob, stat_result = await catalog.get_file(session, actor, ctx.store, kind, item_id, number, path)
        return BlobResponse(
            blob,
            sha256=view.sha256,
            on_damaged=partial(quarantine_damaged, ctx.store, view.sha256),
            filename=PurePosixPath(view.path).name,
            stat_result=stat_result,
            headers={"ETag": f'"{view.sha256}"'},
        )

    @router.get(
        "/{item_id}/versions/{number}/archive",
        response_class=StreamingResponse,
        responses=_TAR_RESPONSES,
        openapi_extra=access(Access.USER),
        summary=f"Download a {noun} version as a tar",
    )
    async def get_archive(
        item_id: Id, number: Id, actor: CurrentActor, session: ReadSession, ctx: Ctx
    ) -> StreamingResponse:
        version = await catalog.get_version(session, actor, kind, item_id, number)
        entries = await catalog.archive_entries(session, actor, kind, item_id, number)
        return _tar_response(ctx.store, entries, f"{version.item_name}-{version.number}.tar")

    @router.post(
        "/{item_id}/versions/{number}/archive",
        response_class=StreamingResponse,
        responses=_TAR_RESPONSES,
        openapi_extra=access(Access.USER),
        summary=f"Download some files of a {noun} version as a tar",
    )
    async def post_archive(
        item_id: Id, number: Id, body: ArchiveRequest, actor: CurrentActor, session: ReadSession, ctx: Ctx
    ) -> StreamingResponse:
        """A tar of the paths listed (default: every file); an unknown path is a 404 before anything is sent."""
        version = await catalog.get_version(session, actor, kind, item_id, number)
        entries = await catalog.archive_entries(session, actor, kind, item_id, number, paths=body.paths)
        return _tar_response(ctx.store, entries, f"{version.item_name}-{version.number}.tar")

    @router.get(
        "/{item_id}/versions/{number}/preview/{path:path}",
        openapi_extra=access(Access.USER),
        summary=f"Preview a file of a {noun} version",
    )
    async def preview_file(
        item_id: Id, number: Id, path: str, actor: CurrentActor, session: ReadSession, ctx: Ctx
    ) -> PreviewOut:
        """The head of a text file, the first rows of a CSV, or the media type of an image."""
        preview = await catalog.preview(session, actor, ctx.store, kind, item_id, number, path)
        return PreviewOut.model_validate(preview)

    # --- new versions with files ---------------------------------------------------------------------------

    @router.post(
        "/{item_id}/uploads",
        status_code=status.HTTP_201_CREATED,
        openapi_extra=access(Access.USER),
        summary=f"Start an upload of a new {noun} version",
    )
    async def start_upload(
        item_id: Id, body: UploadCreate, actor: CurrentActor, session: WriteSession, ctx: Ctx
    ) -> UploadOut:
        """Declare the files; the answer's ``needed`` lists those whose bytes must be sent (files already in the
        store are not). Send them as parts or bundles under /uploads/{upload_id}, then commit."""
        view = await catalog.start_upload(
            session,
            actor,
            ctx.store,
            ctx.settings,
            kind,
            item_id,
            files=[f.model_dump(exclude_none=True) for f in body.files],
            archive=body.archive,
            description=body.description,
            metadata=body.metadata,
        )
        return UploadOut.of(view)

    @router.post(
        "/{item_id}/imports",
        status_code=status.HTTP_201_CREATED,
        openapi_extra=access(Access.ADMIN),
        summary=f"Import a server directory as a preset {noun} version",
    )
    async def import_directory(item_id: Id, body: ImportIn, actor: CurrentActor, ctx: Ctx) -> VersionOut:
        """Platform admins: a directory under one of the server's import roots becomes a version of a preset item."""
        # No request session: the import copies files into the store and manages its own transactions.
        view = await catalog.import_directory(
            ctx.db,
            actor,
            ctx.store,
            ctx.settings,
            kind,
            item_id,
            path=body.path,
            description=body.description,
            metadata=body.metadata,
        )
        return VersionOut.of(view)

    if kind is ItemKind.IMAGE:
        _add_build_routes(router)
    return router


def _add_build_routes(router: APIRouter) -> None:
    @router.get("/{item_id}/versions/{number}/build", openapi_extra=access(Access.USER), summary="Get an image build")
    async def get_build(item_id: Id, number: Id, actor: CurrentActor, session: ReadSession, ctx: Ctx) -> BuildOut:
        """The build state of a venv image version and the end of its log."""
        return BuildOut.of(await catalog.get_build(session, actor, ctx.store, item_id, number))

    @router.post(
        "/{item_id}/versions/{number}/build", openapi_extra=access(Access.USER), summary="Retry a failed image build"
    )
    async def rebuild(item_id: Id, number: Id, actor: CurrentActor, session: WriteSession) -> BuildOut:
        return BuildOut.of(await catalog.rebuild(session, actor, item_id, number))


ROUTERS: list[APIRouter] = [catalog_router(kind) for kind in ItemKind]
