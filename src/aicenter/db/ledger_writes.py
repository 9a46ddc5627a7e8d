"""The dialect-specific statements of billing (services compose the rest): insert-if-absent of ledger entries
and of meter rows, keyed by their unique columns, on SQLite and PostgreSQL alike (``INSERT ... ON CONFLICT DO
NOTHING``). A concurrent writer of the same key waits on PostgreSQL for the first to commit and then skips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models.billing import BillingMeter, LedgerEntry

_LEDGER = cast(Table, LedgerEntry.__table__)
_METERS = cast(Table, BillingMeter.__table__)


def _insert(session: AsyncSession) -> Any:
    return sqlite_insert if session.get_bind().dialect.name == "sqlite" else pg_insert


async def insert_entries_if_absent(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """Insert ledger entries whose ``idempotency_key`` is new. Returns the keys actually inserted: an entry
    whose key exists (a retried or concurrent write) is skipped, and its caller must not count it again."""
    if not rows:
        return set()
    statement = _insert(session)(_LEDGER).on_conflict_do_nothing().returning(_LEDGER.c.idempotency_key)
    result = await session.execute(statement, list(rows))
    return {key for (key,) in result}


async def insert_meters_if_absent(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> set[int]:
    """Insert meter rows whose replica has none yet. Returns the replica ids actually inserted."""
    if not rows:
        return set()
    statement = _insert(session)(_METERS).on_conflict_do_nothing().returning(_METERS.c.replica_id)
    result = await session.execute(statement, list(rows))
    return {replica_id for (replica_id,) in result}
