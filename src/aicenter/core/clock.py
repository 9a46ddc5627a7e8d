"""UTC time helpers. All times are timezone-aware UTC; the API writes them as ISO-8601."""

from __future__ import annotations

from datetime import UTC, datetime


def utcnow() -> datetime:
    return datetime.now(UTC)
