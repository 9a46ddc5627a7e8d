"""Alerts, rules, silences, channels and cluster events."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import Field

from aicenter.api.schemas.common import Input, Schema

Severity = Literal["info", "warning", "critical"]


class ClusterEventOut(Schema):
    id: int
    at: datetime
    kind: str
    severity: str
    node_id: int | None
    job_id: int | None
    service_id: int | None = Field(default=None, description="The inference service it is about.")
    workspace_id: int | None
    message: str
    details: dict[str, Any]


class AlertOut(Schema):
    id: int
    rule_id: int
    rule: str = Field(description="The rule's name.")
    fingerprint: str
    labels: dict[str, Any]
    workspace_id: int | None
    state: str = Field(description="pending, firing or resolved.")
    severity: str
    summary: str
    value: float | None
    pending_since: datetime | None
    started_at: datetime | None
    resolved_at: datetime | None
    last_seen_at: datetime | None


class AlertRuleOut(Schema):
    id: int
    workspace_id: int | None = Field(description="None: platform-wide.")
    name: str
    expression: str
    for_s: int
    severity: str
    description: str
    enabled: bool
    builtin: bool
    created_at: datetime
    updated_at: datetime


class AlertRuleCreate(Input):
    name: str = Field(max_length=64)
    expression: str = Field(
        max_length=1024,
        description="e.g. 'node.disk_used_bytes / node.disk_total_bytes > 0.9' (docs/monitoring.md, Alerts).",
    )
    for_s: int = Field(default=0, ge=0, description="Seconds the condition must hold before the alert fires.")
    severity: Severity = "warning"
    description: str = Field(default="", max_length=512)
    enabled: bool = True


class AlertRuleUpdate(Input):
    expression: str | None = Field(default=None, max_length=1024)
    for_s: int | None = Field(default=None, ge=0)
    severity: Severity | None = None
    description: str | None = Field(default=None, max_length=512)
    enabled: bool | None = None


class SilenceOut(Schema):
    id: int
    workspace_id: int | None
    matchers: dict[str, Any]
    ends_at: datetime
    comment: str
    created_by_name: str
    created_at: datetime


class SilenceCreate(Input):
    matchers: dict[str, str] = Field(
        description="Label -> exact value; the key 'rule' matches the rule's name. At least one.",
    )
    duration_s: int = Field(default=3600, ge=60, le=90 * 86400)
    comment: str = Field(default="", max_length=512)


class AlertChannelOut(Schema):
    id: int
    workspace_id: int | None
    name: str
    kind: str
    target: str
    enabled: bool
    created_at: datetime


class AlertChannelCreate(Input):
    name: str = Field(max_length=64)
    kind: Literal["webhook", "email"]
    target: str = Field(max_length=1024, description="The webhook's http(s) URL, or an e-mail address.")
    enabled: bool = True


class AlertChannelUpdate(Input):
    target: str | None = Field(default=None, max_length=1024)
    enabled: bool | None = None


class ChannelTestOut(Schema):
    channel_id: int
    ok: bool
    error: str | None
