"""Monitoring benchmarks; prints one JSON object.

Sections (``SECTIONS``; run the ones named on the command line, default all):

* ``write``: series write throughput (points/s) through ``record_samples`` on SQLite and PostgreSQL, in batches
  of 1,000 points (1,000 series, one point each, as a sampler round of 100 nodes x 10 metrics writes them), each
  batch its own transaction with its 5-minute and hourly rollups. The first batch, which creates the series, is
  reported apart.
* ``query``: a 90-day chart with 1,000 series stored. Every series holds 90 days of hourly rollups (what 15-second
  samples leave after the raw and 5-minute tiers expire: 2,160 rows a series, 2.16M in all, generated in SQL) and
  two days of 5-minute rollups (576 rows a series); the query is ``query_series`` over 90 days at its default
  step (6 h from the hourly tier, 360 points), for one series (one name, a label filter) and for one name's ten
  series (ten nodes on one chart). Goal: p50 <= 100 ms. The PostgreSQL plan is printed to show an index scan.

* ``scrape``: ``/metrics`` scrape time with 10,000 jobs (and 50 nodes of 8 accelerators, 22,000 series) stored,
  uncached and with the 5 s cache, and the process CPU per scrape; bench/monitoring_scrape.py says how. Goal:
  p95 <= 50 ms.

Other helpers add ``sampler`` in the same shape: a function taking the parsed arguments and
returning a JSON-able dict.

    python bench/monitoring.py [write] [query] [--backend sqlite --backend postgres] [--batches 20]
        [--series 1000] [--days 90] [--queries 50]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import text

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.monitoring_scrape import scrape
from tests.support.postgres import fresh_database

from aicenter.core.clock import utcnow
from aicenter.db import migrate
from aicenter.db.engine import Database
from aicenter.services import monitoring
from aicenter.services.monitoring import Sample

GOALS = {"query_p50_ms": 100.0}
NAMES_PER_NODE = 100  # 1,000 series = 100 names x 10 nodes


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))], 2)


class _Backend:
    """A fresh, migrated database of one kind for the duration of a ``with``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._pg: Any = None
        self.url = ""

    def __enter__(self) -> str:
        if self.kind == "postgres":
            self._pg = fresh_database("aicenter_bench")
            self.url = self._pg.__enter__()
        else:
            self._tmp = tempfile.TemporaryDirectory(prefix="aicenter-bench-series-")
            self.url = f"sqlite+aiosqlite:///{Path(self._tmp.name) / 'bench.db'}"
        return self.url

    def __exit__(self, *exc: object) -> None:
        if self._pg is not None:
            self._pg.__exit__(None, None, None)
        if self._tmp is not None:
            self._tmp.cleanup()


def _samples(series: int, at_offset_s: float) -> list[Sample]:
    at = utcnow() - timedelta(hours=1) + timedelta(seconds=at_offset_s)
    return [
        Sample(f"bench.metric_{i % NAMES_PER_NODE}", at, (i * 7 % 100) / 100, {"node": f"n{i // NAMES_PER_NODE}"})
        for i in range(series)
    ]


async def _write(url: str, batches: int, series: int) -> dict[str, Any]:
    db = Database(url)
    try:
        await migrate.upgrade(db)
        started = time.perf_counter()
        async with db.write() as session:
            await monitoring.record_samples(session, _samples(series, 0))
        first_ms = (time.perf_counter() - started) * 1000
        times: list[float] = []
        stored = 0
        for batch in range(1, batches + 1):
            samples = _samples(series, 15 * batch)
            started = time.perf_counter()
            async with db.write() as session:
                stored += await monitoring.record_samples(session, samples)
            times.append(time.perf_counter() - started)
        return {
            "batch_points": series,
            "batches": batches,
            "first_batch_ms (creates the series)": round(first_ms, 1),
            "points_per_s": round(stored / sum(times)),
            "batch_p50_ms": _pct([t * 1000 for t in times], 0.5),
            "batch_p95_ms": _pct([t * 1000 for t in times], 0.95),
        }
    finally:
        await db.dispose()


