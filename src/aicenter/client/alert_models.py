"""Typed views of the alerts API's responses: alerts, rules, silences, channels and cluster events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aicenter.client.models import ApiModel

__all__ = ["Alert", "AlertChannel", "AlertRule", "ChannelTest", "ClusterEvent", "Silence"]


class ClusterEvent(ApiModel):
    id: int
    at: datetime
    kind: str
    severity: str
    node_id: int | None = None
    job_id: int | None = None
    service_id: int | None = None
    workspace_id: int | None = None
    message: str = ""
    details: dict[str, Any] = {}


class Alert(ApiModel):
    id: int
    rule_id: int
    rule: str
    labels: dict[str, Any] = {}
    workspace_id: int | None = None
    state: str
    severity: str
    summary: str = ""
    value: float | None = None
    started_at: datetime | None = None
    resolved_at: datetime | None = None


class AlertRule(ApiModel):
    id: int
    workspace_id: int | None = None
    name: str
    expression: str
    for_s: int = 0
    severity: str
    description: str = ""
    enabled: bool = True
    builtin: bool = False


class Silence(ApiModel):
    id: int
    workspace_id: int | None = None
    matchers: dict[str, Any] = {}
    ends_at: datetime
    comment: str = ""
    created_by_name: str = ""


class AlertChannel(ApiModel):
    id: int
    workspace_id: int | None = None
    name: str
    kind: str
    target: str
    enabled: bool = True


class ChannelTest(ApiModel):
    channel_id: int
    ok: bool
    error: str | None = None
