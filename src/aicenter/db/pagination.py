"""Keyset (cursor) pagination, the one way every listing pages: by its sort keys, ending in a unique column.

A page is one indexed range scan of ``limit + 1`` rows (the extra row says whether more follow), stable under
inserts and deletes, unlike OFFSET, which rescans every skipped row and shifts when rows come or go. Most lists
page by their integer id (``paginate(session, stmt, Job.id, ...)``); the catalog sorts by names, times and paths
with the id as tie-breaker (``paginate(session, stmt, CatalogItem.name, CatalogItem.id, sort="name", ...)``).

The cursor is opaque to clients: the last row's keys and the sort it was made for, so a cursor from another sort
of the listing is refused (a 422 naming ``cursor``) instead of silently skipping rows.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Select, and_, or_
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import InstrumentedAttribute

from aicenter.core.errors import ValidationFailed

__all__ = ["MAX_LIMIT", "Page", "decode_cursor", "encode_cursor", "paginate"]

T = TypeVar("T")
MAX_LIMIT = 500


@dataclass
class Page(Generic[T]):
    """One page of a listing and the cursor of the next one (None on the last page)."""

    items: list[T]
    next_cursor: str | None


def _encode_value(value: Any) -> Any:
    return {"t": value.isoformat()} if isinstance(value, datetime) else value


def _decode_value(value: Any) -> Any:
    if isinstance(value, dict):
        return datetime.fromisoformat(value["t"])
    if isinstance(value, str | int) and not isinstance(value, bool):
        return value
    raise ValueError("bad cursor value")


def encode_cursor(sort: str, values: Sequence[Any]) -> str:
    """The cursor after a row whose sort keys are ``values``, for the listing's ``sort``."""
    raw = json.dumps({"s": sort, "k": [_encode_value(v) for v in values]}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def decode_cursor(cursor: str, sort: str, n_keys: int) -> list[Any]:
    """The key values in ``cursor``; ValidationFailed (field ``cursor``) if it was not made for ``sort``."""
    try:
        data = json.loads(base64.urlsafe_b64decode((cursor + "=" * (-len(cursor) % 4)).encode()))
        if data["s"] != sort or len(data["k"]) != n_keys:
            raise ValueError("cursor of another listing")
        return [_decode_value(v) for v in data["k"]]
    except (binascii.Error, ValueError, KeyError, TypeError, UnicodeDecodeError) as exc:
        raise ValidationFailed("is not a cursor this server returned for this listing", field="cursor") from exc


def _after(keys: Sequence[InstrumentedAttribute[Any]], values: Sequence[Any], descending: bool) -> ColumnElement[bool]:
    """(k1, k2, ...) strictly after (v1, v2, ...) in the sort order, spelled out rather than as a row-value
    comparison so that both backends and the column types' bind processing (UTC datetimes on SQLite) apply to
    every value."""
    clauses: list[ColumnElement[bool]] = []
    for i, key in enumerate(keys):
        step = key < values[i] if descending else key > values[i]
        clauses.append(and_(*[keys[j] == values[j] for j in range(i)], step))
    return or_(*clauses)


async def paginate(
    session: AsyncSession,
    stmt: Select[Any],
    *keys: InstrumentedAttribute[Any],
    limit: int,
    cursor: str | None,
    descending: bool = False,
    sort: str | None = None,
    max_limit: int = MAX_LIMIT,
) -> Page[Any]:
    """One page of ``stmt`` (selecting one entity) ordered by ``keys``.

    Args:
        session: The read session.
        stmt: The listing's select with its filters, without order or limit.
        keys: The sort keys; the last must be unique (the id), so that no two rows tie.
        limit: Rows per page, 1 to ``max_limit``.
        cursor: ``next_cursor`` of the previous page, or None for the first.
        descending: Newest (largest) first.
        sort: The name of this order, when a listing has several (default: the keys' names and direction).
        max_limit: The largest page this listing serves.

    Raises:
        ValidationFailed: A limit out of range (field ``limit``), a cursor of another listing (field ``cursor``).
    """
    if not keys:
        raise TypeError("paginate needs at least one key column")
    if not 1 <= limit <= max_limit:
        raise ValidationFailed(f"must be between 1 and {max_limit}", field="limit")
    if sort is None:
        sort = ("-" if descending else "") + ",".join(k.key for k in keys)
    if cursor:
        stmt = stmt.where(_after(keys, decode_cursor(cursor, sort, len(keys)), descending))
    stmt = stmt.order_by(*[k.desc() if descending else k.asc() for k in keys]).limit(limit + 1)
    rows = list((await session.scalars(stmt)).all())
    more = len(rows) > limit
    rows = rows[:limit]
    next_cursor = encode_cursor(sort, [getattr(rows[-1], k.key) for k in keys]) if more and rows else None
    return Page(rows, next_cursor)
