"""The billing meter controller on the real databases: one holder of the lease meters, passes over the same
period charge once (even two at once with the lease shared after a stall), and an ended copy is closed exactly."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import select, update

from aicenter.config import Settings
from aicenter.controllers.billing import BillingController
from aicenter.core import billing as formula
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import LedgerEntry, Replica, Workspace
from aicenter.services import billing
from aicenter.services.context import Actor
from tests.integration.services.jobs_helpers import job_world, spec, submit


async def started(db: Database, tmp_path: Path, ago: timedelta) -> tuple[int, list[int]]:
    """alice's 2-replica job on cpu-4 (weight 2, price 1/h), started ``ago``; (workspace, replica ids)."""
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.job_id == view.job.id).values(started_at=utcnow() - ago))
        ids = list((await session.scalars(select(Replica.id).where(Replica.job_id == view.job.id))).all())
    return w.p.ws, ids


async def ledger(db: Database) -> list[LedgerEntry]:
    async with db.read() as session:
        return list((await session.scalars(select(LedgerEntry))).all())


async def test_one_holder_meters_and_a_second_pass_charges_nothing_twice(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    ws, _ = await started(db, tmp_path, timedelta(hours=2))
    a = BillingController(db, settings, owner="a")
    b = BillingController(db, settings, owner="b")
    await a.tick()
    assert a.last is not None
    assert a.last.entries == 2
    await b.tick()  # the lease is a's: b meters nothing
    assert b.lease is None
    assert b.last is None
    await a.tick()  # within half an interval of the last charge: nothing new
    assert len(await ledger(db)) == 2
    async with db.read() as session:
        assert Decimal((await session.get(Workspace, ws)).balance) == Decimal("-8.00")  # type: ignore[union-attr]


async def test_two_passes_at_once_charge_once_and_an_ended_copy_closes_exactly(
    db: Database, settings: Settings, tmp_path: Path
) -> None:
    ws, ids = await started(db, tmp_path, timedelta(hours=1))
    a = BillingController(db, settings, owner="a")
    b = BillingController(db, settings, owner="b")
    await a.tick()
    b.lease = a.lease  # as if a stalled past its lease and both believe they hold it
    a.min_period = b.min_period = timedelta(0)
    await asyncio.gather(a.run_pass(), b.run_pass())
    keys = [e.idempotency_key for e in await ledger(db)]
    assert len(keys) == len(set(keys))

    async with db.write() as session:
        replica = await session.get(Replica, ids[0])
        assert replica is not None
        assert replica.started_at is not None
        replica.finished_at = replica.started_at + timedelta(minutes=73, seconds=7, microseconds=123)
        start, end = replica.started_at, replica.finished_at
    await a.run_pass()
    await a.run_pass()
    rows = await ledger(db)
    charged = -sum(e.amount_cents for e in rows if e.replica_id == ids[0])
    assert charged == formula.to_cents(formula.copy_cost(Decimal(2), Decimal(1), start, end))
    async with db.read() as session:
        assert await billing.verify(session, Actor.system("test")) == []
        balance = Decimal((await session.get(Workspace, ws)).balance)  # type: ignore[union-attr]
    assert balance == Decimal(sum(e.amount_cents for e in rows)).scaleb(-2)
