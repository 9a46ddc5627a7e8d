"""A notebook's own state beside its job (a notebook IS a job of kind ``notebook``, see core/jobs/notebooks.py):
its idle settings and what the culler last concluded, and where its saves go."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import ForeignKey, Index
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, BigIntId, IdMixin, TimestampMixin


class Notebook(IdMixin, TimestampMixin, Base):
    """One per notebook job, written with it and deleted with it."""

    __tablename__ = "notebooks"

    job_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    # None: the workspace's default, else the platform's; 0: never culled.
    idle_timeout_s: Mapped[int | None] = mapped_column(default=None)
    # The latest request the platform's proxy passed to it (flushed from memory every few seconds, not per
    # request), and what the culler last concluded: the last sign of use, its warning, its cull.
    proxy_activity_at: Mapped[datetime | None] = mapped_column(default=None)
    idle_since: Mapped[datetime | None] = mapped_column(default=None)
    cull_at: Mapped[datetime | None] = mapped_column(default=None)
    warned_at: Mapped[datetime | None] = mapped_column(default=None)
    culled_at: Mapped[datetime | None] = mapped_column(default=None)
    # Saves go to this algorithm item (the one it was created from, or the one the first save named); no
    # foreign key: the item may be deleted, and the notebook then asks for a name again.
    algorithm_item_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    saved_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    saved_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (Index("ix_notebooks_cull_at", "cull_at"),)
