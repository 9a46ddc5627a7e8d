"""Pools on SQLite and PostgreSQL: selectors and node counts, grants, visibility, and refusing deletes in use."""

from __future__ import annotations

from typing import Any

import httpx

from aicenter.db.engine import Database
from aicenter.db.models import Quota
from tests.factories import Login, admin_login, make_user

URL = "/api/v1/pools"


async def _pool(client: httpx.AsyncClient, admin: Login, name: str, **extra: Any) -> dict[str, Any]:
    r = await client.post(URL, json={"name": name, **extra}, headers=admin.headers)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def _default_pool(client: httpx.AsyncClient, admin: Login) -> dict[str, Any]:
    items = (await client.get(URL, headers=admin.headers)).json()["items"]
    pool: dict[str, Any] = next(p for p in items if p["is_default"])
    return pool


async def _workspace_id(client: httpx.AsyncClient, user: Login) -> int:
    me = await client.get("/api/v1/users/me", headers=user.headers)
    workspace_id: int = me.json()["default_workspace_id"]
    return workspace_id


async def test_crud_selector_and_node_count(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    for name, zone in (("n1", "a"), ("n2", "a"), ("n3", "b")):
        r = await client.post(
            "/api/v1/nodes",
            json={"name": name, "cpu": 4, "memory": "8Gi", "labels": {"zone": zone}},
            headers=admin.headers,
        )
        assert r.status_code == 201
    pool = await _pool(client, admin, "zone-a", description="Zone A", selector={"zone": "a"})
    assert pool["node_count"] == 2
    assert pool["selector"] == {"zone": "a"}
    assert pool["is_default"] is False
    assert pool["workspaces"] == []
    default = await _default_pool(client, admin)
    assert default["node_count"] == 3
    assert default["selector"] == {}

    r = await client.patch(
        f"{URL}/{pool['id']}", json={"selector": {"zone": "b"}, "name": "zone-b"}, headers=admin.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["node_count"]) == ("zone-b", 1)
    got = await client.get(f"{URL}/{pool['id']}", headers=admin.headers)
    assert got.json()["name"] == "zone-b"

    assert (await client.delete(f"{URL}/{pool['id']}", headers=admin.headers)).status_code == 204
    assert (await client.get(f"{URL}/{pool['id']}", headers=admin.headers)).status_code == 404


async def test_bad_input(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "GPU pool"}, "name"),
        ({"name": "gpu", "selector": {"bad key": "x"}}, "selector.bad key"),
        ({"name": "gpu", "selector": {"zone": "a/b"}}, "selector.zone"),
        ({"name": "gpu", "selector": {"zone": 1}}, "selector.zone"),
        ({"name": "gpu", "queue": "fifo"}, "queue"),
    ]
    for body, field in cases:
        r = await client.post(URL, json=body, headers=admin.headers)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["details"]["field"] == field
    assert len((await client.get(URL, headers=admin.headers)).json()["items"]) == 1

    pool = await _pool(client, admin, "gpu")
    dup = await client.post(URL, json={"name": "gpu"}, headers=admin.headers)
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "conflict"
    rename = await client.patch(f"{URL}/{pool['id']}", json={"name": "default"}, headers=admin.headers)
    assert rename.status_code == 409
    r = await client.patch(f"{URL}/{pool['id']}", json={"selector": None}, headers=admin.headers)
    assert r.status_code == 422
    assert (await client.get(f"{URL}/{pool['id']}", headers=admin.headers)).json() == pool


