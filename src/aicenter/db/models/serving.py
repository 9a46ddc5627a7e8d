"""Inference services: the service, its revisions, the jobs that are its replicas, its API keys and the load the
gateways observed. A service replica IS a job of kind ``service`` (core/jobs/serving.py); ``ServiceReplica`` links
it to its revision and records what the autoscaler decided for it (draining)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.core.clock import utcnow
from aicenter.db.base import Base, BigIntId, IdMixin, LeaseMixin, TimestampMixin


class Service(IdMixin, TimestampMixin, LeaseMixin, Base):
    """A deployed model in a workspace. The serving controller leases active services to drive their revisions
    and replicas toward what the spec and the load ask for."""

    __tablename__ = "services"

    workspace_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"))
    user_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None)
    name: Mapped[str] = mapped_column(String(64))
    description: Mapped[str] = mapped_column(String(4096), default="")
    # core.serving.ServiceStatus: deploying, ready, updating, failed, stopped.
    status: Mapped[str] = mapped_column(String(16), default="deploying")
    message: Mapped[str] = mapped_column(Text, default="")
    ab_header: Mapped[str] = mapped_column(String(64), default="")
    max_body_bytes: Mapped[int] = mapped_column(default=64 * 1024 * 1024)
    # The revision a canary is compared with (rollback returns all traffic to it); None: no canary under way.
    stable_revision_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    next_revision: Mapped[int] = mapped_column(default=1)
    stopped_at: Mapped[datetime | None] = mapped_column(default=None)
    stop_requested_by: Mapped[int | None] = mapped_column(BigIntId, default=None)
    # Set when the service first served (running time counts from it).
    ready_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (
        UniqueConstraint("workspace_id", "name", name="uq_services_workspace_name"),
        {"sqlite_autoincrement": True},
    )


class ServiceRevision(IdMixin, TimestampMixin, Base):
    """One deployable version of a service: model version + runtime + replica spec, with its share of traffic."""

    __tablename__ = "service_revisions"

    service_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("services.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column()
    # No foreign key: the version may be deleted after the revision served it; the reference stays readable.
    model_version_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    model_ref: Mapped[str] = mapped_column(String(256), default="")
    runtime: Mapped[str] = mapped_column(String(16))
    # The revision as deployed (core.serving.RevisionSpec, normalized): resources, image, scaling, env, command.
    spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # The replica job spec every replica of it is submitted with (core.jobs.JobSpec, normalized).
    job_spec: Mapped[dict[str, Any]] = mapped_column(default=dict)
    signature: Mapped[dict[str, Any] | None] = mapped_column(default=None)
    traffic: Mapped[int] = mapped_column(default=0)  # percent of unpinned requests
    # Where the rollout moves its traffic to (percent), reached once it is ready: 100 for a full rollout, the
    # canary's percentage for a canary.
    target_traffic: Mapped[int] = mapped_column(default=0)
    header_value: Mapped[str] = mapped_column(String(128), default="")
    # core.serving.RevisionState: starting, ready, failed, retired.
    state: Mapped[str] = mapped_column(String(16), default="starting")
    message: Mapped[str] = mapped_column(Text, default="")
    desired_replicas: Mapped[int] = mapped_column(default=0)
    ready_at: Mapped[datetime | None] = mapped_column(default=None)
    retired_at: Mapped[datetime | None] = mapped_column(default=None)
    # The last time a request reached it (from the gateways' load reports): scale to zero counts from it.
    last_request_at: Mapped[datetime | None] = mapped_column(default=None)
    created_by: Mapped[int | None] = mapped_column(BigIntId, default=None)

    __table_args__ = (UniqueConstraint("service_id", "number", name="uq_service_revisions_service_number"),)


class ServiceReplica(IdMixin, Base):
    """A replica of a revision: the job that runs it, and whether it is being drained."""

    __tablename__ = "service_replicas"

    revision_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("service_revisions.id", ondelete="CASCADE"))
    service_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("services.id", ondelete="CASCADE"))
    job_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("jobs.id", ondelete="CASCADE"), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    ready_at: Mapped[datetime | None] = mapped_column(default=None)
    # Set when the autoscaler or a rollout takes it out of routing; its job is stopped once the gateways had time
    # to stop sending it requests and the ones in flight finished.
    draining_since: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (Index("ix_service_replicas_revision_id", "revision_id"),)


class ServiceKey(IdMixin, TimestampMixin, Base):
    """An API key of a service: shown once at creation, stored as its sha256 (a key has 256 random bits, so a
    fast hash is enough, and the gateway can check it without a slow KDF per request)."""

    __tablename__ = "service_keys"

    service_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("services.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_by: Mapped[int | None] = mapped_column(BigIntId, default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (Index("ix_service_keys_service_id", "service_id"),)


class ServiceLoad(IdMixin, Base):
    """What one gateway saw of one revision over one report interval (a few seconds), appended and pruned after a
    few minutes: the autoscaler sums the gateways' concurrency, the console charts requests and latency."""

    __tablename__ = "service_load"

    revision_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("service_revisions.id", ondelete="CASCADE"))
    source: Mapped[str] = mapped_column(String(64))  # the reporting gateway (one per server process)
    at: Mapped[datetime] = mapped_column(default=utcnow)
    interval_s: Mapped[float] = mapped_column(default=0.0)
    concurrency: Mapped[float] = mapped_column(default=0.0)  # time-weighted average of in flight + held
    peak: Mapped[int] = mapped_column(default=0)
    held: Mapped[int] = mapped_column(default=0)  # held by the activator at the end of the interval
    requests: Mapped[int] = mapped_column(default=0)
    errors: Mapped[int] = mapped_column(default=0)
    p50_ms: Mapped[float | None] = mapped_column(default=None)
    p99_ms: Mapped[float | None] = mapped_column(default=None)

    __table_args__ = (Index("ix_service_load_revision_id_at", "revision_id", "at"),)
