"""Users, workspaces, memberships, quotas, API tokens and login attempts."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Index, Numeric, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column, relationship

from aicenter.db.base import Base, BigIntId, IdMixin, TimestampMixin


class User(IdMixin, TimestampMixin, Base):
    __tablename__ = "users"

    username: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(128), default="")
    email: Mapped[str | None] = mapped_column(String(256), default=None)
    password_hash: Mapped[str | None] = mapped_column(String(256), default=None)
    is_platform_admin: Mapped[bool] = mapped_column(default=False)
    state: Mapped[str] = mapped_column(String(16), default="active")
    # No foreign key: users and workspaces would reference each other; the service keeps it valid.
    default_workspace_id: Mapped[int | None] = mapped_column(BigIntId, default=None)


class Workspace(IdMixin, TimestampMixin, Base):
    __tablename__ = "workspaces"

    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(String(1024), default="")
    # Coins; billing debits it by machine time. Numeric, never float: money must add up exactly.
    balance: Mapped[Decimal] = mapped_column(Numeric(20, 4), default=Decimal(0))
    # Limit on the logical size of the workspace's catalog versions, enforced at commit; None: no limit.
    storage_quota_bytes: Mapped[int | None] = mapped_column(BigInteger, default=None)
    # Whether platform admins may read the logs of this workspace's jobs (user output); its admins decide.
    admins_read_logs: Mapped[bool] = mapped_column(default=False)
    # Notebooks idle this long are culled (stopped); None: the platform's default, 0: never.
    notebook_idle_timeout_s: Mapped[int | None] = mapped_column(default=None)
    created_by_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("users.id", ondelete="SET NULL"), default=None
    )

    members: Mapped[list[Membership]] = relationship(back_populates="workspace", cascade="all, delete-orphan")


class Membership(TimestampMixin, Base):
    __tablename__ = "memberships"

    workspace_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True
    )
    user_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True)
    role: Mapped[str] = mapped_column(String(32), default="member")

    workspace: Mapped[Workspace] = relationship(back_populates="members")
    user: Mapped[User] = relationship()

    __table_args__ = (Index("ix_memberships_user_id", "user_id"),)


class Quota(IdMixin, TimestampMixin, Base):
    """Guaranteed and maximum resources of a workspace in a pool.

    Resource names: ``cpu`` (milli-cores), ``memory`` (bytes), ``accelerators`` (all types, devices) and each
    accelerator type name (devices). A missing name means "no limit" in ``maximum`` and 0 in ``guaranteed``.
    """

    __tablename__ = "quotas"

    workspace_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"))
    pool_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("pools.id", ondelete="RESTRICT"))
    guaranteed: Mapped[dict[str, Any]] = mapped_column(default=dict)
    maximum: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (UniqueConstraint("workspace_id", "pool_id", name="uq_quotas_workspace_pool"),)


class ApiToken(IdMixin, Base):
    """A bearer credential. Only a hash of its secret is stored; the secret is shown once at creation."""

    __tablename__ = "api_tokens"

    user_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(128))
    kind: Mapped[str] = mapped_column(String(16), default="api")
    secret_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column()
    expires_at: Mapped[datetime | None] = mapped_column(default=None)
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)
    last_used_at: Mapped[datetime | None] = mapped_column(default=None)
    # The job a ``job`` token belongs to; it may read that job only. No foreign key: a deleted job's tokens
    # are already revoked, and the row only records what the token was for.
    job_id: Mapped[int | None] = mapped_column(BigInteger, default=None)


class LoginAttempt(IdMixin, Base):
    """Failed logins, counted per user and per client address to rate-limit guessing (on every replica)."""

    __tablename__ = "login_attempts"

    username: Mapped[str] = mapped_column(String(64))
    address: Mapped[str] = mapped_column(String(64))
    at: Mapped[datetime] = mapped_column()

    __table_args__ = (
        Index("ix_login_attempts_username_at", "username", "at"),
        Index("ix_login_attempts_address_at", "address", "at"),
    )
