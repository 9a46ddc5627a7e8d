"""Workspaces and their members, on SQLite and PostgreSQL."""

from __future__ import annotations

from typing import Any

import httpx
from sqlalchemy import func, select

from aicenter.db.engine import Database
from aicenter.db.models import Membership, PoolGrant, Workspace
from tests.factories import Login, admin_login, make_user

API = "/api/v1"


async def _workspace(client: httpx.AsyncClient, admin: Login, name: str, **body: Any) -> dict[str, Any]:
    r = await client.post(f"{API}/workspaces", json={"name": name, **body}, headers=admin.headers)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


async def _add(client: httpx.AsyncClient, by: Login, ws: int, **body: Any) -> httpx.Response:
    return await client.post(f"{API}/workspaces/{ws}/members", json=body, headers=by.headers)


async def _members(client: httpx.AsyncClient, by: Login, ws: int) -> dict[str, str]:
    r = await client.get(f"{API}/workspaces/{ws}/members", headers=by.headers)
    assert r.status_code == 200, r.text
    return {m["username"]: m["role"] for m in r.json()["items"]}


async def test_create_workspace_with_named_admin(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    ws = await _workspace(client, admin, "vision", description="CV team", admin_user_id=alice.user_id)
    assert ws["name"] == "vision"
    assert ws["description"] == "CV team"
    assert ws["balance"] == "0.0000" or float(ws["balance"]) == 0
    assert await _members(client, admin, ws["id"]) == {"alice": "workspace_admin"}
    async with db.read() as session:  # allowed in the default pool from the start
        grants = await session.scalar(
            select(func.count()).select_from(PoolGrant).where(PoolGrant.workspace_id == ws["id"])
        )
    assert grants == 1
    own = await _workspace(client, admin, "ops")
    assert await _members(client, admin, own["id"]) == {"admin": "workspace_admin"}


async def test_create_workspace_refuses_bad_input(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    await _workspace(client, admin, "vision")
    async with db.read() as session:
        before = await session.scalar(select(func.count()).select_from(Workspace))
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"name": "vision"}, 409, "name"),
        ({"name": "Vision Team"}, 422, "name"),
        ({"name": "-x"}, 422, "name"),
        ({"name": "a" * 65}, 422, "name"),
        ({"name": "nlp", "admin_user_id": 999999}, 422, "admin_user_id"),
        ({"name": "nlp", "quota": {}}, 422, "quota"),
        ({"name": "nlp", "description": "bell\x07"}, 422, "description"),
    ]
    for body, status, field in cases:
        r = await client.post(f"{API}/workspaces", json=body, headers=admin.headers)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["details"]["field"] == field
    r = await client.post(f"{API}/workspaces", json={"name": "nlp"}, headers=alice.headers)
    assert r.status_code == 403
    async with db.read() as session:
        assert await session.scalar(select(func.count()).select_from(Workspace)) == before


