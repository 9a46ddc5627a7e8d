"""The audit log: every tenancy mutation is recorded, and platform admins read it with filters."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx

from aicenter.db.engine import Database
from aicenter.db.models import Pool
from tests.factories import Login, admin_login, login, make_user

API = "/api/v1"


async def _events(client: httpx.AsyncClient, admin: Login, **params: Any) -> list[dict[str, Any]]:
    r = await client.get(f"{API}/audit-events", params={"limit": 500, **params}, headers=admin.headers)
    assert r.status_code == 200, r.text
    items: list[dict[str, Any]] = r.json()["items"]
    return items


async def test_every_tenancy_mutation_is_recorded(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    async with db.write() as session:
        pool = Pool(name="gpu")
        session.add(pool)
        await session.flush()
        pool_id = pool.id
    h = {**admin.headers, "X-Request-Id": "req-0001"}
    user = (await client.post(f"{API}/users", json={"username": "bob", "password": "bob-password-1"}, headers=h)).json()
    ws = (await client.post(f"{API}/workspaces", json={"name": "team"}, headers=h)).json()["id"]
    calls = [
        ("patch", f"/users/{user['id']}", {"display_name": "Bob"}),
        ("post", f"/users/{user['id']}/freeze", None),
        ("post", f"/users/{user['id']}/thaw", None),
        ("patch", f"/workspaces/{ws}", {"name": "crew"}),
        ("post", f"/workspaces/{ws}/members", {"username": "bob"}),
        ("patch", f"/workspaces/{ws}/members/{user['id']}", {"role": "workspace_admin"}),
        ("delete", f"/workspaces/{ws}/members/{user['id']}", None),
        ("put", f"/workspaces/{ws}/quotas/{pool_id}", {"maximum": {"cpu": 2}}),
        ("put", f"/workspaces/{ws}/quotas/{pool_id}", {"maximum": {"cpu": 4}}),
        ("delete", f"/workspaces/{ws}/quotas/{pool_id}", None),
        ("delete", f"/workspaces/{ws}", None),
    ]
    for method, path, body in calls:
        kwargs: dict[str, Any] = {"headers": h} if body is None else {"headers": h, "json": body}
        r = await client.request(method.upper(), f"{API}{path}", **kwargs)
        assert r.status_code < 300, (method, path, r.text)
    bob = await login(client, "bob", "bob-password-1")
    await client.patch(f"{API}/users/me", json={"display_name": "B"}, headers=bob.headers)
    r = await client.post(
        f"{API}/users/me/password",
        json={"current_password": "bob-password-1", "new_password": "bob-password-2"},
        headers=bob.headers,
    )
    assert r.status_code == 204

    events = await _events(client, admin, actor="admin")
    actions = [e["action"] for e in reversed(events) if e["request_id"] == "req-0001"]
    assert actions == [
        "user.create",
        "workspace.create",  # bob's default workspace
        "workspace.create",
        "user.update",
        "user.freeze",
        "user.thaw",
        "workspace.update",
        "workspace.member.add",
        "workspace.member.update",
        "workspace.member.remove",
        "quota.create",
        "quota.update",
        "quota.delete",
        "workspace.delete",
    ]
    for e in events:
        if e["request_id"] != "req-0001":
            continue
        assert e["actor_id"] == admin.user_id
        assert e["actor_name"] == "admin"
        assert e["client_address"] == "127.0.0.1"
        assert e["target_type"] in ("user", "workspace", "quota")
        assert e["target_id"]
        if e["action"].startswith(("workspace.", "quota.")):
            assert e["workspace_id"] in (ws, user["default_workspace_id"])
        else:
            assert e["workspace_id"] is None
    member_add = next(e for e in events if e["action"] == "workspace.member.add")
    assert (member_add["target_type"], member_add["target_id"], member_add["workspace_id"]) == (
        "user",
        str(user["id"]),
        ws,
    )
    assert member_add["details"] == {"username": "bob", "role": "member"}
    own = await _events(client, admin, actor="bob")
    assert [e["action"] for e in own][:2] == ["user.password", "user.update_self"]
    assert "bob-password" not in str(await _events(client, admin))


async def test_refused_requests_record_nothing(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    count = len(await _events(client, admin))
    await client.post(f"{API}/workspaces", json={"name": "alice"}, headers=admin.headers)  # 409
    await client.post(f"{API}/workspaces", json={"name": "x"}, headers=alice.headers)  # 403
    await client.post(f"{API}/users", json={"username": "a b", "password": "long-enough"}, headers=admin.headers)
    assert len(await _events(client, admin)) == count


async def test_filters_order_and_pages(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    for name in ("u1", "u2", "u3"):
        await make_user(db, client, name)
    r = await client.post(f"{API}/workspaces", json={"name": "team"}, headers=admin.headers)
    ws = r.json()["id"]
    await client.post(f"{API}/workspaces/{ws}/members", json={"username": "u1"}, headers=admin.headers)

    everything = await _events(client, admin)
    assert [e["id"] for e in everything] == sorted((e["id"] for e in everything), reverse=True)
    creates = await _events(client, admin, action="user.create")
    assert {e["details"]["username"] for e in creates} >= {"u1", "u2", "u3"}
    assert all(e["action"] == "user.create" for e in creates)
    prefixed = await _events(client, admin, action="workspace.")
    assert {e["action"] for e in prefixed} == {"workspace.create", "workspace.member.add"}
    in_ws = await _events(client, admin, workspace_id=ws)
    assert [e["action"] for e in in_ws] == ["workspace.member.add", "workspace.create"]
    target = await _events(client, admin, target_type="workspace", target_id=str(ws))
    assert [e["action"] for e in target] == ["workspace.create"]

    now = datetime.now(UTC)
    assert await _events(client, admin, since=(now + timedelta(hours=1)).isoformat()) == []
    assert len(await _events(client, admin, until=(now + timedelta(hours=1)).isoformat())) == len(everything)
    naive = (now - timedelta(hours=1)).replace(tzinfo=None).isoformat()  # read as UTC
    assert len(await _events(client, admin, since=naive)) == len(everything)
    r = await client.get(
        f"{API}/audit-events", params={"since": now.isoformat(), "until": now.isoformat()}, headers=admin.headers
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "until"
    r = await client.get(f"{API}/audit-events", params={"since": "yesterday"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "since"

    first = (await client.get(f"{API}/audit-events", params={"limit": 2}, headers=admin.headers)).json()
    second = (
        await client.get(
            f"{API}/audit-events", params={"limit": 2, "cursor": first["next_cursor"]}, headers=admin.headers
        )
    ).json()
    assert [e["id"] for e in first["items"] + second["items"]] == [e["id"] for e in everything[:4]]


async def test_only_platform_admins_read_the_log(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    r = await client.get(f"{API}/audit-events", headers=alice.headers)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    assert (await client.get(f"{API}/audit-events")).status_code == 401
