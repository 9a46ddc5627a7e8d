"""Keyset pagination over a sort column plus a unique tie-breaker (``name, id``; ``updated_at, id``; ``path``).

``db.pagination.paginate`` pages by one integer column; catalog lists sort by names, times and paths. The
cursor carries the last row's keys and the sort it was made for, so a cursor from another sort is refused
instead of silently skipping rows. Each page is one indexed range scan of ``limit + 1`` rows.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from aicenter.core.errors import ValidationFailed
from aicenter.db.pagination import Page


def _encode_value(value: Any) -> Any:
    return {"t": value.isoformat()} if isinstance(value, datetime) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return datetime.fromisoformat(value["t"])
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value
    raise ValueError("bad cursor value")


def encode_cursor(sort: str, values: Sequence[Any]) -> str:
    raw = json.dumps({"s": sort, "k": [_encode_value(v) for v in values]}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str, n_keys: int) -> list[Any]:
    try:
        data = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
        if data["s"] != sort or len(data["k"]) != n_keys:
            raise ValueError("cursor of another listing")
        return [_decode_value(v) for v in data["k"]]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValidationFailed("is not a cursor this server returned for this listing", field="cursor") from exc


def _after(keys: Sequence[InstrumentedAttribute[Any]], values: Sequence[Any], descending: bool) -> ColumnElement[bool]:
    """(k1, k2, ...) strictly after (v1, v2, ...) in the sort order, spelled out so that both backends and
    the column types' bind processing (UTC datetimes on SQLite) apply to every value."""
    clauses: list[ColumnElement[bool]] = []
    for i, key in enumerate(keys):
        step = key < values[i] if descending else key > values[i]
        clauses.append(and_(*[keys[j] == values[j] for j in range(i)], step))
    return or_(*clauses)


async def keyset_page(
    session: AsyncSession,
    stmt: Select[Any],
    keys: Sequence[InstrumentedAttribute[Any]],
    *,
    sort: str,
    limit: int,
    cursor: str | None,
    descending: bool = False,
    max_limit: int = 500,
) -> Page[Any]:
    """One page of ``stmt`` (selecting one entity) ordered by ``keys``; the last key must be unique."""
    if not 1 <= limit <= max_limit:
        raise ValidationFailed(f"must be between 1 and {max_limit}", field="limit")
    if cursor:
        stmt = stmt.where(_after(keys, decode_cursor(cursor, sort, len(keys)), descending))
    stmt = stmt.order_by(*[k.desc() if descending else k.asc() for k in keys]).limit(limit + 1)
    rows = list((await session.scalars(stmt)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(sort, [getattr(rows[-1], k.key) for k in keys]) if more and rows else None
    return Page(rows, next_cursor)