async def test_list_and_get_follow_membership(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    team = await _workspace(client, admin, "team")
    assert (await _add(client, admin, team["id"], user_id=alice.user_id)).status_code == 201
    names = lambda r: [w["name"] for w in r.json()["items"]]  # noqa: E731
    assert names(await client.get(f"{API}/workspaces", headers=alice.headers)) == ["alice", "team"]
    assert names(await client.get(f"{API}/workspaces", headers=bob.headers)) == ["bob"]
    assert names(await client.get(f"{API}/workspaces", headers=admin.headers)) == ["admin", "alice", "bob", "team"]
    r = await client.get(f"{API}/workspaces", params={"name": "team"}, headers=bob.headers)
    assert names(r) == []
    r = await client.get(f"{API}/workspaces", params={"name": "team"}, headers=admin.headers)
    assert names(r) == ["team"]
    assert (await client.get(f"{API}/workspaces/{team['id']}", headers=alice.headers)).status_code == 200
    # Not a member, or missing: the same 404, so ids do not reveal which workspaces exist.
    missing = await client.get(f"{API}/workspaces/999999", headers=bob.headers)
    hidden = await client.get(f"{API}/workspaces/{team['id']}", headers=bob.headers)
    assert missing.status_code == hidden.status_code == 404
    assert (await client.get(f"{API}/workspaces/{team['id']}/members", headers=bob.headers)).status_code == 404


async def test_rename_by_workspace_admin_only(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    team = await _workspace(client, admin, "team", admin_user_id=alice.user_id)
    await _add(client, alice, team["id"], username="bob")
    url = f"{API}/workspaces/{team['id']}"
    assert (await client.patch(url, json={"name": "crew"}, headers=bob.headers)).status_code == 403
    r = await client.patch(url, json={"name": "alice"}, headers=alice.headers)
    assert r.status_code == 409
    assert r.json()["error"]["details"]["field"] == "name"
    r = await client.patch(url, json={"name": "Crew!"}, headers=alice.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "name"
    assert (await client.get(url, headers=alice.headers)).json()["name"] == "team"
    r = await client.patch(url, json={"name": "crew", "description": "the crew"}, headers=alice.headers)
    assert r.status_code == 200
    assert (r.json()["name"], r.json()["description"]) == ("crew", "the crew")
    r = await client.patch(url, json={"balance": "1000000"}, headers=alice.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "balance"


async def test_delete_workspace_clears_defaults(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    me = (await client.get(f"{API}/users/me", headers=alice.headers)).json()
    ws = me["default_workspace_id"]
    assert (await client.delete(f"{API}/workspaces/{ws}", headers=alice.headers)).status_code == 403
    assert (await client.delete(f"{API}/workspaces/{ws}", headers=admin.headers)).status_code == 204
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).json()["default_workspace_id"] is None
    assert (await client.get(f"{API}/workspaces/{ws}", headers=admin.headers)).status_code == 404
    assert (await client.delete(f"{API}/workspaces/{ws}", headers=admin.headers)).status_code == 404
    async with db.read() as session:
        assert (
            await session.scalar(select(func.count()).select_from(Membership).where(Membership.workspace_id == ws)) == 0
        )
    # A user without a default workspace gets the next one they join.
    team = await _workspace(client, admin, "team")
    await _add(client, admin, team["id"], username="alice")
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).json()["default_workspace_id"] == team["id"]


async def test_members_add_change_remove(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    carol = await make_user(db, client, "carol")
    team = await _workspace(client, admin, "team", admin_user_id=alice.user_id)
    ws = team["id"]
    r = await _add(client, alice, ws, username="bob")
    assert r.status_code == 201, r.text
    assert {k: r.json()[k] for k in ("user_id", "username", "role")} == {
        "user_id": bob.user_id,
        "username": "bob",
        "role": "member",
    }
    # A plain member cannot manage members.
    assert (await _add(client, bob, ws, username="carol")).status_code == 403
    assert (await _add(client, alice, ws, user_id=carol.user_id, role="workspace_admin")).status_code == 201
    assert await _members(client, bob, ws) == {"alice": "workspace_admin", "bob": "member", "carol": "workspace_admin"}
    r = await client.patch(
        f"{API}/workspaces/{ws}/members/{bob.user_id}", json={"role": "workspace_admin"}, headers=carol.headers
    )
    assert r.status_code == 200
    assert r.json()["role"] == "workspace_admin"
    r = await client.delete(f"{API}/workspaces/{ws}/members/{carol.user_id}", headers=bob.headers)
    assert r.status_code == 204
    assert await _members(client, alice, ws) == {"alice": "workspace_admin", "bob": "workspace_admin"}
    assert (await client.get(f"{API}/workspaces/{ws}", headers=carol.headers)).status_code == 404
    r = await client.delete(f"{API}/workspaces/{ws}/members/{carol.user_id}", headers=alice.headers)
    assert r.status_code == 404


async def test_member_input_errors_change_nothing(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    ws = (await _workspace(client, admin, "team", admin_user_id=alice.user_id))["id"]
    await _add(client, alice, ws, username="bob")
    cases: list[tuple[dict[str, Any], int, str]] = [
        ({"username": "bob"}, 409, "username"),
        ({"user_id": alice.user_id}, 409, "user_id"),
        ({"username": "nobody"}, 422, "username"),
        ({"user_id": 999999}, 422, "user_id"),
        ({}, 422, "user_id"),
        ({"user_id": alice.user_id, "username": "alice"}, 422, "user_id"),
        ({"username": "carol", "role": "owner"}, 422, "role"),
        ({"username": "carol", "admin": True}, 422, "admin"),
    ]
    for body, status, field in cases:
        r = await _add(client, alice, ws, **body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["details"]["field"] == field, (body, r.text)
    r = await client.patch(f"{API}/workspaces/{ws}/members/999999", json={"role": "member"}, headers=alice.headers)
    assert r.status_code == 404
    assert await _members(client, alice, ws) == {"alice": "workspace_admin", "bob": "member"}


async def test_last_workspace_admin_stays(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    ws = (await _workspace(client, admin, "team", admin_user_id=alice.user_id))["id"]
    await _add(client, alice, ws, username="bob")
    url = f"{API}/workspaces/{ws}/members/{alice.user_id}"
    for by in (alice, admin):
        r = await client.patch(url, json={"role": "member"}, headers=by.headers)
        assert r.status_code == 409
        assert r.json()["error"]["code"] == "conflict"
        assert "last admin" in r.json()["error"]["message"]
        assert (await client.delete(url, headers=by.headers)).status_code == 409
    assert await _members(client, alice, ws) == {"alice": "workspace_admin", "bob": "member"}


async def test_member_pages(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    ws = (await _workspace(client, admin, "team"))["id"]
    for name in ("u1", "u2", "u3"):
        await make_user(db, client, name)
        await _add(client, admin, ws, username=name)
    r = await client.get(f"{API}/workspaces/{ws}/members", params={"limit": 2}, headers=admin.headers)
    first = r.json()
    assert len(first["items"]) == 2
    assert first["next_cursor"]
    r = await client.get(
        f"{API}/workspaces/{ws}/members", params={"limit": 2, "cursor": first["next_cursor"]}, headers=admin.headers
    )
    assert [m["username"] for m in first["items"] + r.json()["items"]] == ["admin", "u1", "u2", "u3"]
    assert r.json()["next_cursor"] is None
    r = await client.get(f"{API}/workspaces/{ws}/members", params={"cursor": "garbage"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "cursor"
