"""The audit log: one row per mutation, written in the same transaction as the mutation."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Index, String
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, BigIntId, IdMixin


class AuditEvent(IdMixin, Base):
    __tablename__ = "audit_events"

    at: Mapped[datetime] = mapped_column()
    # No foreign key: the log outlives deleted users; actor_name keeps it readable.
    actor_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    actor_name: Mapped[str] = mapped_column(String(64))
    action: Mapped[str] = mapped_column(String(64))  # e.g. workspace.create, token.revoke
    target_type: Mapped[str] = mapped_column(String(32))
    target_id: Mapped[str | None] = mapped_column(String(64), default=None)
    workspace_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    client_address: Mapped[str | None] = mapped_column(String(64), default=None)
    request_id: Mapped[str | None] = mapped_column(String(64), default=None)
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (
        Index("ix_audit_events_at", "at"),
        Index("ix_audit_events_actor_id", "actor_id"),
        Index("ix_audit_events_action", "action"),
        Index("ix_audit_events_target", "target_type", "target_id"),
    )
