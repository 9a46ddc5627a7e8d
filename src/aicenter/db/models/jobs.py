"""Jobs, their replica attempts (which are also the machine-time records billing charges), status events and
saved templates. Statuses and reasons are the values of core/jobs/lifecycle.py; the spec is the normalized JSON
of core/jobs/spec.py (``JobSpec.normalized()``)."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Numeric, String, Text, UniqueConstraint, text
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.core.clock import utcnow
from aicenter.db.base import Base, BigIntId, IdMixin, LeaseMixin, TimestampMixin


class Job(IdMixin, TimestampMixin, LeaseMixin, Base):
    """A submitted job. The job reconciler leases active rows (db/leases.py) to drive them toward their goal.

    ``status`` is what users see and changes only through core.jobs.transition, with a JobEvent per change;
    ``pending_reason`` is the scheduler's separate account of why a queued job waits.
    """

    __tablename__ = "jobs"

    workspace_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"))
    # SET NULL: a job (and the machine time it used) outlives its user's account.
    user_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None)
    kind: Mapped[str] = mapped_column(String(16), default="train")  # core.jobs.JobKind
    name: Mapped[str] = mapped_column(String(64))
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # core.jobs.JobStatus
    pending_reason: Mapped[str] = mapped_column(String(1024), default="")
    failure_reason: Mapped[str | None] = mapped_column(String(32), default=None)  # core.jobs.FailureReason
    exit_code: Mapped[int | None] = mapped_column(default=None)
    message: Mapped[str] = mapped_column(Text, default="")
    priority: Mapped[int] = mapped_column(default=20)  # core.jobs.priority_value(); higher runs first
    pool_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("pools.id", ondelete="SET NULL"), default=None)
    # Every restart (the attempt number; AICENTER_RESTART_COUNT) and those that consumed the retry budget
    # (preemptions do not: core/jobs/retry.py).
    restart_count: Mapped[int] = mapped_column(default=0)
    counted_restarts: Mapped[int] = mapped_column(default=0)
    # Resolved references, fixed at submission. No foreign keys: a version may be deleted after the job ran,
    # and the job's record must stay.
    image_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    algorithm_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    dataset_version_ids: Mapped[list[Any]] = mapped_column(default=list)
    output_model_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    model_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)  # the spec's ``model``
    submitted_at: Mapped[datetime] = mapped_column(default=utcnow)
    scheduled_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # Who asked to stop it; the reason becomes stopped_by_admin when that user acted as a platform admin.
    stop_requested_by: Mapped[int | None] = mapped_column(BigIntId, default=None)
    stop_requested_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (
        Index("ix_jobs_status", "status"),
        Index("ix_jobs_workspace_id_status", "workspace_id", "status"),
        Index("ix_jobs_user_id", "user_id"),
        # Ids are never reused (SQLite would otherwise give a deleted newest job's id to the next one): a job's
        # directory, its notebook's JupyterLab token, SSH alias and host key, and its metric series are all
        # named by it.
        {"sqlite_autoincrement": True},
    )


class Replica(IdMixin, TimestampMixin, Base):
    """One attempt of one replica: one process on one node. Also the machine-time record billing charges
    (weight x (finished_at - started_at)); a restart adds new rows with the next ``attempt``, so no attempt is
    charged twice and none is lost."""

    __tablename__ = "replicas"

    job_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"))
    task: Mapped[str] = mapped_column(String(64))
    index: Mapped[int] = mapped_column()  # within the task; rank order is task order, then index
    attempt: Mapped[int] = mapped_column(default=0)  # the job's restart_count when this attempt started
    status: Mapped[str] = mapped_column(String(16), default="pending")  # core.jobs.ReplicaStatus
    node_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("nodes.id", ondelete="SET NULL"), default=None)
    # The node's name, kept readable after the node is removed (executors address nodes by name).
    node_name: Mapped[str | None] = mapped_column(String(128), default=None)
    devices: Mapped[list[Any]] = mapped_column(default=list)  # accelerator indexes on the node
    cpus: Mapped[list[Any] | None] = mapped_column(default=None)  # CPU affinity; None: any
    cpu_milli: Mapped[int] = mapped_column(BigInteger, default=0)
    memory_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    gpu: Mapped[int] = mapped_column(default=0)
    gpu_type: Mapped[str | None] = mapped_column(String(64), default=None)
    gpu_share: Mapped[float | None] = mapped_column(default=None)
    spec_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("resource_specs.id", ondelete="SET NULL"), default=None
    )
    billing_weight: Mapped[float] = mapped_column(default=1.0)  # copied at submit: later price edits do not
    # The spec's price per machine-hour, snapshotted with the weight: a later price change rewrites no history.
    price_per_hour: Mapped[Decimal] = mapped_column(Numeric(20, 4), default=Decimal(0))
    handle: Mapped[dict[str, Any] | None] = mapped_column(default=None)  # executors.base.ReplicaHandle, as JSON
    exit_code: Mapped[int | None] = mapped_column(default=None)
    reason: Mapped[str | None] = mapped_column(String(32), default=None)  # core.jobs.FailureReason
    ports: Mapped[list[Any]] = mapped_column(default=list)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    # Set by the billing meter with the copy's last charge: its pass reads only the copies not yet closed
    # (the partial index of their ids), not every replica that ever started.
    billing_closed: Mapped[bool] = mapped_column(default=False)

    __table_args__ = (
        UniqueConstraint("job_id", "task", "index", "attempt", name="uq_replicas_job_task_index_attempt"),
        Index("ix_replicas_status", "status"),
        # Only the open copies, in id order: an index on (billing_closed, id) lost to the primary key in
        # PostgreSQL's plans, which then walked every closed replica (older, so lower ids) to find the open ones.
        Index(
            "ix_replicas_billing_open",
            "id",
            postgresql_where=text("NOT billing_closed"),
            sqlite_where=text("billing_closed = 0"),
        ),
    )


class JobEvent(IdMixin, Base):
    """One status change of a job (core.jobs.StatusChange), written in the transaction that makes it."""

    __tablename__ = "job_events"

    job_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    # No foreign key: the history outlives deleted users; actor_name keeps it readable.
    actor_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    actor_name: Mapped[str] = mapped_column(String(64), default="system")
    from_status: Mapped[str | None] = mapped_column(String(16), default=None)  # None: the job was created
    to_status: Mapped[str] = mapped_column(String(16))
    reason: Mapped[str | None] = mapped_column(String(64), default=None)
    message: Mapped[str] = mapped_column(Text, default="")

    __table_args__ = (Index("ix_job_events_job_id_at", "job_id", "at"),)


class JobTemplate(IdMixin, TimestampMixin, Base):
    """A saved job spec (normalized), submitted later with ``--set`` overrides."""

    __tablename__ = "job_templates"

    workspace_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None)
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(String(4096), default="")
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (UniqueConstraint("workspace_id", "name", name="uq_job_templates_workspace_name"),)