def section_write(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for kind in args.backend or ["sqlite", "postgres"]:
        with _Backend(kind) as url:
            out[kind] = asyncio.run(_write(url, args.batches, args.series))
    return out


_FILL = {
    # One row per series and bucket; values vary per row so that aggregates are not constant.
    "postgres": """
        INSERT INTO metric_rollups (series_id, step_s, bucket_ms, count, sum, min, max)
        SELECT s.id, CAST(:step AS INTEGER), b, CAST(:count AS BIGINT),
               CAST(:count AS DOUBLE PRECISION) * 0.5 + (s.id % 7) * 0.01, 0.05, 0.95
        FROM metric_series s,
             generate_series(CAST(:start AS BIGINT), CAST(:end AS BIGINT), CAST(:step_ms AS BIGINT)) b
        ON CONFLICT DO NOTHING
    """,
    "sqlite": """
        WITH RECURSIVE buckets(b) AS (
            SELECT :start UNION ALL SELECT b + :step_ms FROM buckets WHERE b + :step_ms <= :end
        )
        INSERT INTO metric_rollups (series_id, step_s, bucket_ms, count, sum, min, max)
        SELECT s.id, :step, b, :count, :count * 0.5 + (s.id % 7) * 0.01, 0.05, 0.95
        FROM metric_series s, buckets b
        WHERE true
        ON CONFLICT DO NOTHING
    """,
}


async def _query(kind: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(url)
    try:
        await migrate.upgrade(db)
        async with db.write() as session:
            await monitoring.record_samples(session, _samples(args.series, 0))
        now = utcnow()
        now_ms = int(now.timestamp() * 1000)
        started = time.perf_counter()
        for step, days in ((3600, args.days), (300, 2)):
            step_ms = step * 1000
            end = now_ms - now_ms % step_ms
            params = {
                "step": step,
                "step_ms": step_ms,
                "count": step // 15,
                "start": end - days * 86400_000,
                "end": end,
            }
            async with db.write() as session:
                await session.execute(text(_FILL[kind]), params)
        async with db.read() as session:
            rows = (await session.execute(text("SELECT count(*) FROM metric_rollups"))).scalar_one()
        if kind == "postgres":
            # What autovacuum does to an insert-mostly table (PostgreSQL 13+): sets the visibility map, so the
            # covering key is read by an index-only scan. Rows of the current hour stay being updated, and are
            # few; the chart reads them from the heap.
            async with db.engine.connect() as conn:
                await conn.execution_options(isolation_level="AUTOCOMMIT")
                await conn.execute(text("VACUUM ANALYZE metric_rollups"))
        fill_s = time.perf_counter() - started

        async def chart(labels: dict[str, str] | None) -> tuple[float, int, str, int]:
            t = time.perf_counter()
            async with db.read() as session:
                result = await monitoring.query_series(
                    session, None, name="bench.metric_3", start=now - timedelta(days=args.days), end=now, labels=labels
                )
            return (time.perf_counter() - t) * 1000, len(result.series), result.resolution, result.step_s

        entry: dict[str, Any] = {"series": args.series, "rollup_rows": rows, "fill_s": round(fill_s, 1)}
        for label, labels in (("one_series", {"node": "n4"}), ("ten_series", None)):
            await chart(labels)  # warm the caches and the statement cache
            times = []
            shape: tuple[int, str, int] = (0, "", 0)
            for _ in range(args.queries):
                ms, *rest = await chart(labels)
                times.append(ms)
                shape = (rest[0], rest[1], rest[2])
            entry[label] = {
                "series_returned": shape[0],
                "resolution": shape[1],
                "step_s": shape[2],
                "points_per_series": args.days * 86400 // shape[2],
                "p50_ms": _pct(times, 0.5),
                "p95_ms": _pct(times, 0.95),
                "goal_p50_ms": GOALS["query_p50_ms"],
                "met": _pct(times, 0.5) <= GOALS["query_p50_ms"],
            }
        if kind == "postgres":
            async with db.read() as session:
                ids = list(await session.scalars(text("SELECT id FROM metric_series WHERE name = 'bench.metric_3'")))
                plan = await session.execute(
                    text(
                        "EXPLAIN (ANALYZE, BUFFERS) SELECT series_id, bucket_ms / 21600000 AS b, "
                        "sum(sum) / sum(count), min(min), max(max) FROM metric_rollups "
                        f"WHERE series_id IN ({', '.join(map(str, ids))}) AND step_s = 3600 AND bucket_ms >= :s "
                        "GROUP BY series_id, b"
                    ),
                    {"s": now_ms - args.days * 86400_000},
                )
                entry["plan_ten_series"] = [line.strip() for (line,) in plan if "Scan" in line or "Heap" in line]
        return entry
    finally:
        await db.dispose()


def section_query(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for kind in args.backend or ["sqlite", "postgres"]:
        with _Backend(kind) as url:
            out[kind] = asyncio.run(_query(kind, url, args))
    return out


def section_scrape(args: argparse.Namespace) -> dict[str, Any]:
    """``/metrics`` scrape time with ``--jobs`` jobs stored (bench/monitoring_scrape.py)."""
    return scrape(tuple(args.backend or ("sqlite", "postgres")), args.jobs, args.scrapes)


SECTIONS: dict[str, Callable[[argparse.Namespace], dict[str, Any]]] = {
    "write": section_write,
    "query": section_query,
    "scrape": section_scrape,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"Sections to run: {', '.join(SECTIONS)} (default: all).")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"], help="Default: both.")
    parser.add_argument("--batches", type=int, default=20, help="write: timed batches of --series points.")
    parser.add_argument("--series", type=int, default=1000, help="Series stored (write: points per batch).")
    parser.add_argument("--days", type=int, default=90, help="query: days of hourly rollups stored and charted.")
    parser.add_argument("--queries", type=int, default=50, help="query: timed chart queries per kind.")
    parser.add_argument("--jobs", type=int, default=10_000, help="scrape: jobs stored.")
    parser.add_argument("--scrapes", type=int, default=40, help="scrape: timed scrapes per kind.")
    args = parser.parse_args()
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    result = {name: SECTIONS[name](args) for name in (args.sections or list(SECTIONS))}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
