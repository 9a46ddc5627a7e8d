"""Login, tokens and the signed-in user, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI
from sqlalchemy import event, select

from aicenter.db.engine import Database
from aicenter.db.models import User
from aicenter.services import auth
from aicenter.services.auth import TokenVerifier
from tests.factories import admin_login, login, make_user


async def test_login_me_and_logout(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    me = await client.get("/api/v1/users/me", headers=admin.headers)
    assert me.status_code == 200
    assert me.json()["is_platform_admin"] is True
    assert me.headers["x-request-id"]
    assert (await client.post("/api/v1/auth/logout", headers=admin.headers)).status_code == 204
    again = await client.get("/api/v1/users/me", headers=admin.headers)
    assert again.status_code == 401
    assert again.json()["error"]["code"] == "unauthenticated"


async def test_wrong_password_is_rate_limited(client: httpx.AsyncClient, db: Database) -> None:
    await make_user(db, client, "alice")
    for _ in range(5):
        r = await client.post("/api/v1/auth/login", json={"username": "alice", "password": "wrong-password"})
        assert r.status_code == 401
    r = await client.post("/api/v1/auth/login", json={"username": "alice", "password": "user-password-1"})
    assert r.status_code == 429
    assert r.json()["error"]["code"] == "rate_limited"


@asynccontextmanager
async def _client_from(app: FastAPI, address: str) -> AsyncIterator[httpx.AsyncClient]:
    """A client whose requests come from ``address`` (the socket peer the server sees)."""
    transport = httpx.ASGITransport(app=app, client=(address, 40000))
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        yield client


async def _login_status(client: httpx.AsyncClient, username: str, password: str) -> int:
    r = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
    return r.status_code


async def test_failed_logins_block_their_address_but_not_the_right_password_from_another(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    await make_user(db, client, "alice")
    async with _client_from(app, "10.1.0.1") as a, _client_from(app, "10.2.0.2") as b:
        for _ in range(5):
            assert await _login_status(a, "alice", "wrong-password") == 401
        assert await _login_status(a, "alice", "user-password-1") == 429  # this user from this address
        assert await _login_status(b, "alice", "user-password-1") == 200  # alice herself, elsewhere
        assert await _login_status(b, "alice", "wrong-password") == 401  # B's own count starts at 0


async def test_an_address_failing_for_many_names_is_blocked_for_all_of_them(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    await make_user(db, client, "alice")
    async with _client_from(app, "10.1.0.1") as a, _client_from(app, "10.2.0.2") as b:
        for n in range(4 * 5):  # spraying: fewer than 5 failures per name, 20 from the address in all
            assert await _login_status(a, f"guess{n // 4}", "wrong-password") == 401
        r = await a.post("/api/v1/auth/login", json={"username": "alice", "password": "user-password-1"})
        assert (r.status_code, r.json()["error"]["code"]) == (429, "rate_limited")
        assert "address" in r.json()["error"]["message"]
        assert int(r.headers["retry-after"]) > 0
        assert await _login_status(b, "alice", "user-password-1") == 200


async def test_token_shown_once_then_revoked(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    created = await client.post("/api/v1/tokens", json={"name": "ci"}, headers=alice.headers)
    assert created.status_code == 201
    secret = created.json()["token"]
    listed = await client.get("/api/v1/tokens", headers=alice.headers)
    assert all("token" not in t and "secret_hash" not in t for t in listed.json())
    use = await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {secret}"})
    assert use.json()["username"] == "alice"
    revoke = await client.delete(f"/api/v1/tokens/{created.json()['id']}", headers=alice.headers)
    assert revoke.status_code == 204
    use = await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {secret}"})
    assert use.status_code == 401


async def test_other_users_token_reads_as_missing(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    created = await client.post("/api/v1/tokens", json={"name": "x"}, headers=alice.headers)
    r = await client.delete(f"/api/v1/tokens/{created.json()['id']}", headers=bob.headers)
    assert r.status_code == 404


async def test_unknown_field_is_refused(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    r = await client.post("/api/v1/tokens", json={"name": "x", "expires": "soon"}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "expires"


async def test_token_use_is_recorded(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    created = await client.post("/api/v1/tokens", json={"name": "ci"}, headers=alice.headers)
    listed = {t["id"]: t for t in (await client.get("/api/v1/tokens", headers=alice.headers)).json()}
    assert listed[created.json()["id"]]["last_used_at"] is None
    await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {created.json()['token']}"})
    listed = {t["id"]: t for t in (await client.get("/api/v1/tokens", headers=alice.headers)).json()}
    assert listed[created.json()["id"]]["last_used_at"] is not None


async def test_concurrent_checks_of_one_token_share_one_read(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    await client.get("/api/v1/users/me", headers=alice.headers)  # records last use, so no write follows
    reads: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
        if "api_tokens" in statement:
            reads.append(statement)

    verifier = TokenVerifier(cache_s=2.0)
    event.listen(db.engine.sync_engine, "before_cursor_execute", count)
    try:
        results = await asyncio.gather(*(verifier.verify(db, alice.token) for _ in range(20)))
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", count)
    assert {actor.username for actor, _kind in results} == {"alice"}
    assert len(reads) == 1


async def test_login_upgrades_a_cheap_password_hash_once_the_server_hashes_for_production(
    client: httpx.AsyncClient, db: Database
) -> None:
    """A database begun on a development server (fast profile) gets production hashes one login at a time."""
    await make_user(db, client, "alice")

    async def stored() -> str:
        async with db.read() as session:
            value = await session.scalar(select(User.password_hash).where(User.username == "alice"))
        assert value is not None
        return value

    assert (await stored()).startswith("$argon2id$v=19$m=8,t=1,p=1$")
    before = auth.password_profile()
    auth.use_password_profile("production")
    try:
        await login(client, "alice", "user-password-1")
        assert (await stored()).startswith("$argon2id$v=19$m=65536,t=3,p=4$")
        await login(client, "alice", "user-password-1")
    finally:
        auth.use_password_profile(before)
    assert (await login(client, "alice", "user-password-1")).username == "alice", "the production hash verifies"


async def test_a_body_that_is_not_utf8_is_refused_like_any_malformed_body(client: httpx.AsyncClient) -> None:
    json_type = {"Content-Type": "application/json"}
    for body in (b"\xff\xfe", b'{"username": "\xff", "password": "x"}', b'{"username": '):
        r = await client.post("/api/v1/auth/login", content=body, headers=json_type)
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert (error["code"], error["details"]["field"]) == ("validation_failed", "body"), body
        assert error["message"].startswith("the body is not valid"), error["message"]
        assert "Traceback" not in r.text
