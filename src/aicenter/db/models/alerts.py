"""Alerts and the cluster event log: rules, their alerts, silences, notification channels and the outbox.

Alert rules are evaluated by the alert controller (controllers/alerts.py) with core/alerts; what they decide is
written here. Notifications go through an outbox (``notifications``) so that a slow or failing channel never holds
up evaluation: the evaluator only inserts rows, the delivery loop leases them (db/leases.py) and sends.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import ForeignKey, Index, String, Text, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.core.clock import utcnow
from aicenter.db.base import Base, BigIntId, IdMixin, LeaseMixin, TimestampMixin


class ClusterEvent(IdMixin, Base):
    """One thing that happened in the cluster: a node joined, was lost or cordoned, a job was preempted, an alert
    fired or resolved, a service was deployed or scaled. No foreign keys: the log outlives the nodes, jobs,
    services and workspaces it names."""

    __tablename__ = "cluster_events"

    at: Mapped[datetime] = mapped_column(default=utcnow)
    kind: Mapped[str] = mapped_column(String(64))  # node.joined, node.lost, alert.firing, job.preempted, ...
    severity: Mapped[str] = mapped_column(String(16), default="info")  # core.alerts.Severity
    node_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    job_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    service_id: Mapped[int | None] = mapped_column(BigIntId, default=None)  # an inference service's history
    # None: a cluster-wide event (every member sees it); set: only that workspace's members and platform admins.
    workspace_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    message: Mapped[str] = mapped_column(Text, default="")
    details: Mapped[dict[str, Any]] = mapped_column(default=dict)

    __table_args__ = (
        Index("ix_cluster_events_at", "at"),
        Index("ix_cluster_events_workspace_id", "workspace_id"),
        Index("ix_cluster_events_kind", "kind"),
        Index("ix_cluster_events_service_id", "service_id"),
    )


class AlertRule(IdMixin, TimestampMixin, Base):
    """A condition over series and platform facts (core.alerts expression) that fires an alert per label set
    while it holds for ``for_s``. ``builtin`` rules are seeded (their name is their key); admins may disable them."""

    __tablename__ = "alert_rules"

    # None: platform-wide (platform admins manage it); set: the workspace's own rule (its admins manage it).
    workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), default=None
    )
    name: Mapped[str] = mapped_column(String(64))
    expression: Mapped[str] = mapped_column(String(1024))
    for_s: Mapped[int] = mapped_column(default=0)
    severity: Mapped[str] = mapped_column(String(16), default="warning")
    description: Mapped[str] = mapped_column(String(512), default="")
    enabled: Mapped[bool] = mapped_column(default=True)
    builtin: Mapped[bool] = mapped_column(default=False)
    created_by: Mapped[int | None] = mapped_column(BigIntId, default=None)

    __table_args__ = (
        # One name per scope; platform rules (workspace_id NULL) are kept unique by the service, since NULLs
        # never collide in a unique index.
        UniqueConstraint("workspace_id", "name", name="uq_alert_rules_workspace_name"),
    )


class Alert(IdMixin, TimestampMixin, Base):
    """One alert: a rule's condition for one label set. Deduplicated by (rule, fingerprint of the labels): a
    condition that comes back after resolving fires the same row again (the event log keeps the history)."""

    __tablename__ = "alerts"

    rule_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("alert_rules.id", ondelete="CASCADE"))
    fingerprint: Mapped[str] = mapped_column(String(64))
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    # Whose alert it is: the rule's workspace, or for a platform rule the workspace of the series/fact that
    # matched (a failed job's); None for cluster-wide conditions (a node down).
    workspace_id: Mapped[int | None] = mapped_column(BigIntId, default=None)
    state: Mapped[str] = mapped_column(String(16))  # core.alerts.AlertState: pending, firing, resolved
    value: Mapped[float | None] = mapped_column(default=None)
    severity: Mapped[str] = mapped_column(String(16), default="warning")
    summary: Mapped[str] = mapped_column(String(1024), default="")
    pending_since: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)  # when it last fired
    resolved_at: Mapped[datetime | None] = mapped_column(default=None)
    last_seen_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (
        UniqueConstraint("rule_id", "fingerprint", name="uq_alerts_rule_fingerprint"),
        Index("ix_alerts_state", "state"),
        Index("ix_alerts_workspace_id", "workspace_id"),
    )


class Silence(IdMixin, TimestampMixin, Base):
    """Suppresses notifications of alerts whose labels match every matcher (exact values; the key ``rule``
    matches the rule's name) until ``ends_at``. Alerts still change state and show; only sending stops."""

    __tablename__ = "silences"

    workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), default=None
    )
    matchers: Mapped[dict[str, Any]] = mapped_column(default=dict)
    ends_at: Mapped[datetime] = mapped_column()
    comment: Mapped[str] = mapped_column(String(512), default="")
    created_by: Mapped[int | None] = mapped_column(BigIntId, default=None)
    created_by_name: Mapped[str] = mapped_column(String(64), default="")


class AlertChannel(IdMixin, TimestampMixin, Base):
    """Where notifications go: a webhook URL (JSON POST) or an e-mail address (SMTP). Platform channels
    (workspace_id None) get every platform rule's alerts; a workspace's channels get the alerts of that workspace."""

    __tablename__ = "alert_channels"

    workspace_id: Mapped[int | None] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), default=None
    )
    name: Mapped[str] = mapped_column(String(64))
    kind: Mapped[str] = mapped_column(String(16))  # webhook, email
    target: Mapped[str] = mapped_column(String(1024))
    enabled: Mapped[bool] = mapped_column(default=True)
    created_by: Mapped[int | None] = mapped_column(BigIntId, default=None)

    __table_args__ = (UniqueConstraint("workspace_id", "name", name="uq_alert_channels_workspace_name"),)


class Notification(IdMixin, LeaseMixin, Base):
    """The outbox: one message for one channel. The delivery loop leases due rows, sends outside any
    transaction and records the outcome; a failure sets ``last_error`` and the next attempt with backoff."""

    __tablename__ = "notifications"

    channel_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("alert_channels.id", ondelete="CASCADE"))
    alert_id: Mapped[int | None] = mapped_column(BigIntId, ForeignKey("alerts.id", ondelete="SET NULL"), default=None)
    payload: Mapped[dict[str, Any]] = mapped_column(default=dict)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    attempts: Mapped[int] = mapped_column(default=0)
    # None once delivered or given up: the row is out of the delivery loop's way.
    next_attempt_at: Mapped[datetime | None] = mapped_column(default=utcnow)
    delivered_at: Mapped[datetime | None] = mapped_column(default=None)
    last_error: Mapped[str | None] = mapped_column(String(1024), default=None)

    __table_args__ = (
        Index("ix_notifications_next_attempt_at", "next_attempt_at"),
        Index("ix_notifications_channel_id", "channel_id"),
    )
