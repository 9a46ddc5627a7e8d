"""Catalog: datasets, algorithms, images and models, their immutable versions and files, uploads, image builds."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, BigIntId, IdMixin, LeaseMixin, TimestampMixin


class CatalogItem(IdMixin, TimestampMixin, Base):
    """A named dataset, algorithm, image or model. Names are unique per kind within a namespace:
    ``user:<owner id>`` for a user's items, ``preset`` for the items platform admins provide."""

    __tablename__ = "catalog_items"

    kind: Mapped[str] = mapped_column(String(16))
    name: Mapped[str] = mapped_column(String(64))
    namespace: Mapped[str] = mapped_column(String(32))
    is_preset: Mapped[bool] = mapped_column(default=False)
    owner_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None)
    # The workspace whose storage quota the item's versions count against; None for presets.
    workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), default=None, index=True
    )
    description: Mapped[str] = mapped_column(String(4096), default="")
    tags: Mapped[list[Any]] = mapped_column(default=list)
    # Per-kind attributes (core/catalog.py validates them): dataset data_type; algorithm framework, entrypoint,
    # requirements; image image_type; model framework and format. "metadata" is reserved by SQLAlchemy.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    # Next version number; incremented by an UPDATE in the committing transaction, which serializes
    # concurrent commits to one item on PostgreSQL (row lock) as SQLite's single writer does.
    next_version: Mapped[int] = mapped_column(default=1)

    __table_args__ = (
        UniqueConstraint("kind", "namespace", "name", name="uq_catalog_items_kind_namespace_name"),
        Index("ix_catalog_items_kind_preset", "kind", "is_preset"),
    )


class CatalogVersion(IdMixin, TimestampMixin, Base):
    """An immutable version: its files never change. Visibility, description and metadata may."""

    __tablename__ = "catalog_versions"

    item_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("catalog_items.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column()
    # private | workspace | public | preset (core.catalog.Visibility)
    visibility: Mapped[str] = mapped_column(String(16), default="private", index=True)
    shared_workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="SET NULL"), default=None, index=True
    )
    # ready for data; pending | building | ready | failed while a venv image builds (core.catalog.VersionState)
    state: Mapped[str] = mapped_column(String(16), default="ready")
    description: Mapped[str] = mapped_column(String(4096), default="")
    # Per-kind version metadata: image build spec; model metrics, signature, lineage.
    meta: Mapped[dict[str, Any]] = mapped_column("metadata", default=dict)
    file_count: Mapped[int] = mapped_column(default=0)
    size_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    manifest_sha256: Mapped[str] = mapped_column(String(64), default="")
    created_by_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None
    )
    # The version this one was copied from (no foreign key: the source may be deleted later).
    copied_from_id: Mapped[int | None] = mapped_column(BigIntId, default=None)

    __table_args__ = (UniqueConstraint("item_id", "number", name="uq_catalog_versions_item_number"),)


class VersionFile(Base):
    """One file of a version's manifest. Content lives in the blob store under its sha256."""

    __tablename__ = "version_files"

    version_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("catalog_versions.id", ondelete="CASCADE"), primary_key=True
    )
    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    size: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64), index=True)
    mode: Mapped[int] = mapped_column(default=0o644)


class UploadSession(IdMixin, TimestampMixin, Base):
    """A resumable upload that becomes a version when committed. Received parts live in the staging area
    of the store (storage/staging.py); this row holds the declared manifest and which files need content."""

    __tablename__ = "upload_sessions"

    item_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("catalog_items.id", ondelete="CASCADE"), index=True)
    user_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="CASCADE"))
    # open | committed | aborted (core.catalog.UploadState)
    state: Mapped[str] = mapped_column(String(16), default="open")
    # Declared files, in order: [[path, size, sha256 or null, mode], ...]; an index names a file in the API.
    files: Mapped[list[Any]] = mapped_column(default=list)
    # Indices of files whose content must be sent (not already in the store, first of equal hashes).
    needed: Mapped[list[Any]] = mapped_column(default=list)
    part_size: Mapped[int] = mapped_column(BigInteger)
    # Set when the upload is one archive that the commit expands: {"format": "tar" | "tar.gz" | "zip"}.
    archive: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    description: Mapped[str] = mapped_column(String(4096), default="")
    version_meta: Mapped[dict[str, Any]] = mapped_column(default=dict)
    expires_at: Mapped[datetime] = mapped_column(index=True)
    # Set by the commit, so that a retried commit answers with the same version instead of making another.
    version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)


class ImageBuild(IdMixin, TimestampMixin, LeaseMixin, Base):
    """The build of a venv image version. The builder controller leases pending rows (db/leases.py)."""

    __tablename__ = "image_builds"

    version_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("catalog_versions.id", ondelete="CASCADE"), unique=True
    )
    # sha256 of the build inputs (python version, sorted requirements, options): equal inputs share one env.
    env_hash: Mapped[str] = mapped_column(String(64), index=True)
    # pending | building | ready | failed
    state: Mapped[str] = mapped_column(String(16), default="pending", index=True)
    error: Mapped[str] = mapped_column(Text, default="")
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
