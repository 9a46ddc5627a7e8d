"""The dialect-specific statements of metric storage (services compose the rest): insert-if-absent for series
and points, and the additive upsert of rollups.

Both databases take ``INSERT ... ON CONFLICT``; only the merge of min/max differs (``least``/``greatest`` on
PostgreSQL, the two-argument scalar ``min``/``max`` on SQLite). Statements carry many rows each: one multi-row
INSERT of 1,000 points is ~50x faster than 1,000 single-row ones on PostgreSQL over a socket.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models.monitoring import MetricIngestCursor, MetricPoint, MetricRollup, MetricSeries

# Rows per statement: under SQLite's 32,766 bound parameters and PostgreSQL's 65,535 at 7 columns a row.
_CHUNK = 4_000


def _is_sqlite(session: AsyncSession) -> bool:
    return session.get_bind().dialect.name == "sqlite"


def _chunks(rows: Sequence[Any]) -> list[Sequence[Any]]:
    return [rows[i : i + _CHUNK] for i in range(0, len(rows), _CHUNK)]


async def insert_series_if_absent(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> None:
    """Insert series rows whose ``series_key`` is new; existing ones are left as they are (concurrent writers
    creating the same series both succeed)."""
    insert = sqlite_insert if _is_sqlite(session) else pg_insert
    for chunk in _chunks(rows):
        await session.execute(insert(MetricSeries).values(list(chunk)).on_conflict_do_nothing())


async def insert_new_points(
    session: AsyncSession, rows: Sequence[tuple[int, int, float]]
) -> list[tuple[int, int, float]]:
    """Insert raw points ``(series_id, at_ms, value)``; a point whose (series, time) is already stored is
    skipped. Returns the points actually inserted, so that rollups count every point exactly once even when a
    batch is written twice (a retried ingest)."""
    insert = sqlite_insert if _is_sqlite(session) else pg_insert
    inserted: list[tuple[int, int, float]] = []
    for chunk in _chunks(rows):
        statement = (
            insert(MetricPoint)
            .values([{"series_id": s, "at_ms": t, "value": v} for s, t, v in chunk])
            .on_conflict_do_nothing()
            .returning(MetricPoint.series_id, MetricPoint.at_ms, MetricPoint.value)
        )
        inserted.extend((s, t, v) for s, t, v in await session.execute(statement))
    return inserted


async def add_to_rollups(session: AsyncSession, rows: Sequence[Mapping[str, Any]]) -> None:
    """Merge partial aggregates (series_id, step_s, bucket_ms, count, sum, min, max) into the stored ones.

    Rows must be unique by (series_id, step_s, bucket_ms): PostgreSQL refuses to update one row twice in one
    statement. Sorted by key, so concurrent writers lock rows in the same order and cannot deadlock.
    """
    sqlite = _is_sqlite(session)
    insert = sqlite_insert if sqlite else pg_insert
    least, greatest = (func.min, func.max) if sqlite else (func.least, func.greatest)
    ordered = sorted(rows, key=lambda r: (r["series_id"], r["step_s"], r["bucket_ms"]))
    for chunk in _chunks(ordered):
        statement = insert(MetricRollup).values(list(chunk))
        excluded = statement.excluded
        await session.execute(
            statement.on_conflict_do_update(
                index_elements=[MetricRollup.series_id, MetricRollup.step_s, MetricRollup.bucket_ms],
                set_={
                    "count": MetricRollup.count + excluded.count,
                    "sum": MetricRollup.sum + excluded.sum,
                    "min": least(MetricRollup.min, excluded.min),
                    "max": greatest(MetricRollup.max, excluded.max),
                },
            )
        )


async def set_ingest_cursor(session: AsyncSession, *, path: str, job_id: int, offset: int) -> None:
    """Record how far a metrics file was ingested (insert or move forward)."""
    insert = sqlite_insert if _is_sqlite(session) else pg_insert
    statement = insert(MetricIngestCursor).values(path=path, job_id=job_id, offset=offset)
    await session.execute(
        statement.on_conflict_do_update(index_elements=[MetricIngestCursor.path], set_={"offset": offset})
    )
