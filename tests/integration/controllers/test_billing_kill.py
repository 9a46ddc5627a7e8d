"""Exactly once with real processes: three meter processes on one database (SQLite file or PostgreSQL), each
``kill -9``ed and restarted again and again while copies run and end; afterwards every closed copy's charges are
the formula to the cent, no period is charged twice, and every balance is the sum of its ledger."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import func, select, update

from aicenter.core.clock import utcnow
from aicenter.db import migrate
from aicenter.db.engine import Database
from aicenter.db.models import Job, LedgerEntry, Replica, Workspace
from aicenter.services import billing
from aicenter.services.context import Actor
from tests.support.postgres import fresh_database
from tests.support.waiting import wait_for

pytestmark = [pytest.mark.slow]

COPIES = 40
RUN_S = 15.0
ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "postgres":
        with fresh_database("aicenter_billing_kill") as pg:
            yield pg
    else:
        yield f"sqlite+aiosqlite:///{tmp_path / 'billing.db'}"


async def _setup(url: str) -> list[int]:
    db = Database(url)
    try:
        await migrate.upgrade(db)
        async with db.write() as session:
            workspace = Workspace(name="kill")
            session.add(workspace)
            await session.flush()
            job = Job(workspace_id=workspace.id, name="j", spec={})
            session.add(job)
            await session.flush()
            started = utcnow() - timedelta(hours=1)
            rows = [
                Replica(
                    job_id=job.id,
                    task="w",
                    index=i,
                    status="running",
                    billing_weight=[0.1, 1.5, 2.0, 0.333][i % 4],
                    price_per_hour=Decimal(["3.3333", "0.0001", "7", "12.5"][i % 4]),
                    started_at=started + timedelta(microseconds=i * 7919),
                )
                for i in range(COPIES)
            ]
            session.add_all(rows)
            await session.flush()
            return [r.id for r in rows]
    finally:
        await db.dispose()


def _start(url: str, owner: str, home: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
    home.mkdir(parents=True, exist_ok=True)
    with (home / "meter.log").open("ab") as log:  # what a meter said before it was killed, for a failure
        return subprocess.Popen(
            [sys.executable, "-m", "tests.support.billing_meter", url, owner, str(home)],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=log,
        )


async def _finish(url: str, replica_ids: list[int]) -> None:
    db = Database(url)
    try:
        async with db.write() as session:
            await session.execute(update(Replica).where(Replica.id.in_(replica_ids)).values(finished_at=utcnow()))
    finally:
        await db.dispose()


async def _check(url: str) -> tuple[list[billing.Mismatch], int, int, Decimal, int]:
    db = Database(url)
    try:
        async with db.write() as session:  # one last pass in this process closes what the killed ones left
            await billing.meter(session, utcnow(), min_period=timedelta(0))
        async with db.read() as session:
            mismatches = await billing.verify(session, Actor.system("test"))
            entries = int(await session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)
            keys = int(await session.scalar(select(func.count(func.distinct(LedgerEntry.idempotency_key)))) or 0)
            balance = Decimal(await session.scalar(select(Workspace.balance)) or 0)
            cents = int(await session.scalar(select(func.sum(LedgerEntry.amount_cents))) or 0)
        return mismatches, entries, keys, balance, cents
    finally:
        await db.dispose()


def test_meters_killed_at_random_charge_exactly_once(url: str, tmp_path: Path) -> None:
    ids = asyncio.run(_setup(url))
    rng = random.Random(15)
    procs = {name: _start(url, name, tmp_path / name) for name in ("a", "b", "c")}
    born = {name: time.monotonic() for name in procs}
    kills = 0
    try:
        deadline = time.monotonic() + RUN_S
        pending = list(ids)
        rng.shuffle(pending)
        while time.monotonic() < deadline:
            # The oldest, once it ticks (past its ~2.5 s of imports), after 0-0.5 s more: it dies wherever it is
            # (between passes, mid-transaction, mid-commit).
            name = min(born, key=born.__getitem__)
            ticks = tmp_path / name / "ticks"
            wait_for(ticks.exists, f"meter {name} ticking", timeout=60)
            time.sleep(rng.uniform(0, 0.5))
            os.kill(procs[name].pid, signal.SIGKILL)
            procs[name].wait()
            kills += 1
            ticks.unlink()
            procs[name] = _start(url, name, tmp_path / name)
            born[name] = time.monotonic()
            if pending:  # copies end while the meters run and die
                asyncio.run(_finish(url, [pending.pop() for _ in range(min(4, len(pending)))]))
        asyncio.run(_finish(url, pending))
    finally:
        for proc in procs.values():
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
    mismatches, entries, keys, balance, cents = asyncio.run(_check(url))
    assert kills >= 3
    assert entries > COPIES  # the processes did meter between the kills (a copy per pass at most)
    assert entries == keys
    assert mismatches == []  # every copy closed to the formula's cent; balance = ledger
    assert balance == Decimal(cents).scaleb(-2)
