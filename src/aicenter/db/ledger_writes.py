"""The dialect-specific statements of billing (services compose the rest): insert-if-absent of ledger entries
and of meter rows, keyed by their unique columns, on SQLite and PostgreSQL alike (``INSERT ... ON CONFLICT DO
NOTHING``). A concurrent writer of the same key waits on PostgreSQL for the first to commit and then skips."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import BigInteger, DateTime, Table, TypeDecorator, bindparam, text, update
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.types import TypeEngine

from aicenter.db.models.billing import BillingMeter, BillingRollup, LedgerEntry
from aicenter.db.models.jobs import Replica

_LEDGER = cast(Table, LedgerEntry.__table__)
_METERS = cast(Table, BillingMeter.__table__)


def _insert(session: AsyncSession) -> Any:
    return sqlite_insert if session.get_bind().dialect.name == "sqlite" else pg_insert


def _columns(rows: Sequence[Mapping[str, Any]], columns: frozenset[str]) -> dict[str, list[Any]]:
    """Rows as one array per column (every row gives every column, as the first does)."""
    return {name: [row[name] for row in rows] for name in columns}


def _unnest_insert(table: Table, column_set: frozenset[str], returning: str) -> Any:
    """``INSERT INTO table (columns) SELECT * FROM unnest(arrays) ON CONFLICT DO NOTHING RETURNING key`` on
    PostgreSQL: one constant statement with one array parameter per column, where a multi-row insert of 5,000
    rows went through SQLAlchemy's insertmanyvalues (pages of 1,000 rows, each bound value processed alone)
    and took ~0.2 s of a batch."""
    columns = sorted(column_set)
    pg_types = {name: table.c[name].type.compile(dialect=_PG_DIALECT) for name in columns}
    arrays = ", ".join(f"CAST(:{name} AS {pg_types[name]}[])" for name in columns)
    statement = text(
        f"INSERT INTO {table.name} ({', '.join(columns)}) SELECT * FROM unnest({arrays})"
        f" ON CONFLICT DO NOTHING RETURNING {returning}"
    )
    return statement.bindparams(*(bindparam(name, type_=ARRAY(_array_type(table, name))) for name in columns))


def _array_type(table: Table, name: str) -> Any:
    # Our UTC type's impl: asyncpg binds aware datetimes to TIMESTAMPTZ[] as they are.
    column_type = table.c[name].type
    return column_type.impl if isinstance(column_type, TypeDecorator) else column_type


async def insert_entries_if_absent(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> set[str]:
    """Insert ledger entries whose ``idempotency_key`` is new. Returns the keys actually inserted: an entry
    whose key exists (a retried or concurrent write) is skipped, and its caller must not count it again."""
    return await _insert_if_absent(session, _LEDGER, _ENTRY_COLUMNS, _INSERT_ENTRIES_PG, "idempotency_key", rows)


async def insert_meters_if_absent(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> set[int]:
    """Insert meter rows whose replica has none yet. Returns the replica ids actually inserted."""
    return await _insert_if_absent(session, _METERS, _METER_COLUMNS, _INSERT_METERS_PG, "replica_id", rows)


async def _insert_if_absent(
    session: AsyncSession,
    table: Table,
    columns: frozenset[str],
    unnest_insert: Any,
    key: str,
    rows: Sequence[Mapping[str, Any]],
) -> set[Any]:
    """Rows giving every column go in one statement per batch (PostgreSQL's ``unnest_insert``) or per page
    (SQLite, through the driver); others (an admin's entry, leaving columns to their defaults) through
    SQLAlchemy's insert. Returns the ``key`` values inserted."""
    if not rows:
        return set()
    if rows[0].keys() >= columns:
        if session.get_bind().dialect.name == "sqlite":
            return set(await _sqlite_insert_returning(session, table, columns, rows, key))
        return {value for (value,) in await session.execute(unnest_insert, _columns(rows, columns))}
    statement = _insert(session)(table).on_conflict_do_nothing().returning(table.c[key])
    return {value for (value,) in await session.execute(statement, list(rows))}


async def advance_meters(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> int:
    """Move meter rows forward, each only from the ``charged_until`` its charge was computed on (``old``):
    ``{replica_id, old, charged_until, microhours, cents, closed_at}`` per row. Returns how many moved; fewer
    than given means another writer moved some meanwhile.

    One statement per batch, not one per row (10,000 single-row updates took ~10 s of a metering pass on both
    databases): SQLite's executemany, whose row count is the sum; on PostgreSQL an ``UPDATE ... FROM
    unnest(arrays) RETURNING``, since asyncpg reports no row count for executemany.
    """
    if not rows:
        return 0
    if session.get_bind().dialect.name == "sqlite":
        # The driver's executemany with the values as SQLite stores them (SQLAlchemy's per-value processing of
        # 40,000 values was ~0.1 s of a pass).
        time = _stored(_METERS.c.charged_until.type, session.get_bind().dialect)
        params = [
            (
                time(r["charged_until"]),
                r["microhours"],
                r["cents"],
                time(r["closed_at"]),
                r["replica_id"],
                time(r["old"]),
            )
            for r in rows
        ]
        connection = await session.connection()
        moved = await connection.exec_driver_sql(_ADVANCE_SQLITE, params)
        return int(moved.rowcount)
    result = await session.execute(
        _ADVANCE_PG,
        {
            "ids": [r["replica_id"] for r in rows],
            "olds": [r["old"] for r in rows],
            "untils": [r["charged_until"] for r in rows],
            "microhours": [r["microhours"] for r in rows],
            "cents": [r["cents"] for r in rows],
            "closed": [r["closed_at"] for r in rows],
        },
    )
    return len(result.all())


_ADVANCE_SQLITE = (
    "UPDATE billing_meters SET charged_until = ?, microhours = ?, cents = ?, closed_at = ?"
    " WHERE replica_id = ? AND charged_until = ?"
)


def _stored(column_type: TypeEngine[Any], dialect: Dialect) -> Callable[[Any], Any]:
    """A column's bind processing (the value as the driver is given it: naive UTC text for our datetimes on
    SQLite), remembered per value: a pass binds thousands of copies' identical times (``now``, the previous
    pass), and ~5 us of processing per value was a tenth of a pass over 10,000 copies."""
    process = column_type.bind_processor(dialect)
    if process is None:
        return _same
    memo: dict[Any, Any] = {}

    def stored(value: Any) -> Any:
        try:
            return memo[value]
        except KeyError:
            memo[value] = out = process(value)
            return out

    return stored


def _same(value: Any) -> Any:
    return value


async def _sqlite_insert_returning(
    session: AsyncSession, table: Table, column_set: frozenset[str], rows: Sequence[Mapping[str, Any]], key: str
) -> list[Any]:
    """``INSERT ... VALUES (...), (...) ON CONFLICT DO NOTHING RETURNING key`` on SQLite through the driver, in
    pages under its parameter limit, with the values bound as SQLAlchemy would (``_stored``): its own
    multi-row insert processed each value alone and took ~0.3 s of a pass's 10,000 ledger entries."""
    dialect = session.get_bind().dialect
    columns = sorted(column_set)
    stored = [_stored(table.c[name].type, dialect) for name in columns]
    per_page = max(1, dialect.insertmanyvalues_max_parameters // len(columns))
    marks = "(" + ", ".join("?" * len(columns)) + ")"
    connection = await session.connection()
    keys: list[Any] = []
    for start in range(0, len(rows), per_page):
        page = rows[start : start + per_page]
        params: list[Any] = []
        for row in page:
            params.extend([store(row[name]) for name, store in zip(columns, stored, strict=True)])
        statement = (
            f"INSERT INTO {table.name} ({', '.join(columns)}) VALUES {', '.join([marks] * len(page))}"
            f" ON CONFLICT DO NOTHING RETURNING {key}"
        )
        keys.extend(k for (k,) in await connection.exec_driver_sql(statement, tuple(params)))
    return keys


# Arrays rather than ``FROM (VALUES ...)``: one constant statement (compiled once) and six parameters, where a
# VALUES list of 2,000 rows cost ~0.7 s of SQLAlchemy compilation per batch and 12,000 parameters.
_ADVANCE_PG = text(
    """
    UPDATE billing_meters AS m
    SET charged_until = g.charged_until, microhours = g.microhours, cents = g.cents, closed_at = g.closed_at
    FROM unnest(CAST(:ids AS BIGINT[]), CAST(:olds AS TIMESTAMPTZ[]), CAST(:untils AS TIMESTAMPTZ[]),
                CAST(:microhours AS BIGINT[]), CAST(:cents AS BIGINT[]), CAST(:closed AS TIMESTAMPTZ[]))
         AS g(replica_id, old, charged_until, microhours, cents, closed_at)
    WHERE m.replica_id = g.replica_id AND m.charged_until = g.old
    RETURNING m.replica_id
    """
).bindparams(
    bindparam("ids", type_=ARRAY(BigInteger)),
    bindparam("olds", type_=ARRAY(DateTime(timezone=True))),
    bindparam("untils", type_=ARRAY(DateTime(timezone=True))),
    bindparam("microhours", type_=ARRAY(BigInteger)),
    bindparam("cents", type_=ARRAY(BigInteger)),
    bindparam("closed", type_=ARRAY(DateTime(timezone=True))),
)


_ROLLUPS = cast(Table, BillingRollup.__table__)
_ROLLUP_KEY = ("day", "workspace_id", "user_id", "kind", "spec_name", "gpu_type")


async def add_to_rollups(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> None:
    """Add ``{day, workspace_id, user_id, kind, spec_name, gpu_type, microhours, cents, entries}`` to the day
    rollups (``INSERT ... ON CONFLICT DO UPDATE SET x = x + excluded.x``), in key order so two writers lock the
    same rows in the same order. Integers: the sums are exact on SQLite too."""
    if not rows:
        return
    statement = _insert(session)(_ROLLUPS)
    c = _ROLLUPS.c
    statement = statement.on_conflict_do_update(
        index_elements=list(_ROLLUP_KEY),
        set_={
            "microhours": c.microhours + statement.excluded.microhours,
            "cents": c.cents + statement.excluded.cents,
            "entries": c.entries + statement.excluded.entries,
        },
    )
    for row in sorted(rows, key=lambda r: tuple(r[k] for k in _ROLLUP_KEY)):
        await session.execute(statement, row)  # one row each: few per batch (one per day and key)


async def close_copies(session: AsyncSession, finished: Mapping[int, Any]) -> None:
    """Record the end of closed copies on their meter rows and flag their replicas closed (the meter's pass
    reads only replicas not flagged). ``finished``: replica id -> finished_at."""
    if not finished:
        return
    m = _METERS.c
    await session.execute(
        update(_METERS).where(m.replica_id == bindparam("b_id")).values(finished_at=bindparam("b_at")),
        [{"b_id": replica_id, "b_at": at} for replica_id, at in finished.items()],
    )
    await session.execute(update(Replica).where(Replica.id.in_(list(finished))).values(billing_closed=True))


_PG_DIALECT = postgresql.dialect()  # type: ignore[no-untyped-call]
_ENTRY_COLUMNS = frozenset((
    "workspace_id", "kind", "amount_cents", "machine_microhours", "idempotency_key", "job_id", "replica_id",
    "period_start", "period_end", "reason", "actor_id", "actor_name", "created_at",
))  # fmt: skip
_INSERT_ENTRIES_PG = _unnest_insert(_LEDGER, _ENTRY_COLUMNS, "idempotency_key")
_METER_COLUMNS = frozenset(c.name for c in _METERS.columns)
_INSERT_METERS_PG = _unnest_insert(_METERS, _METER_COLUMNS, "replica_id")
