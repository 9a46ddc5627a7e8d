"""Overlapping pools end to end, on SQLite and PostgreSQL: an admin carves a pool out of the only node, and jobs of
the default pool and of the new pool are both scheduled there; what could never run is refused at submit."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.controllers.scheduling import SchedulingController
from aicenter.db.engine import Database
from aicenter.db.models import Job
from aicenter.executors import HostInfo
from aicenter.services import inventory
from tests.factories import Login, admin_login, make_user
from tests.integration.controllers.jobs_helpers import GIB, NODE, job_row, job_spec, replicas

HOSTNAME = "aicenter.io/hostname"


async def _register(db: Database) -> None:
    async with db.write() as session:
        await inventory.register_host(
            session,
            HostInfo(
                name=NODE,
                address="127.0.0.1",
                executor="local",
                cpu_milli=8000,
                memory_bytes=16 * GIB,
                labels={HOSTNAME: NODE},
            ),
        )


async def _submit(client: httpx.AsyncClient, user: Login, spec: dict[str, Any]) -> httpx.Response:
    return await client.post("/api/v1/jobs", json={"spec": spec}, headers=user.headers)


@pytest.fixture
async def walk(db: Database, client: httpx.AsyncClient) -> tuple[Login, Login]:
    """alice and the admin, once the admin made pool "mine" of the only node and granted it to alice."""
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    await _register(db)
    r = await client.post("/api/v1/pools", json={"name": "mine", "selector": {HOSTNAME: NODE}}, headers=admin.headers)
    assert r.status_code == 201, r.text
    pool_id = r.json()["id"]
    me = (await client.get("/api/v1/users/me", headers=alice.headers)).json()
    granted = await client.put(
        f"/api/v1/pools/{pool_id}/workspaces/{me['default_workspace_id']}", headers=admin.headers
    )
    assert granted.status_code == 204, granted.text
    return alice, admin


async def test_jobs_of_default_and_of_a_pool_carved_from_the_only_node_are_both_scheduled(
    db: Database, settings: Settings, client: httpx.AsyncClient, walk: tuple[Login, Login]
) -> None:
    alice, admin = walk
    # Every view says the node is in both pools.
    [node] = (await client.get("/api/v1/nodes", headers=admin.headers)).json()["items"]
    assert node["pools"] == ["default", "mine"]
    pools = {
        p["name"]: p["node_count"] for p in (await client.get("/api/v1/pools", headers=admin.headers)).json()["items"]
    }
    assert pools == {"default": 1, "mine": 1}

    scheduler = SchedulingController(db, settings, owner="a")
    for name, extra, pool in (("in-default", {}, "default"), ("in-mine", {"pool": "mine"}, "mine")):
        r = await _submit(client, alice, job_spec(name, "true", cpu="2", **extra))
        assert r.status_code == 201, r.text
        assert r.json()["pool_name"] == pool
        await scheduler.tick()
        job = await job_row(db, r.json()["id"])
        assert (job.status, job.pending_reason) == ("scheduled", ""), name
        assert [r.node_name for r in await replicas(db, job.id)] == [NODE]


async def test_what_could_never_run_in_a_pool_is_refused_at_submit_naming_the_pool(
    db: Database, client: httpx.AsyncClient, walk: tuple[Login, Login]
) -> None:
    alice, admin = walk
    too_big = await _submit(client, alice, job_spec("huge", "true", cpu="64", pool="mine"))
    assert too_big.status_code == 422, too_big.text
    error = too_big.json()["error"]
    assert error["code"] == "validation_failed"
    assert "needs 64 CPU; the largest node of pool mine has 8" in error["message"]
    assert error["details"] == {
        "field": "tasks[0].resources",
        "pool": "mine",
        "resource": "cpu",
        "requested": 64_000,
        "largest": 8000,
    }

    r = await client.post("/api/v1/pools", json={"name": "empty", "selector": {"gpu": "h100"}}, headers=admin.headers)
    me = (await client.get("/api/v1/users/me", headers=alice.headers)).json()
    await client.put(f"/api/v1/pools/{r.json()['id']}/workspaces/{me['default_workspace_id']}", headers=admin.headers)
    empty = await _submit(client, alice, job_spec("nowhere", "true", pool="empty"))
    assert empty.status_code == 422, empty.text
    assert "pool empty has no node" in empty.json()["error"]["message"]

    await client.post("/api/v1/pools", json={"name": "others", "selector": {}}, headers=admin.headers)
    for name in ("others", "no-such-pool"):
        refused = await _submit(client, alice, job_spec("elsewhere", "true", pool=name))
        assert refused.status_code == 422, refused.text
        body = refused.json()["error"]
        assert body["details"]["field"] == "pool"
        assert f'workspace alice may not use pool "{name}"; pools it may use: default, empty, mine' in body["message"]
    async with db.read() as session:
        assert await session.scalar(select(func.count()).select_from(Job)) == 0


async def test_a_queued_job_follows_its_pool_through_a_rename(
    db: Database, settings: Settings, client: httpx.AsyncClient, walk: tuple[Login, Login]
) -> None:
    alice, admin = walk
    [node] = (await client.get("/api/v1/nodes", headers=admin.headers)).json()["items"]
    assert (await client.post(f"/api/v1/nodes/{node['id']}/cordon", headers=admin.headers)).status_code == 200
    r = await _submit(client, alice, job_spec("waits", "true", pool="mine"))
    assert r.status_code == 201, r.text
    scheduler = SchedulingController(db, settings, owner="a")
    await scheduler.tick()
    assert (await job_row(db, r.json()["id"])).pending_reason == "no node of pool mine is ready: 1 cordoned or down"

    pools = (await client.get("/api/v1/pools", headers=admin.headers)).json()["items"]
    mine = next(p for p in pools if p["name"] == "mine")
    renamed = await client.patch(f"/api/v1/pools/{mine['id']}", json={"name": "ours"}, headers=admin.headers)
    assert renamed.status_code == 200, renamed.text
    assert (await client.post(f"/api/v1/nodes/{node['id']}/uncordon", headers=admin.headers)).status_code == 200
    await scheduler.tick()
    job = await job_row(db, r.json()["id"])
    assert (job.status, job.pending_reason) == ("scheduled", "")
