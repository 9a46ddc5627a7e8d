"""Metric series: one row per series (a name, a small set of labels, its tenant), raw points, and rollups.

Storage in three tiers, after Graphite's and Prometheus' downsampling: raw points (kept ``metrics_raw_retention_s``,
a day by default), 5-minute and 1-hour rollups (count, sum, min, max per bucket; 90 days and 5 years) upserted in
the same transaction as the raw points, so a 90-day chart reads ~2,200 hourly rows per series through the primary
key instead of 500,000 raw points. Times are integer milliseconds since the epoch: a BIGINT key is half the size
of a timestamp column on SQLite (text there) and compares as an integer on both databases.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import BigInteger, Float, ForeignKey, Index, Integer, PrimaryKeyConstraint, String
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, BigIntId, IdMixin


class MetricSeries(IdMixin, Base):
    """One series. ``series_key`` is the identity (name, labels, workspace, job, node) as one string: a unique
    constraint over the nullable id columns would let two NULLs differ on both databases (and so duplicate a
    cluster series under concurrent writers)."""

    __tablename__ = "metric_series"

    series_key: Mapped[str] = mapped_column(String(1024), unique=True)
    name: Mapped[str] = mapped_column(String(200))
    labels_key: Mapped[str] = mapped_column(String(512), default="")  # canonical "k=v,k=v", sorted by key
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # None: a cluster series, visible to every user. Set: only the workspace's members and platform admins.
    workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), default=None
    )
    # A job's metrics go with the job; a node's outlive the node (its history stays readable), so no key there.
    job_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"), default=None)
    node_id: Mapped[int | None] = mapped_column(BigIntId, default=None)

    __table_args__ = (
        Index("ix_metric_series_name", "name"),
        Index("ix_metric_series_job_id", "job_id"),
        Index("ix_metric_series_node_id", "node_id"),
        # Ids are never reused (SQLite would otherwise hand a deleted series' id to the next one): the writers'
        # id cache relies on a stale id failing the points' foreign key rather than landing in another series.
        {"sqlite_autoincrement": True},
    )


class MetricPoint(Base):
    """A raw point. The primary key (series, time) is the only index: every read is a range of one series.

    Points of one series arrive one every 15 s among every other series', so in a heap table they are one per
    page: a 10-series chart read 21,600 scattered pages (0.4 s on PostgreSQL here). The key therefore holds the
    value: a clustered table on SQLite (WITHOUT ROWID), a covering key (INCLUDE) read by index-only scans on
    PostgreSQL.
    """

    __tablename__ = "metric_points"

    series_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("metric_series.id", ondelete="CASCADE"), primary_key=True
    )
    at_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    value: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        PrimaryKeyConstraint("series_id", "at_ms", postgresql_include=["value"]),
        {"sqlite_with_rowid": False},
    )


class MetricRollup(Base):
    """Aggregates of one series over ``[bucket_ms, bucket_ms + step_s * 1000)``; ``step_s`` is 300 or 3600.

    Clustered by its key on SQLite and covered by it on PostgreSQL, as the raw points are: a 90-day chart then
    reads 2,160 adjacent index entries per series. The price on PostgreSQL is that an upsert changes covered
    columns, so it is never a HOT update; rollup rows are short and few (one per series per bucket).
    """

    __tablename__ = "metric_rollups"

    series_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("metric_series.id", ondelete="CASCADE"), primary_key=True
    )
    step_s: Mapped[int] = mapped_column(Integer, primary_key=True)
    bucket_ms: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    count: Mapped[int] = mapped_column(BigInteger)
    sum: Mapped[float] = mapped_column(Float)
    min: Mapped[float] = mapped_column(Float)
    max: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        PrimaryKeyConstraint("series_id", "step_s", "bucket_ms", postgresql_include=["count", "sum", "min", "max"]),
        {"sqlite_with_rowid": False},
    )


class MetricIngestCursor(Base):
    """How far the ingest of a job's ``metrics.jsonl`` files got: one row per file (its path under the jobs
    directory), the byte offset after the last whole line ingested and the millisecond its last point was stored
    at (lines are stored a millisecond apart at least). Advanced in the transaction that writes the points, so a
    restart resumes exactly there."""

    __tablename__ = "metric_ingest_cursors"

    path: Mapped[str] = mapped_column(String(1024), primary_key=True)
    job_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"))
    offset: Mapped[int] = mapped_column(BigInteger, default=0)
    last_ms: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (Index("ix_metric_ingest_cursors_job_id", "job_id"),)
