"""Catalog: datasets, algorithms, images and models, their versions, files, uploads and the store's admin answers.

Paths, names, tags and metadata are checked by the services (which name the field, e.g. ``files[3].path``);
the schemas here check only shapes, so that every rule lives in one place.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from aicenter.api.params import Id
from aicenter.api.schemas.common import Input, Schema
from aicenter.core.errors import ValidationFailed
from aicenter.services.catalog import BuildView, FileView, ItemView, StorageUsage, UploadView, VersionView

Metadata = Annotated[
    dict[str, Any],
    Field(description="Per-kind attributes (dataset data_type; algorithm framework, entrypoint, requirements; ...)."),
]
Description = Annotated[str, Field(max_length=4096)]
Sha256 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$", description="Lowercase hex sha256.")]


class _Patch(Input):
    """A partial update: only the fields sent change; none of them may be sent as null."""

    nullable: ClassVar[frozenset[str]] = frozenset()

    def changes(self) -> dict[str, Any]:
        sent = self.model_dump(exclude_unset=True)
        for name, value in sent.items():
            if value is None and name not in self.nullable:
                raise ValidationFailed("must not be null (leave it out to keep it)", field=name)
        return sent


# --- items -------------------------------------------------------------------------------------------------


class ItemCreate(Input):
    name: str = Field(max_length=64, description="Unique per kind among your items (or among presets).")
    workspace_id: Id | None = Field(
        default=None, description="The workspace whose storage quota the versions count against; default: yours."
    )
    description: Description = ""
    tags: list[str] = Field(default_factory=list, max_length=64)
    metadata: Metadata | None = None
    preset: bool = Field(default=False, description="A preset item, visible to everyone (platform admins only).")


class ItemUpdate(_Patch):
    name: str | None = Field(default=None, max_length=64)
    description: Description | None = None
    tags: list[str] | None = Field(default=None, max_length=64)
    metadata: Metadata | None = None


class ItemOut(Schema):
    id: int
    kind: str
    name: str
    is_preset: bool
    owner_id: int | None
    owner_name: str | None
    workspace_id: int | None
    workspace_name: str | None
    description: str
    tags: list[str]
    metadata: dict[str, Any]
    version_count: int
    latest_version: int | None = Field(description="Number of the newest version you can see.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: ItemView) -> ItemOut:
        return cls.model_validate(view)


# --- versions ----------------------------------------------------------------------------------------------


class VersionCreate(Input):
    description: Description = ""
    metadata: Metadata | None = Field(
        default=None,
        description='Images: the build spec, e.g. {"python": "3.11", "requirements": ["numpy"]} or '
        '{"reference": "nvcr.io/nvidia/pytorch:24.01-py3"} for a container image item.',
    )


class VersionUpdate(_Patch):
    description: Description | None = None
    metadata: Metadata | None = None


class ShareIn(Input):
    visibility: Literal["workspace", "public"]
    workspace_id: Id | None = Field(
        default=None, description="With visibility=workspace: the workspace to share with; default: the item's."
    )


class CopyIn(Input):
    name: str | None = Field(default=None, max_length=64, description="Your item to copy into; default: same name.")
    workspace_id: Id | None = Field(default=None, description="Workspace of the item if it is created.")
    description: Description | None = None


class VersionOut(Schema):
    id: int
    item_id: int
    kind: str
    item_name: str
    owner_name: str | None
    number: int
    ref: str = Field(description='How to name the version: "imagenet-mini:2", "preset/resnet:1".')
    visibility: str
    shared_workspace_id: int | None
    shared_workspace_name: str | None
    state: str = Field(description="ready; images: pending, building, ready or failed.")
    description: str
    metadata: dict[str, Any]
    file_count: int
    size_bytes: int
    manifest_sha256: str
    created_by_id: int | None
    created_by_name: str | None
    copied_from_id: int | None
    can_read_content: bool = Field(description="Whether you may list, download or copy the files.")
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: VersionView) -> VersionOut:
        return cls.model_validate(view)


# --- content -----------------------------------------------------------------------------------------------


class FileOut(Schema):
    path: str
    size: int
    sha256: str
    mode: int

    @classmethod
    def of(cls, view: FileView) -> FileOut:
        return cls.model_validate(view)


class ArchiveRequest(Input):
    paths: list[str] | None = Field(default=None, description="Files to include; default: every file.")


class PreviewOut(Schema):
    kind: Literal["text", "csv", "image", "binary"]
    text: str | None = Field(description="The first 64 KiB as UTF-8 (text and CSV).")
    rows: list[list[str]] | None = Field(description="The first rows of a CSV file.")
    media_type: str | None


# --- uploads -----------------------------------------------------------------------------------------------


class UploadFileIn(Input):
    path: str = Field(description="Relative POSIX path inside the version.")
    size: int = Field(ge=0)
    sha256: Sha256 | None = Field(default=None, description="Known hash: files already stored are not sent again.")
    mode: int | None = Field(default=None, ge=0, le=0o7777)


class UploadCreate(Input):
    files: list[UploadFileIn] = Field(description="The version's files; an index in this list names a file.")
    archive: Literal["tar", "tar.gz", "zip"] | None = Field(
        default=None, description="The one file is an archive that the commit expands."
    )
    description: Description = ""
    metadata: Metadata | None = None


class UploadOut(Schema):
    id: int
    item_id: int
    kind: str
    state: str = Field(description="open, committed or aborted.")
    part_size: int = Field(description="Every part but a file's last has exactly this many bytes.")
    expires_at: datetime
    file_count: int
    total_bytes: int
    needed: list[int] = Field(description="Indices of the files whose content must be sent.")
    missing: list[dict[str, Any]] = Field(description='Parts not yet received: [{"index", "path", "parts"}].')
    version_id: int | None

    @classmethod
    def of(cls, view: UploadView) -> UploadOut:
        return cls.model_validate(view)


class BundleReceived(Schema):
    received: list[int] = Field(description="Indices of the files the bundle carried.")


class ImportIn(Input):
    path: str = Field(max_length=4096, description="A directory on the server, under one of the import roots.")
    description: Description = ""
    metadata: Metadata | None = None


# --- images ------------------------------------------------------------------------------------------------


class BuildOut(Schema):
    version_id: int
    state: str
    env_hash: str
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    log_tail: str = Field(description="The end of the build log (empty for platform admins on user images).")

    @classmethod
    def of(cls, view: BuildView) -> BuildOut:
        return cls.model_validate(view)


# --- storage -----------------------------------------------------------------------------------------------


class StorageLimitIn(Input):
    limit: str | int | None = Field(description='Storage quota: "100Gi", bytes, or null for no limit.')


class StorageOut(Schema):
    workspace_id: int
    limit_bytes: int | None
    used_bytes: int

    @classmethod
    def of(cls, usage: StorageUsage) -> StorageOut:
        return cls.model_validate(usage)


class FsckIn(Input):
    repair: bool = Field(default=False, description="Move damaged blobs to quarantine.")


class GcOut(Schema):
    scanned: int
    deleted: int
    freed_bytes: int
    kept_young: int = Field(description="Unreferenced blobs younger than the grace period, kept.")
    expired_uploads: int


class FsckOut(Schema):
    checked: int
    missing: list[str]
    damaged: list[str]
    quarantined: list[str]
