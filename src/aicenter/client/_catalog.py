"""The catalog: datasets, algorithms, images and models, their versions, files, builds and storage admin.

One generic set of methods with the kind first (``list_items("dataset")``) instead of one set per kind: the four
kinds share every endpoint shape (``/datasets``, ``/algorithms``, ``/images``, ``/models``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

import httpx

from aicenter.client._base import PAGE_SIZE, UNSET, BaseClient, _error_from, body, query
from aicenter.client.errors import ConnectionFailed
from aicenter.client.models import (
    Build,
    FileInfo,
    FsckReport,
    GcReport,
    Item,
    Page,
    StorageUsage,
    Upload,
    Version,
)

KINDS = ("dataset", "algorithm", "image", "model")
FILES_PAGE = 1000  # the server's largest page of a version's files
CHUNK = 1 << 20


def collection(kind: str) -> str:
    """``dataset`` (or ``datasets``) -> ``/datasets``; ValueError for anything else."""
    singular = kind.removesuffix("s")
    if singular not in KINDS:
        raise ValueError(f"unknown kind {kind!r}: expected one of {', '.join(KINDS)}")
    return f"/{singular}s"


def file_url(kind: str, item_id: int, number: int, path: str) -> str:
    return f"{collection(kind)}/{item_id}/versions/{number}/files/{quote(path)}"


class CatalogMixin(BaseClient):
    # -- raw requests (bodies that are not JSON, answers that are streamed) -----------------------------------

    def _headers(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        headers.update(extra or {})
        return headers

    @contextmanager
    def _stream(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        content: bytes | Iterable[bytes] | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> Iterator[httpx.Response]:
        """Send a request and yield the answer unread; error answers are read and raised as ApiError."""
        request = self._http.build_request(
            method,
            path,
            json=json,
            content=content,
            headers=self._headers(headers),
            timeout=timeout if timeout is not None else self._http.timeout,
        )
        try:
            response = self._http.send(request, stream=True)
        except httpx.TimeoutException as exc:
            raise ConnectionFailed(self.base_url, f"timed out ({type(exc).__name__})") from exc
        except httpx.TransportError as exc:
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        try:
            if response.is_error:
                response.read()
                raise _error_from(response)
            yield response
        except httpx.TransportError as exc:  # the connection broke while the body was streamed
            raise ConnectionFailed(self.base_url, str(exc) or type(exc).__name__) from exc
        finally:
            response.close()

    # -- items -------------------------------------------------------------------------------------------------

    def list_items_page(
        self,
        kind: str,
        *,
        scope: str | None = None,
        workspace_id: int | None = None,
        q: str | None = None,
        tag: str | None = None,
        sort: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[Item]:
        """One page of items of ``kind``.

        Args:
            kind: ``dataset``, ``algorithm``, ``image`` or ``model``.
            scope: ``mine`` (default), ``workspace``, ``public``, ``preset``, or ``all`` (platform admins).
            workspace_id: With scope ``workspace``: that workspace (default: all of mine).
            q: Case-insensitive substring of the name or description.
            tag: Items carrying this tag.
            sort: ``-updated_at`` (default), ``updated_at``, ``name``, ``-name``, ``created_at``, ``-created_at``.
            limit: Items per page.
            cursor: ``next_cursor`` of the previous page.
        """
        params = query(scope=scope, workspace_id=workspace_id, q=q, tag=tag, sort=sort)
        return self._page(Item, collection(kind), params, limit=limit, cursor=cursor)

    def list_items(
        self,
        kind: str,
        *,
        scope: str | None = None,
        workspace_id: int | None = None,
        q: str | None = None,
        tag: str | None = None,
        sort: str | None = None,
    ) -> Iterator[Item]:
        """Every matching item, fetched page by page as the iterator advances."""
        collection(kind)  # an unknown kind fails here, not at the first iteration
        return self._iterate(
            lambda c: self.list_items_page(
                kind, scope=scope, workspace_id=workspace_id, q=q, tag=tag, sort=sort, limit=PAGE_SIZE, cursor=c
            )
        )

    def create_item(
        self,
        kind: str,
        name: str,
        *,
        workspace_id: int | None = UNSET,
        description: str = UNSET,
        tags: Sequence[str] = UNSET,
        metadata: Mapping[str, Any] = UNSET,
        preset: bool = UNSET,
    ) -> Item:
        """Create an item in a workspace of mine (default: my default workspace); ``preset=True``: admins only.

        Raises:
            ApiError: ``conflict`` when I already own an item of that kind and name; ``validation_failed`` naming
                ``name`` or ``metadata.<field>``.
        """
        payload = body(
            name=name,
            workspace_id=workspace_id,
            description=description,
            tags=list(tags) if tags is not UNSET else UNSET,
            metadata=dict(metadata) if metadata is not UNSET else UNSET,
            preset=preset,
        )
        return self._one(Item, "POST", collection(kind), json=payload)

    def get_item(self, kind: str, item_id: int) -> Item:
        return self._one(Item, "GET", f"{collection(kind)}/{item_id}")

    def update_item(
        self,
        kind: str,
        item_id: int,
        *,
        name: str = UNSET,
        description: str = UNSET,
        tags: Sequence[str] = UNSET,
        metadata: Mapping[str, Any] = UNSET,
    ) -> Item:
        """Rename an item or change its description, tags or metadata; what is left out stays."""
        payload = body(
            name=name,
            description=description,
            tags=list(tags) if tags is not UNSET else UNSET,
            metadata=dict(metadata) if metadata is not UNSET else UNSET,
        )
        return self._one(Item, "PATCH", f"{collection(kind)}/{item_id}", json=payload)

    def delete_item(self, kind: str, item_id: int) -> None:
        """Delete an item with all its versions (``in_use`` while a job or service uses one)."""
        self._json("DELETE", f"{collection(kind)}/{item_id}")

    # -- versions ----------------------------------------------------------------------------------------------

    def list_versions_page(
        self, kind: str, item_id: int, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Version]:
        """One page of the versions of an item I can see, newest first."""
        return self._page(Version, f"{collection(kind)}/{item_id}/versions", limit=limit, cursor=cursor)

    def list_versions(self, kind: str, item_id: int) -> Iterator[Version]:
        return self._iterate(lambda c: self.list_versions_page(kind, item_id, limit=PAGE_SIZE, cursor=c))

    def get_version(self, kind: str, item_id: int, number: int) -> Version:
        return self._one(Version, "GET", f"{collection(kind)}/{item_id}/versions/{number}")

    def create_version(
        self, kind: str, item_id: int, *, description: str = UNSET, metadata: Mapping[str, Any] = UNSET
    ) -> Version:
        """A version without files: for images the build spec (``{"python": "3.11", "requirements": [...]}``
        or ``{"reference": "docker.io/x:1"}``), for other kinds an empty version. Files come with :meth:`push`."""
        payload = body(description=description, metadata=dict(metadata) if metadata is not UNSET else UNSET)
        return self._one(Version, "POST", f"{collection(kind)}/{item_id}/versions", json=payload)

    def update_version(
        self,
        kind: str,
        item_id: int,
        number: int,
        *,
        description: str = UNSET,
        metadata: Mapping[str, Any] = UNSET,
    ) -> Version:
        """Change a version's description or metadata; its files never change."""
        payload = body(description=description, metadata=dict(metadata) if metadata is not UNSET else UNSET)
        return self._one(Version, "PATCH", f"{collection(kind)}/{item_id}/versions/{number}", json=payload)

    def delete_version(self, kind: str, item_id: int, number: int) -> None:
        """Delete a version (``in_use`` while a job or service uses it)."""
        self._json("DELETE", f"{collection(kind)}/{item_id}/versions/{number}")

    def share_version(
        self, kind: str, item_id: int, number: int, *, visibility: str, workspace_id: int | None = None
    ) -> Version:
        """Share a version with a workspace (``visibility="workspace"``; default: the item's) or everyone
        (``"public"``)."""
        payload = body(visibility=visibility, workspace_id=workspace_id if workspace_id is not None else UNSET)
        return self._one(Version, "POST", f"{collection(kind)}/{item_id}/versions/{number}/share", json=payload)

    def unshare_version(self, kind: str, item_id: int, number: int) -> Version:
        """Make a version private again."""
        return self._one(Version, "POST", f"{collection(kind)}/{item_id}/versions/{number}/unshare")

    def copy_version(
        self,
        kind: str,
        item_id: int,
        number: int,
        *,
        name: str | None = None,
        workspace_id: int | None = None,
        description: str | None = None,
    ) -> Version:
        """Copy a version I can read into a new private version of my own item ``name`` (default: the same name).

        No bytes are copied: the new version points at the same blobs. The copy counts against the workspace's
        storage quota in full.
        """
        payload = body(
            name=name if name is not None else UNSET,
            workspace_id=workspace_id if workspace_id is not None else UNSET,
            description=description if description is not None else UNSET,
        )
        return self._one(Version, "POST", f"{collection(kind)}/{item_id}/versions/{number}/copy", json=payload)

    def resolve(self, kind: str, ref: str, *, workspace_id: int | None = None) -> Version:
        """The version a reference names.

        Args:
            kind: The item kind.
            ref: ``name:3``, ``name`` (latest ready version I can see), ``owner/name:3``, ``preset/name:3`` or
                ``#<version id>``.
            workspace_id: Prefer versions shared with this workspace.

        Raises:
            ApiError: ``not_found``; ``conflict`` when a bare name matches several items (the message lists them
                as ``owner/name``).
        """
        params = query(kind=collection(kind)[1:-1], ref=ref, workspace_id=workspace_id)
        return self._one(Version, "GET", "/catalog/resolve", params=params)

    # -- content -----------------------------------------------------------------------------------------------

    def list_files_page(
        self,
        kind: str,
        item_id: int,
        number: int,
        *,
        prefix: str | None = None,
        limit: int | None = None,
        cursor: str | None = None,
    ) -> Page[FileInfo]:
        path = f"{collection(kind)}/{item_id}/versions/{number}/files"
        return self._page(FileInfo, path, query(prefix=prefix), limit=limit, cursor=cursor)

    def list_files(self, kind: str, item_id: int, number: int, *, prefix: str | None = None) -> Iterator[FileInfo]:
        """Every file of a version (sorted by path), ``prefix`` limiting them to a directory."""
        return self._iterate(
            lambda c: self.list_files_page(kind, item_id, number, prefix=prefix, limit=FILES_PAGE, cursor=c)
        )

    def download_file(
        self, kind: str, item_id: int, number: int, path: str, dest: str | Path | BinaryIO, *, offset: int = 0
    ) -> int:
        """Write one file of a version (from byte ``offset`` on) to ``dest``; returns the bytes written.

        ``dest`` is a path (created, or appended to when ``offset`` > 0) or a binary file object.
        """
        headers = {"Range": f"bytes={offset}-"} if offset else {}
        with self._stream("GET", file_url(kind, item_id, number, path), headers=headers) as response:
            if offset and response.status_code != 206:
                raise ValueError(f"the server ignored the range request for {path} (status {response.status_code})")
            if isinstance(dest, str | Path):
                with open(dest, "ab" if offset else "wb") as fh:
                    return _copy(response, fh)
            return _copy(response, dest)

    def stream_archive(
        self, kind: str, item_id: int, number: int, *, paths: Sequence[str] | None = None
    ) -> Iterator[bytes]:
        """An uncompressed tar of the whole version, or of ``paths``, as a stream of chunks."""
        url = f"{collection(kind)}/{item_id}/versions/{number}/archive"
        method, payload = ("GET", None) if paths is None else ("POST", {"paths": list(paths)})
        with self._stream(method, url, json=payload) as response:
            yield from response.iter_bytes(CHUNK)

    def preview(self, kind: str, item_id: int, number: int, path: str) -> dict[str, Any]:
        """A preview of a file: ``{kind: text|csv|image|binary, text, rows, media_type}``."""
        data: dict[str, Any] = self._json(
            "GET", f"{collection(kind)}/{item_id}/versions/{number}/preview/{quote(path)}"
        )
        return data

    # -- uploads (the protocol push uses; see docs/catalog.md) -------------------------------------------------

    def start_upload(
        self,
        kind: str,
        item_id: int,
        files: Sequence[Mapping[str, Any]],
        *,
        archive: str | None = None,
        description: str = UNSET,
        metadata: Mapping[str, Any] = UNSET,
    ) -> Upload:
        """Open an upload of a new version: ``files`` is ``[{path, size, sha256?, mode?}]``."""
        payload = body(
            files=[dict(f) for f in files],
            archive=archive if archive is not None else UNSET,
            description=description,
            metadata=dict(metadata) if metadata is not UNSET else UNSET,
        )
        return self._one(Upload, "POST", f"{collection(kind)}/{item_id}/uploads", json=payload)

    def get_upload(self, upload_id: int) -> Upload:
        return self._one(Upload, "GET", f"/uploads/{upload_id}")

    def commit_upload(self, upload_id: int) -> Version:
        """Make the new version (``upload_incomplete`` with ``details.missing`` while parts are missing)."""
        return self._one(Version, "POST", f"/uploads/{upload_id}/commit")

    def abort_upload(self, upload_id: int) -> None:
        self._json("DELETE", f"/uploads/{upload_id}")

    # -- images --------------------------------------------------------------------------------------------------

    def get_build(self, item_id: int, number: int) -> Build:
        """The build state of an image version and the tail of its log."""
        return self._one(Build, "GET", f"/images/{item_id}/versions/{number}/build")

    def rebuild(self, item_id: int, number: int) -> Build:
        """Queue a failed image build again."""
        return self._one(Build, "POST", f"/images/{item_id}/versions/{number}/build")

    # -- storage admin -------------------------------------------------------------------------------------------

    def storage_usage(self, workspace_id: int) -> StorageUsage:
        return self._one(StorageUsage, "GET", f"/workspaces/{workspace_id}/storage")

    def set_storage_quota(self, workspace_id: int, limit: int | str | None) -> StorageUsage:
        """Set a workspace's storage quota (platform admins): bytes, a quantity such as ``"10Gi"``, or None
        (unlimited)."""
        return self._one(StorageUsage, "PUT", f"/workspaces/{workspace_id}/storage", json={"limit": limit})

    def storage_gc(self) -> GcReport:
        """Expire stale uploads and delete unreferenced blobs now (platform admins)."""
        return self._one(GcReport, "POST", "/admin/storage/gc")

    def storage_fsck(self, *, repair: bool = False) -> FsckReport:
        """Re-hash every referenced blob; ``repair`` moves damaged ones to quarantine (platform admins)."""
        return self._one(FsckReport, "POST", "/admin/storage/fsck", json={"repair": repair})

    def import_directory(
        self,
        kind: str,
        item_id: int,
        path: str,
        *,
        description: str = UNSET,
        metadata: Mapping[str, Any] = UNSET,
    ) -> Version:
        """A new version of a preset item from a directory on the server, inside its import roots (admins)."""
        payload = body(path=path, description=description, metadata=dict(metadata) if metadata is not UNSET else UNSET)
        return self._one(Version, "POST", f"{collection(kind)}/{item_id}/imports", json=payload)


def _copy(response: httpx.Response, fh: BinaryIO) -> int:
    written = 0
    for chunk in response.iter_bytes(CHUNK):
        fh.write(chunk)
        written += len(chunk)
    return written
