"""Billing benchmarks; prints one JSON object.

* ``meter``: one metering pass (``services.billing.meter`` in batches of ``controllers.billing.BATCH``, as the
  controller runs it) over ``--running`` running copies (default 10,000: 100 jobs of 100 replicas), with
  ``--closed`` copies already closed in the history (default 100,000), on SQLite and PostgreSQL. Reported: the
  first pass (creates every meter row) and the steady pass a minute later (updates them), p50 of ``--passes``.
  Goal (issue 15): a pass <= 1 s.

    python bench/billing.py [--backend sqlite --backend postgres] [--running 10000] [--closed 100000] [--passes 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import insert

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.postgres import fresh_database

from aicenter.controllers.billing import BATCH
from aicenter.core.clock import utcnow
from aicenter.db import migrate
from aicenter.db.engine import Database
from aicenter.db.models import BillingMeter, Job, Replica, Workspace
from aicenter.services import billing

GOALS = {"pass_s": 1.0}
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


SECTIONS = {"meter": section_meter}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", choices=[*SECTIONS, []], default=[])
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"])
    parser.add_argument("--running", type=int, default=10_000)
    parser.add_argument("--closed", type=int, default=100_000)
    parser.add_argument("--passes", type=int, default=5)
    args = parser.parse_args()
    result: dict[str, Any] = {"goals": GOALS}
    for name in args.sections or list(SECTIONS):
        result[name] = SECTIONS[name](args)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
