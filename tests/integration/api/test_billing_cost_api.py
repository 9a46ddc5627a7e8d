"""A job's cost through the REST API and the SDK's model: estimated while its copies run, the formula to the cent
once they ended, NotFound for whoever may not see the job."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import httpx
from sqlalchemy import select, update

from aicenter.client import Cost
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Node, Replica, ResourceSpec, User
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.factories import make_user

GiB = 2**30


async def test_job_cost_estimated_then_final(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    carol = await make_user(db, client, "carol")
    async with db.write() as session:
        await ensure_default_pool(session)
        session.add(Node(name="n1", cpu_milli=16_000, memory_bytes=64 * GiB, labels={}))
        # weight 0.1 and a price with cents: 3 copies of 20 min = 3 x 0.033333 h = 0.099999 h, 3 x 0.25 coins
        session.add(
            ResourceSpec(
                name="small", cpu_milli=1000, memory_bytes=GiB, billing_weight=0.1, price_per_hour=Decimal("7.45")
            )
        )
        ws = await session.scalar(select(User.default_workspace_id).where(User.id == alice.user_id))
    source = {"name": "t", "tasks": [{"name": "w", "replicas": 3, "resources": {"spec": "small"}, "command": "x"}]}
    async with db.write() as session:
        job_id = (await jobs.submit_job(session, Actor(alice.user_id, "alice"), source, workspace_id=ws)).job.id
    start = utcnow() - timedelta(minutes=20)
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.job_id == job_id).values(started_at=start))

    r = await client.get(f"/api/v1/jobs/{job_id}/cost", headers=alice.headers)
    assert r.status_code == 200, r.text
    running = Cost.model_validate(r.json())
    assert running.estimated
    assert running.copies == 3
    assert running.machine_hours >= Decimal("0.099999")
    assert running.charged == Decimal(0)  # no meter pass yet

    async with db.write() as session:
        await session.execute(
            update(Replica).where(Replica.job_id == job_id).values(finished_at=start + timedelta(minutes=20))
        )
    r = await client.get(f"/api/v1/jobs/{job_id}/cost", headers=alice.headers)
    assert r.json()["estimated"] is False
    # per copy: 0.1 x 1/3 h = 0.033333 h (6 places); x 7.45 = 0.24833 -> 0.25; the job: 3 copies
    assert (r.json()["machine_hours"], r.json()["amount"]) == ("0.099999", "0.75")

    assert (await client.get(f"/api/v1/jobs/{job_id}/cost", headers=carol.headers)).status_code == 404
    missing = await client.get("/api/v1/services/999999/cost", headers=alice.headers)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "not_found"
