"""The dialect-specific statements of billing (services compose the rest): insert-if-absent of ledger entries
and of meter rows, keyed by their unique columns, on SQLite and PostgreSQL alike (``INSERT ... ON CONFLICT DO
NOTHING``). A concurrent writer of the same key waits on PostgreSQL for the first to commit and then skips."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

from sqlalchemy import Table, bindparam, column, update, values
from sqlalchemy import cast as sql_cast
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


async def advance_meters(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> int:
    """Move meter rows forward, each only from the ``charged_until`` its charge was computed on (``old``):
    ``{replica_id, old, charged_until, microhours, cents, closed_at}`` per row. Returns how many moved; fewer
    than given means another writer moved some meanwhile.

    One statement per batch, not one per row (10,000 single-row updates took ~10 s of a metering pass on both
    databases): SQLite's executemany, whose row count is the sum; on PostgreSQL an ``UPDATE ... FROM (VALUES
    ...) RETURNING``, since asyncpg reports no row count for executemany.
    """
    if not rows:
        return 0
    m = _METERS.c
    if session.get_bind().dialect.name == "sqlite":
        statement = (
            update(_METERS)
            .where(m.replica_id == bindparam("b_replica_id"), m.charged_until == bindparam("b_old"))
            .values(
                charged_until=bindparam("b_charged_until"),
                microhours=bindparam("b_microhours"),
                cents=bindparam("b_cents"),
                closed_at=bindparam("b_closed_at"),
            )
        )
        result = await session.execute(statement, [{f"b_{k}": v for k, v in row.items()} for row in rows])
        return int(result.rowcount)  # type: ignore[attr-defined]
    given = values(
        column("replica_id", m.replica_id.type),
        column("old", m.charged_until.type),
        column("charged_until", m.charged_until.type),
        column("microhours", m.microhours.type),
        column("cents", m.cents.type),
        column("closed_at", m.closed_at.type),
        name="given",
    ).data([(r["replica_id"], r["old"], r["charged_until"], r["microhours"], r["cents"], r["closed_at"]) for r in rows])
    statement = (
        update(_METERS)
        .where(m.replica_id == given.c.replica_id, m.charged_until == given.c.old)
        .values(
            charged_until=given.c.charged_until,
            microhours=given.c.microhours,
            cents=given.c.cents,
            # NULLs in VALUES are untyped text to PostgreSQL: typed by the cast.
            closed_at=sql_cast(given.c.closed_at, m.closed_at.type),
        )
        .returning(m.replica_id)
    )
    return len((await session.execute(statement)).all())
