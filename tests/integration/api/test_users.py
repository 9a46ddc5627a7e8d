"""Users (platform admins) and the signed-in user's profile, password and workspaces, on SQLite and PostgreSQL."""

from __future__ import annotations

import httpx
from sqlalchemy import func, select

from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent, User
from tests.conftest import ADMIN_PASSWORD
from tests.factories import Login, admin_login, login, make_user

API = "/api/v1"


async def _create(client: httpx.AsyncClient, admin: Login, **body: object) -> httpx.Response:
    return await client.post(f"{API}/users", json={"password": "user-password-1", **body}, headers=admin.headers)


async def _count_users(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(User)) or 0)


async def test_create_user_gets_default_workspace_and_can_log_in(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    r = await _create(client, admin, username="alice", display_name="Alice A.", email="alice@example.org")
    assert r.status_code == 201, r.text
    user = r.json()
    assert user["username"] == "alice"
    assert user["email"] == "alice@example.org"
    assert user["state"] == "active"
    assert user["is_platform_admin"] is False
    assert "password" not in r.text
    assert user["default_workspace_id"] is not None
    alice = await login(client, "alice", "user-password-1")
    mine = await client.get(f"{API}/users/me/workspaces", headers=alice.headers)
    assert mine.status_code == 200
    assert mine.json() == [
        {"workspace": mine.json()[0]["workspace"], "role": "workspace_admin"},
    ]
    assert mine.json()[0]["workspace"]["id"] == user["default_workspace_id"]
    assert mine.json()[0]["workspace"]["name"] == "alice"


async def test_create_user_refuses_bad_input_and_changes_nothing(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    assert (await _create(client, admin, username="alice")).status_code == 201
    before = await _count_users(db)
    cases = [
        ({"username": "alice"}, 409, "conflict", "username"),
        ({"username": "bad name!"}, 422, "validation_failed", "username"),
        ({"username": ""}, 422, "validation_failed", "username"),
        ({"username": "bob", "password": "short"}, 422, "validation_failed", "password"),
        ({"username": "bob", "email": "not-an-address"}, 422, "validation_failed", "email"),
        ({"username": "bob", "role": "admin"}, 422, "validation_failed", "role"),
    ]
    for body, status, code, field in cases:
        r = await _create(client, admin, **body)
        assert r.status_code == status, (body, r.text)
        assert r.json()["error"]["code"] == code
        assert r.json()["error"]["details"]["field"] == field
    assert await _count_users(db) == before


async def test_only_admins_manage_users(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    assert (await _create(client, alice, username="bob")).status_code == 403
    assert (await client.get(f"{API}/users", headers=alice.headers)).status_code == 403
    assert (await client.get(f"{API}/users/{alice.user_id}", headers=alice.headers)).status_code == 403
    r = await client.patch(f"{API}/users/{alice.user_id}", json={"is_platform_admin": True}, headers=alice.headers)
    assert r.status_code == 403
    assert (await client.get(f"{API}/users")).status_code == 401


async def test_list_filters_and_pages(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    for name in ("alice", "alfred", "bob"):
        await make_user(db, client, name)
    r = await client.get(f"{API}/users", params={"q": "al"}, headers=admin.headers)
    assert [u["username"] for u in r.json()["items"]] == ["alice", "alfred"]
    r = await client.get(f"{API}/users", params={"username": "bob"}, headers=admin.headers)
    assert [u["username"] for u in r.json()["items"]] == ["bob"]
    r = await client.get(f"{API}/users", params={"q": "a%"}, headers=admin.headers)
    assert r.json()["items"] == []  # a literal %, not a pattern
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, str | int] = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{API}/users", params=params, headers=admin.headers)).json()
        seen += [u["username"] for u in page["items"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == ["admin", "alice", "alfred", "bob"]
    r = await client.get(f"{API}/users", params={"state": "sleeping"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "state"


async def test_get_and_update_user(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    assert (await client.get(f"{API}/users/999999", headers=admin.headers)).status_code == 404
    r = await client.patch(
        f"{API}/users/{alice.user_id}",
        json={"display_name": "Alice", "email": "a@example.org", "is_platform_admin": True},
        headers=admin.headers,
    )
    assert r.status_code == 200, r.text
    assert (r.json()["display_name"], r.json()["email"], r.json()["is_platform_admin"]) == (
        "Alice",
        "a@example.org",
        True,
    )
    r = await client.patch(f"{API}/users/{alice.user_id}", json={"email": ""}, headers=admin.headers)
    assert r.json()["email"] is None
    r = await client.patch(f"{API}/users/{alice.user_id}", json={"nickname": "al"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "nickname"


async def test_admin_password_reset_signs_user_out(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    r = await client.patch(f"{API}/users/{alice.user_id}", json={"password": "x"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "password"
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).status_code == 200
    r = await client.patch(f"{API}/users/{alice.user_id}", json={"password": "new-password-2"}, headers=admin.headers)
    assert r.status_code == 200
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).status_code == 401
    await login(client, "alice", "new-password-2")
    async with db.read() as session:
        event = await session.scalar(select(AuditEvent).where(AuditEvent.action == "user.update"))
    assert event is not None
    assert event.details == {"changed": ["password"]}
    assert "new-password-2" not in str(event.details)


async def test_last_platform_admin_cannot_be_demoted_or_frozen(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    r = await client.patch(f"{API}/users/{admin.user_id}", json={"is_platform_admin": False}, headers=admin.headers)
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "conflict"
    r = await client.post(f"{API}/users/{admin.user_id}/freeze", headers=admin.headers)
    assert r.status_code == 409  # not yourself
    root = await make_user(db, client, "root", admin=True)
    r = await client.post(f"{API}/users/{admin.user_id}/freeze", headers=root.headers)
    assert r.status_code == 200
    r = await client.post(f"{API}/users/{root.user_id}/freeze", headers=root.headers)
    assert r.status_code == 409
    r = await client.patch(f"{API}/users/{root.user_id}", json={"is_platform_admin": False}, headers=root.headers)
    assert r.status_code == 409  # the frozen admin does not count


async def test_freeze_blocks_login_and_tokens_and_thaw_restores(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    created = await client.post(f"{API}/tokens", json={"name": "ci"}, headers=alice.headers)
    api_token = {"Authorization": f"Bearer {created.json()['token']}"}
    r = await client.post(f"{API}/users/{alice.user_id}/freeze", headers=admin.headers)
    assert r.status_code == 200
    assert r.json()["state"] == "frozen"
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).status_code == 401
    assert (await client.get(f"{API}/users/me", headers=api_token)).status_code == 401
    r = await client.post(f"{API}/auth/login", json={"username": "alice", "password": "user-password-1"})
    assert r.status_code == 403
    frozen = await client.get(f"{API}/users", params={"state": "frozen"}, headers=admin.headers)
    assert [u["username"] for u in frozen.json()["items"]] == ["alice"]
    r = await client.post(f"{API}/users/{alice.user_id}/thaw", headers=admin.headers)
    assert r.json()["state"] == "active"
    # The CLI login was revoked by the freeze; the named API token works again.
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).status_code == 401
    assert (await client.get(f"{API}/users/me", headers=api_token)).status_code == 200
    await login(client, "alice", "user-password-1")
    assert (await client.post(f"{API}/users/999999/freeze", headers=admin.headers)).status_code == 404


async def test_update_me(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    team = await client.post(f"{API}/workspaces", json={"name": "team"}, headers=admin.headers)
    other = await client.post(f"{API}/workspaces", json={"name": "other"}, headers=admin.headers)
    r = await client.post(
        f"{API}/workspaces/{team.json()['id']}/members", json={"username": "alice"}, headers=admin.headers
    )
    assert r.status_code == 201
    r = await client.patch(
        f"{API}/users/me",
        json={"display_name": "Alice", "default_workspace_id": team.json()["id"]},
        headers=alice.headers,
    )
    assert r.status_code == 200, r.text
    assert r.json()["display_name"] == "Alice"
    assert r.json()["default_workspace_id"] == team.json()["id"]
    for ws_id in (other.json()["id"], 999999):  # not a member, and missing: the same answer
        r = await client.patch(f"{API}/users/me", json={"default_workspace_id": ws_id}, headers=alice.headers)
        assert r.status_code == 422
        assert r.json()["error"]["details"]["field"] == "default_workspace_id"
        assert "not one of your workspaces" in r.json()["error"]["message"]
    r = await client.patch(f"{API}/users/me", json={"is_platform_admin": True}, headers=alice.headers)
    assert r.status_code == 422
    me = (await client.get(f"{API}/users/me", headers=alice.headers)).json()
    assert (me["default_workspace_id"], me["is_platform_admin"]) == (team.json()["id"], False)
    mine = (await client.get(f"{API}/users/me/workspaces", headers=alice.headers)).json()
    assert sorted((m["workspace"]["name"], m["role"]) for m in mine) == [
        ("alice", "workspace_admin"),
        ("team", "member"),
    ]


async def test_change_own_password(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    other_login = await login(client, "alice", "user-password-1")
    url = f"{API}/users/me/password"
    r = await client.post(url, json={"current_password": "wrong-one", "new_password": "x" * 10}, headers=alice.headers)
    assert r.status_code == 403
    assert r.json()["error"]["details"]["field"] == "current_password"
    r = await client.post(
        url, json={"current_password": "user-password-1", "new_password": "short"}, headers=alice.headers
    )
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "new_password"
    await login(client, "alice", "user-password-1")  # nothing changed
    r = await client.post(
        url, json={"current_password": "user-password-1", "new_password": "new-password-2"}, headers=alice.headers
    )
    assert r.status_code == 204
    assert (await client.get(f"{API}/users/me", headers=alice.headers)).status_code == 200  # this one stays
    assert (await client.get(f"{API}/users/me", headers=other_login.headers)).status_code == 401
    await login(client, "alice", "new-password-2")
    r = await client.post(f"{API}/auth/login", json={"username": "alice", "password": "user-password-1"})
    assert r.status_code == 401


async def test_wrong_current_password_is_rate_limited(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    body = {"current_password": "guess-guess", "new_password": "new-password-2"}
    for _ in range(5):
        r = await client.post(f"{API}/users/me/password", json=body, headers=alice.headers)
        assert r.status_code == 403
    body["current_password"] = "user-password-1"
    r = await client.post(f"{API}/users/me/password", json=body, headers=alice.headers)
    assert r.status_code == 429


async def test_admin_password_not_in_audit_or_responses(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _create(client, admin, username="carol", password="carol-secret-pw")
    events = await client.get(f"{API}/audit-events", params={"limit": 500}, headers=admin.headers)
    assert "carol-secret-pw" not in events.text
    assert ADMIN_PASSWORD not in events.text
