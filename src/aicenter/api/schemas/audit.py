"""The audit log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aicenter.api.schemas.common import Schema


class AuditEventOut(Schema):
    id: int
    at: datetime
    actor_id: int | None
    actor_name: str
    action: str
    target_type: str
    target_id: str | None
    workspace_id: int | None
    client_address: str | None
    request_id: str | None
    details: dict[str, Any]
