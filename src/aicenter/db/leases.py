"""Leased rows: how background controllers on many replicas share work without doing it twice.

The pattern (after dstack's pipelines): a worker *claims* free rows in a short transaction (``SELECT ... FOR
UPDATE SKIP LOCKED`` on PostgreSQL; SQLite's ``BEGIN IMMEDIATE`` already serializes writers), writing its
owner, a fresh token and an expiry. It then does the slow work outside any transaction, and applies the
result with an update guarded by the token: if the lease expired and another worker took the row, the
token no longer matches, the update touches nothing and the work result is dropped. Long work renews the
lease (heartbeat) before it expires.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, CursorResult, or_, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.db.base import LeaseMixin
from aicenter.db.engine import Database
from aicenter.db.models.lease import Lease

log = logging.getLogger(__name__)

M = TypeVar("M", bound=LeaseMixin)


def is_free(model: type[LeaseMixin], now: datetime) -> ColumnElement[bool]:
    """Rows that nobody holds: never leased, released, or whose lease expired."""
    return or_(model.lock_expires_at.is_(None), model.lock_expires_at < now)


async def claim_rows(
    session: AsyncSession,
    model: type[M],
    *where: ColumnElement[bool],
    owner: str,
    ttl_s: float,
    limit: int = 1,
    order_by: Any = None,
) -> list[M]:
    """Lease up to ``limit`` free rows matching ``where``. Each returned row carries its new ``lock_token``.

    Must run inside a write transaction; the rows are leased when it commits.
    """
    now = utcnow()
    stmt = select(model).where(is_free(model, now), *where).limit(limit).with_for_update(skip_locked=True)
    if order_by is not None:
        stmt = stmt.order_by(order_by)
    rows = list((await session.scalars(stmt)).all())
    expires = now + timedelta(seconds=ttl_s)
    for row in rows:
        row.lock_owner = owner
        row.lock_token = secrets.token_hex(16)
        row.lock_expires_at = expires
    await session.flush()
    return rows


async def guarded_update(
    session: AsyncSession, model: type[LeaseMixin], *identity: ColumnElement[bool], token: str, **values: Any
) -> bool:
    """Apply ``values`` to the row only if it is still leased with ``token``. Returns whether it was."""
    stmt = update(model).where(*identity, model.lock_token == token).values(**values)
    result = await session.execute(stmt.execution_options(synchronize_session=False))
    assert isinstance(result, CursorResult)
    return result.rowcount == 1


async def renew_row(
    session: AsyncSession, model: type[LeaseMixin], *identity: ColumnElement[bool], token: str, ttl_s: float
) -> bool:
    """Extend a lease we hold. False means it was lost: stop working on the row."""
    expires = utcnow() + timedelta(seconds=ttl_s)
    return await guarded_update(session, model, *identity, token=token, lock_expires_at=expires)


async def release_row(
    session: AsyncSession, model: type[LeaseMixin], *identity: ColumnElement[bool], token: str
) -> bool:
    return await guarded_update(
        session, model, *identity, token=token, lock_owner=None, lock_token=None, lock_expires_at=None
    )


async def hold_rows(session: AsyncSession, model: type[M], tokens: Mapping[int, str], *, ttl_s: float) -> list[M]:
    """The rows of ``tokens`` (id -> lease token) that we still hold, read afresh and locked until the caller
    commits (``FOR UPDATE`` on PostgreSQL; SQLite's write transaction serializes writers), with their leases
    renewed. In id order, so that locks are always taken in the same order.

    A row whose token differs was lost (its lease expired and another worker claimed it): that is the one
    meaning of "lease lost", here and in ``renew_row``; the caller drops its work on such a row.
    """
    if not tokens:
        return []
    rows = (
        await session.scalars(
            select(model)
            .where(model.id.in_(tokens))  # type: ignore[attr-defined]
            .order_by(model.id)  # type: ignore[attr-defined]
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    ).all()
    held = [row for row in rows if row.lock_token == tokens[row.id]]  # type: ignore[attr-defined]
    expires = utcnow() + timedelta(seconds=ttl_s)
    for row in held:
        row.lock_expires_at = expires
    return held


def release_held(rows: Iterable[LeaseMixin]) -> None:
    """Give back the leases of rows returned by ``hold_rows``; written when the caller's transaction commits."""
    for row in rows:
        row.lock_owner = row.lock_token = row.lock_expires_at = None


class RowLeaseKeeper:
    """Renews the leases of rows while slow work on them runs outside any transaction (a stop waits its grace).

    Use as ``async with RowLeaseKeeper(db, Job, tokens, ttl_s):``; it renews every third of ``ttl_s`` and
    forgets rows it lost (``lost``). The work's final write still checks the token (``hold_rows``): renewing
    only keeps others from taking the rows while the work runs.
    """

    def __init__(self, db: Database, model: type[LeaseMixin], tokens: Mapping[int, str], ttl_s: float) -> None:
        self.db = db
        self.model = model
        self.tokens = dict(tokens)
        self.ttl_s = ttl_s
        self.lost: set[int] = set()
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> RowLeaseKeeper:
        self._task = asyncio.create_task(self._keep())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task

    async def _keep(self) -> None:
        while self.tokens:
            await asyncio.sleep(self.ttl_s / 3)
            try:
                async with self.db.write() as session:
                    for row_id, token in list(self.tokens.items()):
                        ident = self.model.id == row_id  # type: ignore[attr-defined]
                        if not await renew_row(session, self.model, ident, token=token, ttl_s=self.ttl_s):
                            self.lost.add(row_id)
                            del self.tokens[row_id]
            except Exception:  # the database is unreachable for a moment: the next renewal tries again
                log.warning("renewing %d %s leases failed", len(self.tokens), self.model.__name__, exc_info=True)


@dataclass(frozen=True)
class NamedLease:
    name: str
    owner: str
    token: str
    expires_at: datetime


async def acquire(db: Database, name: str, owner: str, ttl_s: float) -> NamedLease | None:
    """Take the singleton lease ``name`` if nobody holds it. None when another owner holds it."""
    async with db.write() as session:
        insert = sqlite_insert if db.is_sqlite else pg_insert
        await session.execute(insert(Lease).values(name=name).on_conflict_do_nothing(index_elements=["name"]))
        rows = await claim_rows(session, Lease, Lease.name == name, owner=owner, ttl_s=ttl_s)
        if not rows:
            return None
        row = rows[0]
        assert row.lock_token is not None
        assert row.lock_expires_at is not None
        return NamedLease(name, owner, row.lock_token, row.lock_expires_at)


async def renew(db: Database, lease: NamedLease, ttl_s: float) -> NamedLease | None:
    """Extend a held lease; None if it was lost (expired and taken by another owner)."""
    async with db.write() as session:
        ok = await renew_row(session, Lease, Lease.name == lease.name, token=lease.token, ttl_s=ttl_s)
    # The row's expiry is a moment later than this one: the caller renews early, so the difference is moot.
    return NamedLease(lease.name, lease.owner, lease.token, utcnow() + timedelta(seconds=ttl_s)) if ok else None


async def renew_in(session: AsyncSession, lease: NamedLease, *, ttl_s: float) -> bool:
    """Extend a held named lease in the caller's write transaction: the guard of a holder's writes (they are
    committed only with the lease still theirs). False means it was lost: write nothing."""
    return await renew_row(session, Lease, Lease.name == lease.name, token=lease.token, ttl_s=ttl_s)


async def release(db: Database, lease: NamedLease) -> bool:
    async with db.write() as session:
        return await release_row(session, Lease, Lease.name == lease.name, token=lease.token)
