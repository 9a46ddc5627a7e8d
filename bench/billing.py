"""Billing benchmarks; prints one JSON object.

* ``meter``: one metering pass (``services.billing.meter`` in batches of ``controllers.billing.BATCH``, as the
  controller runs it) over ``--running`` running copies (default 10,000: 100 jobs of 100 replicas), with
  ``--closed`` copies already closed in the history (default 100,000), on SQLite and PostgreSQL. Reported: the
  first pass (creates every meter row) and the steady pass a minute later (updates them), p50 of ``--passes``.
  Goal (issue 15): a pass <= 1 s.
* ``report``: a yearly report (``services.billing.report``, month buckets and year buckets, each dimension) over
  ``--entries`` ledger entries (default 1,000,000) synthesized as copies of an hour charged every minute over
  2026, with the day rollups the meter would have written for them; p50 of ``--passes``. Goal: <= 500 ms.

    python bench/billing.py [meter] [report] [--backend sqlite --backend postgres] [--running 10000]
        [--closed 100000] [--entries 1000000] [--passes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import func, insert, select

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.postgres import fresh_database

from aicenter.controllers.billing import BATCH
from aicenter.core.billing_periods import Period
from aicenter.core.clock import utcnow
from aicenter.db import migrate
from aicenter.db.engine import Database
from aicenter.db.models import BillingMeter, BillingRollup, Job, LedgerEntry, Replica, Workspace
from aicenter.services import billing
from aicenter.services.context import Actor

GOALS = {"pass_s": 1.0, "yearly_report_s": 0.5}
PER_JOB = 100


async def _fill(db: Database, running: int, closed: int, t0: datetime) -> None:
    """One workspace; ``running`` copies started at t0; ``closed`` copies that ran an hour and were closed."""
    async with db.write() as session:
        session.add(Workspace(id=1, name="bench"))
        await session.flush()
        total = running + closed
        jobs = (total + PER_JOB - 1) // PER_JOB
        await session.execute(
            insert(Job), [{"id": j + 1, "workspace_id": 1, "name": f"j{j}", "spec": {}} for j in range(jobs)]
        )
        rows: list[dict[str, Any]] = []
        meters: list[dict[str, Any]] = []
        for i in range(total):
            done = i < closed
            rows.append(
                {
                    "id": i + 1,
                    "job_id": i // PER_JOB + 1,
                    "task": "worker",
                    "index": i % PER_JOB,
                    "billing_weight": 1.5,
                    "price_per_hour": Decimal("2.5"),
                    "started_at": t0 - timedelta(hours=2),
                    "finished_at": t0 - timedelta(hours=1) if done else None,
                    "status": "succeeded" if done else "running",
                    "billing_closed": done,
                }
            )
            if done:
                meters.append(
                    {
                        "replica_id": i + 1,
                        "workspace_id": 1,
                        "job_id": i // PER_JOB + 1,
                        "charged_until": t0 - timedelta(hours=1),
                        "microhours": 1_500_000,
                        "cents": 375,
                        "closed_at": t0 - timedelta(hours=1),
                        "billing_weight": 1.5,
                        "price_per_hour": Decimal("2.5"),
                        "started_at": t0 - timedelta(hours=2),
                        "finished_at": t0 - timedelta(hours=1),
                    }
                )
        for start in range(0, len(rows), 5000):
            await session.execute(insert(Replica), rows[start : start + 5000])
        for start in range(0, len(meters), 5000):
            await session.execute(insert(BillingMeter), meters[start : start + 5000])


async def _pass(db: Database, now: datetime) -> tuple[float, int]:
    started, after, entries = time.perf_counter(), 0, 0
    while True:
        async with db.write() as session:
            result = await billing.meter(session, now, after_replica_id=after, limit=BATCH)
        entries += result.entries
        if not result.more or result.last_replica_id is None:
            return time.perf_counter() - started, entries
        after = result.last_replica_id


async def _meter(url: str, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(url)
    try:
        await migrate.upgrade(db)
        t0 = utcnow()
        await _fill(db, args.running, args.closed, t0)
        # As the server's start-up does (``aicenter.app``): what lives on stays out of full collections, so a
        # pass pays the collector for its own objects only.
        gc.collect()
        gc.freeze()
        first_s, first_entries = await _pass(db, t0)
        steady: list[float] = []
        for n in range(1, args.passes + 1):
            seconds, entries = await _pass(db, t0 + timedelta(minutes=n))
            assert entries == args.running, entries
            steady.append(seconds)
        return {
            "running": args.running,
            "closed": args.closed,
            "first_pass_s (creates meter rows)": round(first_s, 3),
            "first_pass_entries": first_entries,
            "steady_pass_p50_s": round(statistics.median(steady), 3),
            "steady_pass_max_s": round(max(steady), 3),
        }
    finally:
        await db.dispose()


def section_meter(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in args.backend or ["sqlite", "postgres"]:
        if kind == "postgres":
            with fresh_database("aicenter_bench") as url:
                out[kind] = asyncio.run(_meter(url, args))
        else:
            with tempfile.TemporaryDirectory(prefix="aicenter-bench-billing-") as tmp:
                out[kind] = asyncio.run(_meter(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}", args))
    return out


COPY_MINUTES = 60  # a synthesized copy runs an hour, charged every minute
WORKSPACES, USERS_PER_WS = 50, 4
SPECS = [("cpu-4", ""), ("gpu-a100", "a100"), ("gpu-h100", "h100"), ("gpu-910b", "910b")]
KINDS = ["train", "notebook", "service"]
YEAR = datetime(2026, 1, 1, tzinfo=UTC)


async def _fill_ledger(db: Database, entries: int) -> tuple[int, int]:
    """``entries`` charges of 0.05 coins and 0.025 machine-hours each, as copies over 2026, and their day
    rollups (summed here exactly as the meter sums them: by the UTC day a charge's period ends). Returns
    (cents charged, rollup rows)."""
    rng = random.Random(15)
    rollups: dict[tuple[Any, ...], list[int]] = {}
    async with db.write() as session:
        session.add(Workspace(id=1, name="bench"))
    copies = (entries + COPY_MINUTES - 1) // COPY_MINUTES
    batch: list[dict[str, Any]] = []
    written = 0
    for copy in range(copies):
        ws = copy % WORKSPACES + 1
        user = ws * 10 + rng.randrange(USERS_PER_WS)
        spec, gpu_type = rng.choice(SPECS)
        kind = rng.choice(KINDS)
        start = YEAR + timedelta(minutes=rng.randrange(365 * 24 * 60 - COPY_MINUTES))
        for minute in range(min(COPY_MINUTES, entries - written)):
            period_start = start + timedelta(minutes=minute)
            period_end = period_start + timedelta(minutes=1)
            batch.append(
                {
                    "workspace_id": ws,
                    "kind": "charge",
                    "amount_cents": -5,
                    "machine_microhours": 25_000,
                    "idempotency_key": f"charge:{copy}:{minute}",
                    "job_id": copy,
                    "replica_id": copy,
                    "period_start": period_start,
                    "period_end": period_end,
                    "created_at": period_end,
                }
            )
            sums = rollups.setdefault((period_end.date(), ws, user, kind, spec, gpu_type), [0, 0, 0])
            sums[0] += 25_000
            sums[1] += 5
            sums[2] += 1
            written += 1
            if len(batch) == 20_000:
                async with db.write() as session:
                    await session.execute(insert(LedgerEntry), batch)
                batch = []
    async with db.write() as session:
        if batch:
            await session.execute(insert(LedgerEntry), batch)
        rows = [
            dict(zip(("day", "workspace_id", "user_id", "kind", "spec_name", "gpu_type"), key, strict=True))
            | {"microhours": v[0], "cents": v[1], "entries": v[2]}
            for key, v in rollups.items()
        ]
        for start_at in range(0, len(rows), 5000):
            await session.execute(insert(BillingRollup), rows[start_at : start_at + 5000])
    return written * 5, len(rows)


async def _report(url: str, args: argparse.Namespace) -> dict[str, Any]:
    db = Database(url)
    admin = Actor.system("bench")
    try:
        await migrate.upgrade(db)
        started = time.perf_counter()
        cents, rollup_rows = await _fill_ledger(db, args.entries)
        fill_s = time.perf_counter() - started
        out: dict[str, Any] = {"entries": args.entries, "rollup_rows": rollup_rows, "fill_s": round(fill_s, 1)}
        for period in (Period.MONTH, Period.YEAR):
            for by in billing.GroupBy:
                times = []
                for _ in range(args.passes):
                    t = time.perf_counter()
                    async with db.read() as session:
                        report = await billing.report(
                            session, admin, period=period, group_by=by, start=date(2026, 1, 1), end=date(2027, 1, 1)
                        )
                    times.append(time.perf_counter() - t)
                    assert report.amount == Decimal(cents).scaleb(-2), (report.amount, cents)  # the ledger's sum
                out[f"year_by_{period.value}_{by.value}_p50_s"] = round(statistics.median(times), 4)
        times = []
        for _ in range(args.passes):
            t = time.perf_counter()
            async with db.read() as session:
                await billing.stats(session, admin, period=Period.MONTH, start=date(2026, 1, 1), end=date(2027, 1, 1))
            times.append(time.perf_counter() - t)
        out["stats_year_by_month_p50_s"] = round(statistics.median(times), 4)
        # For comparison: one aggregate over the ledger itself, the least any report without rollups reads.
        t = time.perf_counter()
        async with db.read() as session:
            await session.execute(select(func.sum(LedgerEntry.amount_cents)).where(LedgerEntry.kind == "charge"))
        out["ledger_scan_sum_s (no rollups, for comparison)"] = round(time.perf_counter() - t, 4)
        return out
    finally:
        await db.dispose()


def section_report(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in args.backend or ["sqlite", "postgres"]:
        if kind == "postgres":
            with fresh_database("aicenter_bench") as url:
                out[kind] = asyncio.run(_report(url, args))
        else:
            with tempfile.TemporaryDirectory(prefix="aicenter-bench-billing-") as tmp:
                out[kind] = asyncio.run(_report(f"sqlite+aiosqlite:///{Path(tmp) / 'bench.db'}", args))
    return out


SECTIONS = {"meter": section_meter, "report": section_report}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", choices=[*SECTIONS, []], default=[])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--running", type=int, default=10_000)
    parser.add_argument("--closed", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--entries", type=int, default=1_000_000)
    args = parser.parse_args()
    result: dict[str, Any] = {"goals": GOALS}
    for name in args.sections or list(SECTIONS):
        result[name] = SECTIONS[name](args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
