"""Quotas per workspace per pool, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import literal, select

from aicenter.db.engine import Database
from aicenter.db.models import AcceleratorType, AuditEvent, Pool, PoolGrant, Quota
from aicenter.services import quotas
from tests.factories import Login, admin_login, login, make_user

API = "/api/v1"
GI = 2**30


async def _setup(db: Database, client: httpx.AsyncClient) -> tuple[Login, int, int]:
    """An admin, a workspace (alice's default) and a pool that the workspace is not granted yet."""
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    async with db.write() as session:
        session.add(AcceleratorType(name="nvidia-a100", vendor="nvidia", memory_bytes=80 * GI))
        session.add(AcceleratorType(name="ascend-910b", vendor="huawei", memory_bytes=64 * GI))
        pool = Pool(name="gpu", selector={"gpu": "a100"})
        session.add(pool)
        await session.flush()
        pool_id = pool.id
    ws = (await client.get(f"{API}/users/me", headers=alice.headers)).json()["default_workspace_id"]
    return admin, ws, pool_id


async def _put(client: httpx.AsyncClient, by: Login, ws: int, pool: int, body: Any) -> httpx.Response:
    return await client.put(f"{API}/workspaces/{ws}/quotas/{pool}", json=body, headers=by.headers)


async def _stored(db: Database) -> list[tuple[int, int, dict[str, Any], dict[str, Any]]]:
    async with db.read() as session:
        rows = (await session.scalars(select(Quota).order_by(Quota.id))).all()
        return [(q.workspace_id, q.pool_id, q.guaranteed, q.maximum) for q in rows]


async def test_set_quota_normalizes_and_grants_the_pool(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    body = {
        "guaranteed": {"cpu": "16", "memory": "64Gi", "nvidia-a100": 2},
        "maximum": {"cpu": 32, "memory": "128Gi", "accelerators": "8", "nvidia-a100": 8, "ascend-910b": 0},
    }
    r = await _put(client, admin, ws, pool, body)
    assert r.status_code == 200, r.text
    quota = r.json()
    assert quota["workspace_id"] == ws
    assert quota["pool_id"] == pool
    assert quota["pool_name"] == "gpu"
    assert quota["guaranteed"] == {"cpu": 16000, "memory": 64 * GI, "nvidia-a100": 2}
    assert quota["maximum"] == {"cpu": 32000, "memory": 128 * GI, "accelerators": 8, "nvidia-a100": 8, "ascend-910b": 0}
    assert quota["used"] == {"cpu": 0, "memory": 0, "accelerators": 0}
    async with db.read() as session:
        assert await session.get(PoolGrant, (pool, ws)) is not None
        event = await session.scalar(select(AuditEvent).where(AuditEvent.action == "quota.create"))
    assert event is not None
    assert event.workspace_id == ws
    assert event.details["granted_pool"] is True
    # PUT replaces: the second call updates the same row.
    r = await _put(client, admin, ws, pool, {"guaranteed": {}, "maximum": {"cpu": "500m"}})
    assert r.status_code == 200
    assert r.json()["id"] == quota["id"]
    assert r.json()["maximum"] == {"cpu": 500}
    listed = await client.get(f"{API}/workspaces/{ws}/quotas", headers=admin.headers)
    assert [(q["pool_name"], q["maximum"]) for q in listed.json()] == [("gpu", {"cpu": 500})]


BAD_QUOTAS: list[tuple[dict[str, Any], str]] = [
    ({"maximum": {"memory": "16Gx"}}, "maximum.memory"),
    ({"guaranteed": {"gpus": 1}}, "guaranteed.gpus"),
    ({"maximum": {"nvidia-h100": 1}}, "maximum.nvidia-h100"),
    ({"maximum": {"cpu": -1}}, "maximum.cpu"),
    ({"maximum": {"cpu": "-1"}}, "maximum.cpu"),
    ({"guaranteed": {"memory": -5}}, "guaranteed.memory"),
    ({"maximum": {"accelerators": -2}}, "maximum.accelerators"),
    ({"maximum": {"accelerators": 1.5}}, "maximum.accelerators"),
    ({"maximum": {"nvidia-a100": "two"}}, "maximum.nvidia-a100"),
    ({"guaranteed": {"cpu": "8"}, "maximum": {"cpu": "4"}}, "guaranteed.cpu"),
    ({"guaranteed": {"nvidia-a100": 4}, "maximum": {"accelerators": 2}}, "guaranteed.nvidia-a100"),
    ({"maximum": {"memory": "9" * 400}}, "maximum.memory"),
    ({"maximum": {"accelerators": 2**70}}, "maximum.accelerators"),
    ({"guaranteed": {"cpu": True}}, "guaranteed.cpu"),
    ({"maximum": {"memory": {"value": 1}}}, "maximum.memory"),
    ({"maximum": {}, "limits": {}}, "limits"),
]


async def test_bad_quotas_are_refused_and_change_nothing(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    assert (await _put(client, admin, ws, pool, {"maximum": {"cpu": 8}})).status_code == 200
    before = await _stored(db)
    for body, field in BAD_QUOTAS:
        r = await _put(client, admin, ws, pool, body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "validation_failed"
        assert r.json()["error"]["details"]["field"] == field, (body, r.text)
    assert await _stored(db) == before


async def test_non_finite_numbers_are_refused(client: httpx.AsyncClient, db: Database) -> None:
    """Python's JSON parser accepts NaN and Infinity; they must be a 422, not a crash."""
    admin, ws, pool = await _setup(db, client)
    for raw in ('{"maximum": {"cpu": NaN}}', '{"maximum": {"memory": Infinity}}'):
        r = await client.put(
            f"{API}/workspaces/{ws}/quotas/{pool}",
            content=raw,
            headers={**admin.headers, "Content-Type": "application/json"},
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["details"]["field"].startswith("maximum.")
    assert await _stored(db) == []


async def test_unknown_resource_names_the_known_ones(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    r = await _put(client, admin, ws, pool, {"guaranteed": {"gpu": 1}})
    assert "nvidia-a100" in r.json()["error"]["message"]


async def test_unknown_pool_or_workspace(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, _ = await _setup(db, client)
    r = await _put(client, admin, ws, 999999, {"maximum": {"cpu": 1}})
    assert r.status_code == 404
    assert "pool 999999" in r.json()["error"]["message"]
    r = await _put(client, admin, 999999, 1, {"maximum": {"cpu": 1}})
    assert r.status_code == 404
    assert "workspace 999999" in r.json()["error"]["message"]
    assert await _stored(db) == []


async def test_only_platform_admins_set_quotas(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    await _put(client, admin, ws, pool, {"maximum": {"cpu": 1}})
    before = await _stored(db)
    # alice administers the workspace but is not a platform admin; bob is not even a member.
    alice = await login(client, "alice", "user-password-1")
    bob = await make_user(db, client, "bob")
    for who in (alice, bob):
        r = await _put(client, who, ws, pool, {"maximum": {"cpu": 100}})
        assert r.status_code == 403
        assert (await client.delete(f"{API}/workspaces/{ws}/quotas/{pool}", headers=who.headers)).status_code == 403
    assert await _stored(db) == before


async def test_members_read_quotas_outsiders_do_not(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    await _put(client, admin, ws, pool, {"maximum": {"nvidia-a100": 4}})
    alice = (await client.post(f"{API}/auth/login", json={"username": "alice", "password": "user-password-1"})).json()
    r = await client.get(f"{API}/workspaces/{ws}/quotas", headers={"Authorization": f"Bearer {alice['token']}"})
    assert r.status_code == 200
    assert r.json()[0]["maximum"] == {"nvidia-a100": 4}
    bob = await make_user(db, client, "bob")
    assert (await client.get(f"{API}/workspaces/{ws}/quotas", headers=bob.headers)).status_code == 404


async def test_delete_quota_keeps_grant(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    await _put(client, admin, ws, pool, {"maximum": {"cpu": 4}})
    url = f"{API}/workspaces/{ws}/quotas/{pool}"
    assert (await client.delete(url, headers=admin.headers)).status_code == 204
    assert (await client.delete(url, headers=admin.headers)).status_code == 404
    assert (await client.get(f"{API}/workspaces/{ws}/quotas", headers=admin.headers)).json() == []
    async with db.read() as session:
        assert await session.get(PoolGrant, (pool, ws)) is not None


async def test_deleting_the_workspace_deletes_its_quotas(client: httpx.AsyncClient, db: Database) -> None:
    admin, ws, pool = await _setup(db, client)
    await _put(client, admin, ws, pool, {"maximum": {"cpu": 4}})
    assert (await client.delete(f"{API}/workspaces/{ws}", headers=admin.headers)).status_code == 204
    assert await _stored(db) == []


async def test_maximum_below_current_use_is_a_conflict(
    client: httpx.AsyncClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Current use comes from USAGE_QUERIES (running replicas, once jobs exist); here one row that holds
    4 CPUs, 16 GiB and 2 A100s stands in for a running replica, through the same extension point."""
    admin, ws, pool = await _setup(db, client)
    await _put(client, admin, ws, pool, {"maximum": {"cpu": 64}})

    def running(workspace_id: int, pool_id: int) -> Any:
        return select(literal(4000), literal(16 * GI), literal(2), literal("nvidia-a100")).where(
            literal(workspace_id) == ws, literal(pool_id) == pool
        )

    monkeypatch.setattr(quotas, "USAGE_QUERIES", [running])
    before = await _stored(db)
    r = await _put(client, admin, ws, pool, {"maximum": {"cpu": 64, "nvidia-a100": 1}})
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert error["code"] == "conflict"
    assert error["details"]["field"] == "maximum.nvidia-a100"
    assert error["details"]["used"] == {"cpu": 4000, "memory": 16 * GI, "accelerators": 2, "nvidia-a100": 2}
    assert await _stored(db) == before
    r = await _put(client, admin, ws, pool, {"maximum": {"cpu": 4, "nvidia-a100": 2}})
    assert r.status_code == 200
    assert r.json()["used"]["nvidia-a100"] == 2