async def test_default_pool_cannot_be_deleted(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    default = await _default_pool(client, admin)
    r = await client.delete(f"{URL}/{default['id']}", headers=admin.headers)
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conflict"
    assert "default" in r.json()["error"]["message"]


async def test_pool_in_use_cannot_be_deleted(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    workspace_id = await _workspace_id(client, alice)
    pool = await _pool(client, admin, "gpu")
    spec = await client.post(
        "/api/v1/specs",
        json={"name": "cpu-4", "cpu": 4, "memory": "8Gi", "price_per_hour": 1, "pool_id": pool["id"]},
        headers=admin.headers,
    )
    assert spec.status_code == 201, spec.text
    assert (await client.put(f"{URL}/{pool['id']}/workspaces/{workspace_id}", headers=admin.headers)).status_code == 204
    async with db.write() as session:  # quotas belong to the tenancy area; write one directly
        session.add(Quota(workspace_id=workspace_id, pool_id=pool["id"], guaranteed={}, maximum={"cpu": 8000}))

    r = await client.delete(f"{URL}/{pool['id']}", headers=admin.headers)
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["code"] == "conflict"
    assert error["details"] == {"quotas": ["alice"], "specs": ["cpu-4"], "workspaces": ["alice"]}
    assert "cpu-4" in error["message"]
    assert "alice" in error["message"]
    assert (await client.get(f"{URL}/{pool['id']}", headers=admin.headers)).status_code == 200


async def test_grants_and_member_visibility(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    alice_ws = await _workspace_id(client, alice)
    bob_ws = await _workspace_id(client, bob)
    gpu = await _pool(client, admin, "gpu")
    default = await _default_pool(client, admin)
    assert {alice_ws, bob_ws} <= set(default["workspaces"])  # (the admin has a workspace too)

    names = [p["name"] for p in (await client.get(URL, headers=alice.headers)).json()["items"]]
    assert names == ["default"]
    assert (await client.get(f"{URL}/{gpu['id']}", headers=alice.headers)).status_code == 404

    grant_url = f"{URL}/{gpu['id']}/workspaces/{alice_ws}"
    assert (await client.put(grant_url, headers=admin.headers)).status_code == 204
    assert (await client.put(grant_url, headers=admin.headers)).status_code == 204  # idempotent
    listed = await client.get(f"{URL}/{gpu['id']}/workspaces", headers=admin.headers)
    assert [w["name"] for w in listed.json()] == ["alice"]

    items = (await client.get(URL, headers=alice.headers)).json()["items"]
    assert [p["name"] for p in items] == ["default", "gpu"]
    assert all(p["workspaces"] is None for p in items)  # members do not see other workspaces' grants
    assert (await client.get(f"{URL}/{gpu['id']}", headers=alice.headers)).status_code == 200
    assert [p["name"] for p in (await client.get(URL, headers=bob.headers)).json()["items"]] == ["default"]
    assert (await client.get(f"{URL}/{gpu['id']}", headers=bob.headers)).status_code == 404
    by_ws = await client.get(f"{URL}?workspace_id={alice_ws}", headers=alice.headers)
    assert [p["name"] for p in by_ws.json()["items"]] == ["default", "gpu"]
    assert (await client.get(f"{URL}?workspace_id={bob_ws}", headers=alice.headers)).status_code == 404

    assert (await client.delete(grant_url, headers=admin.headers)).status_code == 204
    assert (await client.delete(grant_url, headers=admin.headers)).status_code == 404
    assert (await client.get(f"{URL}/{gpu['id']}", headers=alice.headers)).status_code == 404
    assert (await client.put(f"{URL}/{gpu['id']}/workspaces/999999", headers=admin.headers)).status_code == 404
    assert (await client.put(f"{URL}/999999/workspaces/{alice_ws}", headers=admin.headers)).status_code == 404


async def test_members_cannot_manage(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    alice_ws = await _workspace_id(client, alice)
    default = await _default_pool(client, admin)
    gpu = await _pool(client, admin, "gpu")
    calls = [
        client.post(URL, json={"name": "mine"}, headers=alice.headers),
        client.patch(f"{URL}/{default['id']}", json={"description": "x"}, headers=alice.headers),
        client.delete(f"{URL}/{default['id']}", headers=alice.headers),
        client.get(f"{URL}/{default['id']}/workspaces", headers=alice.headers),
        client.put(f"{URL}/{gpu['id']}/workspaces/{alice_ws}", headers=alice.headers),
        client.delete(f"{URL}/{default['id']}/workspaces/{alice_ws}", headers=alice.headers),
    ]
    for call in calls:
        r = await call
        assert r.status_code == 403, (r.request.method, r.request.url, r.text)
    assert [p["name"] for p in (await client.get(URL, headers=alice.headers)).json()["items"]] == ["default"]
