"""Keyset pagination (aicenter.db.pagination) on SQLite and PostgreSQL: every row once and in order across
pages, with ties on the sort key, descending, datetime keys; cursors of another listing and bad limits refused."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute

from aicenter.core.clock import utcnow
from aicenter.core.errors import ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import Lease
from aicenter.db.pagination import paginate

OWNERS = ["b", "a", "c", "a", "b", "a", "c"]  # ties on the first key: the unique name breaks them


async def _rows(db: Database) -> None:
    start = utcnow()
    async with db.write() as session:
        for i, owner in enumerate(OWNERS):
            session.add(Lease(name=f"n{i}", lock_owner=owner, lock_expires_at=start + timedelta(seconds=i % 3)))


async def _all_pages(
    db: Database, *keys: InstrumentedAttribute[Any], limit: int, descending: bool = False
) -> tuple[list[str], int]:
    names: list[str] = []
    cursor: str | None = None
    pages = 0
    while True:
        async with db.read() as session:
            page = await paginate(session, select(Lease), *keys, limit=limit, cursor=cursor, descending=descending)
        names += [row.name for row in page.items]
        pages += 1
        if page.next_cursor is None:
            return names, pages
        cursor = page.next_cursor


@pytest.mark.parametrize("descending", [False, True])
async def test_pages_cover_every_row_once_in_sort_order(db: Database, descending: bool) -> None:
    await _rows(db)
    expected = sorted(((o, f"n{i}") for i, o in enumerate(OWNERS)), reverse=descending)
    names, pages = await _all_pages(db, Lease.lock_owner, Lease.name, limit=2, descending=descending)
    assert names == [name for _, name in expected]
    assert pages == 4  # 7 rows by 2: the last page knows it is the last (limit + 1 rows fetched)


async def test_a_datetime_key_pages_like_any_other(db: Database) -> None:
    await _rows(db)
    async with db.read() as session:
        rows = (await session.scalars(select(Lease).order_by(Lease.lock_expires_at, Lease.name))).all()
    names, _ = await _all_pages(db, Lease.lock_expires_at, Lease.name, limit=3)
    assert names == [row.name for row in rows]


async def test_a_cursor_of_another_order_or_a_bad_limit_is_refused(db: Database) -> None:
    await _rows(db)
    async with db.read() as session:
        first = await paginate(session, select(Lease), Lease.lock_owner, Lease.name, limit=2, cursor=None)
        assert first.next_cursor is not None
        for cursor in (first.next_cursor, "not-a-cursor"):
            with pytest.raises(ValidationFailed) as info:
                await paginate(
                    session, select(Lease), Lease.lock_owner, Lease.name, limit=2, cursor=cursor, descending=True
                )
            assert info.value.details["field"] == "cursor"
        with pytest.raises(ValidationFailed) as info:
            await paginate(session, select(Lease), Lease.name, limit=0, cursor=None)
        assert info.value.details["field"] == "limit"
