"""SSH keys through the REST API and the service the gateway uses, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncssh
import httpx
import pytest
from sqlalchemy import func, select

from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent, SshKey
from aicenter.events import ssh_keys_changed
from aicenter.gateway.ssh import GatewayUser
from aicenter.gateway.ssh_lookup import key_authenticator
from aicenter.services import ssh_keys, tenancy
from tests.factories import ADMIN, make_user


def _key(comment: str = "") -> asyncssh.SSHKey:
    return asyncssh.generate_private_key("ssh-ed25519", comment=comment or None)


def _line(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


async def _count(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(SshKey)) or 0)


async def test_add_list_delete_own_keys(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    key = _key("alice@laptop")
    r = await client.post("/api/v1/ssh-keys", json={"public_key": _line(key) + "\n"}, headers=alice.headers)
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["name"] == "alice@laptop"  # the comment, when no name is given
    assert created["public_key"] == _line(key)
    assert created["fingerprint"] == key.get_fingerprint("sha256")
    assert created["last_used_at"] is None

    r = await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key()), "name": "ci"}, headers=alice.headers)
    assert r.status_code == 201
    listed = (await client.get("/api/v1/ssh-keys", headers=alice.headers)).json()
    assert [k["name"] for k in listed] == ["alice@laptop", "ci"]

    assert (await client.delete(f"/api/v1/ssh-keys/{created['id']}", headers=alice.headers)).status_code == 204
    listed = (await client.get("/api/v1/ssh-keys", headers=alice.headers)).json()
    assert [k["name"] for k in listed] == ["ci"]
    async with db.read() as session:
        actions = list(await session.scalars(select(AuditEvent.action).where(AuditEvent.target_type == "ssh_key")))
    assert actions.count("ssh_key.add") == 2
    assert actions.count("ssh_key.delete") == 1


async def test_another_users_key_is_invisible(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    r = await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key())}, headers=alice.headers)
    key_id = r.json()["id"]
    assert (await client.get("/api/v1/ssh-keys", headers=bob.headers)).json() == []
    hidden = await client.delete(f"/api/v1/ssh-keys/{key_id}", headers=bob.headers)
    missing = await client.delete("/api/v1/ssh-keys/987654321", headers=bob.headers)
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["error"]["code"] == "not_found"
    assert await _count(db) == 1


async def test_one_key_belongs_to_one_user(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    line = _line(_key())
    assert (await client.post("/api/v1/ssh-keys", json={"public_key": line}, headers=alice.headers)).status_code == 201
    for who in (alice, bob):
        r = await client.post("/api/v1/ssh-keys", json={"public_key": line, "name": "again"}, headers=who.headers)
        assert r.status_code == 409, r.text
        assert r.json()["error"]["code"] == "conflict"
    assert await _count(db) == 1


async def test_bad_keys_are_422_and_write_nothing(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    weak = asyncssh.generate_private_key("ssh-rsa", key_size=1024)
    for text in ("not a key", _line(weak), _key().export_private_key().decode()):
        r = await client.post("/api/v1/ssh-keys", json={"public_key": text}, headers=alice.headers)
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "ssh_key_invalid"
    r = await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key()), "bogus": 1}, headers=alice.headers)
    assert r.status_code == 422
    assert await _count(db) == 0


async def test_names_are_unique_per_user_and_keys_are_limited(
    client: httpx.AsyncClient, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_user(db, client, "alice")
    body = {"public_key": _line(_key()), "name": "laptop"}
    assert (await client.post("/api/v1/ssh-keys", json=body, headers=alice.headers)).status_code == 201
    again = await client.post("/api/v1/ssh-keys", json={**body, "public_key": _line(_key())}, headers=alice.headers)
    assert again.status_code == 409
    assert again.json()["error"]["details"]["field"] == "name"
    monkeypatch.setattr(ssh_keys, "MAX_KEYS_PER_USER", 2)
    assert (
        await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key())}, headers=alice.headers)
    ).status_code == 201
    full = await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key())}, headers=alice.headers)
    assert full.status_code == 409
    assert full.json()["error"]["code"] == "quota_exceeded"


async def test_gateway_lookups(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    key = _key("work")
    await client.post("/api/v1/ssh-keys", json={"public_key": _line(key)}, headers=alice.headers)
    async with db.write() as session:
        assert await ssh_keys.user_for_key(session, key) == (alice.user_id, "alice")
        assert await ssh_keys.user_for_key(session, key.get_fingerprint("sha256")) == (alice.user_id, "alice")
        assert await ssh_keys.user_for_key(session, _key()) is None
        assert await ssh_keys.authorized_keys(session, alice.user_id) == [_line(key)]
    listed = (await client.get("/api/v1/ssh-keys", headers=alice.headers)).json()
    assert listed[0]["last_used_at"] is not None  # the lookup recorded the use

    async with db.write() as session:
        await tenancy.freeze_user(session, ADMIN, alice.user_id)
    async with db.write() as session:
        assert await ssh_keys.user_for_key(session, key) is None  # a frozen user's keys open nothing


async def test_the_gateways_authenticator(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    key = _key()
    await client.post("/api/v1/ssh-keys", json={"public_key": _line(key)}, headers=alice.headers)
    authenticate = key_authenticator(db)
    assert await authenticate(key) == GatewayUser(alice.user_id, "alice")
    assert await authenticate(_key()) is None


async def test_changes_wake_whoever_rewrites_the_notebooks_key_files(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    woken: list[int] = []
    unsubscribe = ssh_keys_changed.subscribe(lambda: woken.append(1))
    try:
        bad = await client.post("/api/v1/ssh-keys", json={"public_key": "nope"}, headers=alice.headers)
        assert bad.status_code == 422
        assert woken == []  # nothing committed, nobody woken
        r = await client.post("/api/v1/ssh-keys", json={"public_key": _line(_key())}, headers=alice.headers)
        assert woken == [1]
        await client.delete(f"/api/v1/ssh-keys/{r.json()['id']}", headers=alice.headers)
        assert woken == [1, 1]
    finally:
        unsubscribe()
