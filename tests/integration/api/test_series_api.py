"""GET /api/v1/series and /api/v1/series/names through the real app on SQLite and PostgreSQL: the answer's shape,
4xx codes, and members never seeing another workspace's job series."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job, User
from aicenter.services import monitoring
from aicenter.services.monitoring import Sample
from tests.factories import Login, admin_login, make_user


async def _seed(db: Database, alice: Login, carol: Login) -> tuple[int, int, datetime]:
    """A cluster series on node 7, a report.loss series of a job of alice and one of carol."""
    now = utcnow().replace(second=0, microsecond=0)
    async with db.write() as session:
        job_ids = []
        for login in (alice, carol):
            user = await session.get(User, login.user_id)
            assert user is not None
            assert user.default_workspace_id is not None
            job = Job(workspace_id=user.default_workspace_id, name="train", user_id=user.id)
            session.add(job)
            await session.flush()
            job_ids.append((job.id, user.default_workspace_id))
        labels = {"task": "worker", "replica": "0"}
        samples = [
            Sample("node.cpu_utilization", now - timedelta(minutes=10 - i), i / 10, {"node": "n7"}, node_id=7)
            for i in range(10)
        ]
        for (job_id, workspace_id), value in zip(job_ids, (0.5, 0.9), strict=True):
            samples.append(Sample("report.loss", now - timedelta(minutes=1), value, labels, workspace_id, job_id))
        await monitoring.record_samples(session, samples)
    return job_ids[0][0], job_ids[1][0], now


async def test_series_query_names_tenants_and_bad_requests(db: Database, client: httpx.AsyncClient) -> None:
    alice = await make_user(db, client, "alice")
    carol = await make_user(db, client, "carol")
    admin = await admin_login(client)
    alice_job, carol_job, now = await _seed(db, alice, carol)

    r = await client.get(
        "/api/v1/series",
        params={"name": "node.cpu_utilization", "step": 300, "label": "node:n7", "node_id": 7},
        headers=alice.headers,
    )
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["name"], body["step_s"], body["resolution"]) == ("node.cpu_utilization", 300, "5m")
    [series] = body["series"]
    assert series["labels"] == {"node": "n7"}
    assert series["workspace_id"] is None
    # Ten one-minute samples in 5-minute steps aligned to the epoch: 2 or 3 steps, depending on the minute.
    buckets = {int((now - timedelta(minutes=10 - i)).timestamp()) // 300 for i in range(10)}
    assert [p["at"] for p in series["points"]] == [
        datetime.fromtimestamp(b * 300, UTC).isoformat().replace("+00:00", "Z") for b in sorted(buckets)
    ]
    assert min(p["min"] for p in series["points"]) == 0.0
    assert max(p["max"] for p in series["points"]) == 0.9

    # Members: cluster series and their own workspace's; the other tenant's job series does not exist for them.
    names = await client.get("/api/v1/series/names", headers=alice.headers)
    assert names.json() == {"names": ["node.cpu_utilization", "report.loss"]}
    mine = await client.get("/api/v1/series", params={"name": "report.loss"}, headers=alice.headers)
    assert [(s["job_id"], s["points"][0]["value"]) for s in mine.json()["series"]] == [(alice_job, 0.5)]
    theirs = await client.get(
        "/api/v1/series", params={"name": "report.loss", "job_id": carol_job}, headers=alice.headers
    )
    assert theirs.status_code == 404
    assert theirs.json()["error"]["code"] == "unknown_series"
    hidden = await client.get("/api/v1/series/names", params={"job_id": carol_job}, headers=alice.headers)
    assert hidden.json() == {"names": []}
    # Platform admins see every tenant's.
    every = await client.get("/api/v1/series", params={"name": "report.loss"}, headers=admin.headers)
    assert sorted(s["job_id"] for s in every.json()["series"]) == sorted([alice_job, carol_job])
    prefixed = await client.get("/api/v1/series/names", params={"prefix": "node."}, headers=admin.headers)
    assert prefixed.json() == {"names": ["node.cpu_utilization"]}

    # Bad requests get stable codes (same users and data: a login costs a password hash).

    async def get(**params: object) -> httpx.Response:
        return await client.get("/api/v1/series", params=params, headers=alice.headers)

    wide = await get(name="node.cpu_utilization", start=(now - timedelta(days=30)).isoformat(), step=1)
    assert wide.status_code == 400
    assert wide.json()["error"]["code"] == "range_too_wide"
    assert wide.json()["error"]["details"]["min_step_s"] == 260  # 30 days / 10,000 points
    unknown = await get(name="node.nothing")
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "unknown_series")
    hour_ago = (now - timedelta(hours=1)).isoformat()
    backwards = await get(name="node.cpu_utilization", start=now.isoformat(), end=hour_ago)
    assert (backwards.status_code, backwards.json()["error"]["code"]) == (422, "validation_failed")
    bad_label = await get(name="node.cpu_utilization", label="node")
    assert (bad_label.status_code, bad_label.json()["error"]["details"]["field"]) == (422, "label")
    assert (await get(name="node.cpu_utilization", step=0)).status_code == 422
    assert (await get(name="")).status_code == 422
    assert (await get()).status_code == 422
    anonymous = await client.get("/api/v1/series", params={"name": "node.cpu_utilization"})
    assert anonymous.status_code == 401


async def test_latest_values_per_tenant_with_more_series_than_a_range_query_takes(
    db: Database, client: httpx.AsyncClient
) -> None:
    """GET /api/v1/series/latest (``aicenter top``): the newest point of each recent series, the member's own
    only, however many jobs ever reported (a range query refuses over 1,000 series of one name)."""
    alice = await make_user(db, client, "alice")
    carol = await make_user(db, client, "carol")
    admin = await admin_login(client)
    alice_job, carol_job, now = await _seed(db, alice, carol)
    labels = {"task": "worker", "replica": "0"}
    async with db.write() as session:
        old = [
            Sample("replica.memory_bytes", now - timedelta(hours=2), 1.0, labels, None, None, n) for n in range(1001)
        ]
        fresh = [
            Sample("replica.memory_bytes", utcnow() - timedelta(seconds=5), 2.0**20, labels, ws, job_id)
            for job_id, ws in await _job_workspaces(session, (alice_job, carol_job))
        ]
        await monitoring.record_samples(session, [*old, *fresh])

    too_many = await client.get("/api/v1/series", params={"name": "replica.memory_bytes"}, headers=admin.headers)
    assert too_many.status_code == 422
    r = await client.get("/api/v1/series/latest", params={"name": ["replica.memory_bytes"]}, headers=admin.headers)
    assert r.status_code == 200, r.text
    assert sorted(v["job_id"] for v in r.json()) == sorted([alice_job, carol_job])  # the 1,001 old ones are stale
    mine = await client.get(
        "/api/v1/series/latest",
        params={"name": ["replica.memory_bytes", "node.cpu_utilization"], "max_age_s": 3600},
        headers=alice.headers,
    )
    assert [(v["name"], v["job_id"], v["value"]) for v in mine.json()] == [
        ("node.cpu_utilization", None, 0.9),
        ("replica.memory_bytes", alice_job, 2.0**20),
    ]
    assert (await client.get("/api/v1/series/latest", headers=alice.headers)).status_code == 422


async def _job_workspaces(session: AsyncSession, job_ids: tuple[int, ...]) -> list[tuple[int, int]]:
    out = []
    for job_id in job_ids:
        job = await session.get(Job, job_id)
        assert job is not None
        out.append((job_id, job.workspace_id))
    return out
