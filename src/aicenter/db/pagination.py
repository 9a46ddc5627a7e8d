"""Cursor pagination over an integer id: stable under inserts, O(limit) per page via the primary key index."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from aicenter.core.errors import ValidationFailed

T = TypeVar("T")
MAX_LIMIT = 500


@dataclass
class Page(Generic[T]):
    items: list[T]
    next_cursor: str | None


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"after": last_id}).encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        value = json.loads(base64.urlsafe_b64decode(padded.encode()))["after"]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValidationFailed("is not a cursor this server returned", field="cursor") from exc
    if not isinstance(value, int):
        raise ValidationFailed("is not a cursor this server returned", field="cursor")
    return value


async def paginate(
    session: AsyncSession,
    stmt: Select[Any],
    id_column: InstrumentedAttribute[int],
    *,
    limit: int,
    cursor: str | None,
    descending: bool = False,
) -> Page[Any]:
    """Return one page of ``stmt`` ordered by ``id_column``; fetches ``limit + 1`` rows to know if more follow."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed(f"must be between 1 and {MAX_LIMIT}", field="limit")
    if cursor:
        after = decode_cursor(cursor)
        stmt = stmt.where(id_column < after if descending else id_column > after)
    stmt = stmt.order_by(id_column.desc() if descending else id_column.asc()).limit(limit + 1)
    rows = list((await session.scalars(stmt)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(getattr(rows[-1], id_column.key)) if more and rows else None
    return Page(rows, next_cursor)
