"""Leases (aicenter.db.leases) on SQLite and PostgreSQL: named leases, expiry and takeover, guarded updates,
and claim_rows handing disjoint rows to concurrent claimers."""

from __future__ import annotations

import asyncio

from sqlalchemy import select

from aicenter.core.clock import utcnow
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.models import Lease

# Long enough that a loaded 2-core CI box never lets it lapse by accident, short enough to wait out.
_SHORT_TTL_S = 0.3


async def test_acquire_renew_release(db: Database) -> None:
    held = await leases.acquire(db, "billing-tick", "replica-a", ttl_s=30)
    assert held is not None
    assert held.owner == "replica-a"
    assert held.expires_at > utcnow()

    assert await leases.acquire(db, "billing-tick", "replica-b", ttl_s=30) is None, "a held lease was taken"
    assert await leases.acquire(db, "other-lease", "replica-b", ttl_s=30) is not None, "leases are per name"

    renewed = await leases.renew(db, held, ttl_s=60)
    assert renewed is not None
    assert renewed.token == held.token
    assert renewed.expires_at > held.expires_at

    assert await leases.release(db, renewed) is True
    assert await leases.release(db, renewed) is False, "releasing twice must report the lease as not held"
    taken = await leases.acquire(db, "billing-tick", "replica-b", ttl_s=30)
    assert taken is not None
    assert taken.owner == "replica-b"


async def test_expired_lease_is_taken_over_and_the_old_owner_loses_it(db: Database) -> None:
    old = await leases.acquire(db, "scheduler", "replica-a", ttl_s=_SHORT_TTL_S)
    assert old is not None
    await asyncio.sleep(_SHORT_TTL_S + 0.2)

    new = await leases.acquire(db, "scheduler", "replica-b", ttl_s=30)
    assert new is not None, "an expired lease must be free"
    assert new.token != old.token

    assert await leases.renew(db, old, ttl_s=30) is None, "the old owner renewed a lease it lost"
    assert await leases.release(db, old) is False, "the old owner released a lease it lost"
    async with db.write() as session:  # the guard of a holder's write transaction
        assert await leases.renew_in(session, old, ttl_s=30) is False, "the old owner's writes were let through"
        assert await leases.renew_in(session, new, ttl_s=30) is True
    async with db.read() as session:
        row = await session.get(Lease, "scheduler")
        assert row is not None
        assert (row.lock_owner, row.lock_token) == ("replica-b", new.token)


async def test_guarded_update_refuses_a_stale_token(db: Database) -> None:
    async with db.write() as session:
        session.add(Lease(name="job-1"))
    async with db.write() as session:
        (first,) = await leases.claim_rows(session, Lease, Lease.name == "job-1", owner="a", ttl_s=_SHORT_TTL_S)
        stale_token = first.lock_token
    assert stale_token is not None
    await asyncio.sleep(_SHORT_TTL_S + 0.2)
    async with db.write() as session:
        (second,) = await leases.claim_rows(session, Lease, Lease.name == "job-1", owner="b", ttl_s=30)
        fresh_token = second.lock_token
    assert fresh_token is not None
    assert fresh_token != stale_token

    async with db.write() as session:
        applied = await leases.guarded_update(
            session, Lease, Lease.name == "job-1", token=stale_token, lock_owner="a-result"
        )
    assert applied is False, "a worker whose lease expired overwrote the new owner's row"
    async with db.write() as session:
        applied = await leases.guarded_update(
            session, Lease, Lease.name == "job-1", token=fresh_token, lock_owner="b-result"
        )
    assert applied is True
    async with db.read() as session:
        row = await session.get(Lease, "job-1")
        assert row is not None
        assert row.lock_owner == "b-result"


async def test_claimed_rows_are_not_claimed_again_until_released(db: Database) -> None:
    async with db.write() as session:
        session.add_all([Lease(name=f"job-{i}") for i in range(3)])
    async with db.write() as session:
        rows = await leases.claim_rows(session, Lease, Lease.name.like("job-%"), owner="a", ttl_s=30, limit=10)
        tokens = {row.name: row.lock_token for row in rows}
    assert len(tokens) == 3
    async with db.write() as session:
        assert await leases.claim_rows(session, Lease, Lease.name.like("job-%"), owner="b", ttl_s=30) == []
    async with db.write() as session:
        token = tokens["job-1"]
        assert token is not None
        assert await leases.release_row(session, Lease, Lease.name == "job-1", token=token) is True
    async with db.write() as session:
        again = await leases.claim_rows(session, Lease, Lease.name.like("job-%"), owner="b", ttl_s=30, limit=10)
    assert [row.name for row in again] == ["job-1"]


async def test_concurrent_claimers_get_disjoint_rows(db: Database) -> None:
    """Two claimers at once. On PostgreSQL the first holds its transaction open while the second claims, so the
    second must skip the locked rows (SKIP LOCKED) rather than wait or take them; on SQLite BEGIN IMMEDIATE
    serializes the two transactions, and the second sees the first one's leases."""
    async with db.write() as session:
        session.add_all([Lease(name=f"job-{i:02d}") for i in range(10)])
    first_claimed = asyncio.Event()
    second_done = asyncio.Event()
    hold_open = not db.is_sqlite  # on SQLite the second writer waits for the first: holding would deadlock

    async def claimer(owner: str, *, first: bool) -> set[str]:
        if not first:
            await first_claimed.wait()
        async with db.write() as session:
            rows = await leases.claim_rows(
                session, Lease, Lease.name.like("job-%"), owner=owner, ttl_s=30, limit=6, order_by=Lease.name
            )
            if first:
                first_claimed.set()
                if hold_open:
                    await asyncio.wait_for(second_done.wait(), timeout=30)
            else:
                second_done.set()
            return {row.name for row in rows}

    a, b = await asyncio.wait_for(asyncio.gather(claimer("a", first=True), claimer("b", first=False)), timeout=60)
    assert len(a) == 6
    assert len(b) == 4, f"the second claimer should get the 4 rows the first did not hold, got {sorted(b)}"
    assert a.isdisjoint(b)
    async with db.read() as session:
        owners = dict((await session.execute(select(Lease.name, Lease.lock_owner))).all())
    assert sorted(n for n, o in owners.items() if o == "a") == sorted(a)
    assert sorted(n for n, o in owners.items() if o == "b") == sorted(b)


async def test_renewed_row_outlives_its_first_expiry(db: Database) -> None:
    async with db.write() as session:
        session.add(Lease(name="job-1"))
    async with db.write() as session:
        (row,) = await leases.claim_rows(session, Lease, Lease.name == "job-1", owner="a", ttl_s=_SHORT_TTL_S)
        token = row.lock_token
    assert token is not None
    async with db.write() as session:
        assert await leases.renew_row(session, Lease, Lease.name == "job-1", token=token, ttl_s=30) is True
        assert await leases.renew_row(session, Lease, Lease.name == "job-1", token="not-the-token", ttl_s=30) is False
    await asyncio.sleep(_SHORT_TTL_S + 0.2)
    async with db.write() as session:
        assert await leases.claim_rows(session, Lease, Lease.name == "job-1", owner="b", ttl_s=30) == []
