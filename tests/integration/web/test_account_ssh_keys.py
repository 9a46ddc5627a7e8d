"""SSH keys on the profile page: list, add (pasted into a textarea), delete; errors shown next to the field."""

from __future__ import annotations

import asyncssh
import httpx
from sqlalchemy import select

from aicenter.db.engine import Database
from aicenter.db.models import SshKey
from tests.factories import make_user
from tests.integration.web.conftest import OpenBrowser


async def _keys(db: Database) -> list[SshKey]:
    async with db.read() as session:
        return list((await session.scalars(select(SshKey).order_by(SshKey.id))).all())


async def test_add_and_delete_a_key(open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient) -> None:
    alice = await make_user(db, client, "alice")
    browser = await open_browser("alice")
    page = await browser.get("/profile")
    assert page.status_code == 200
    assert 'data-testid="ssh-keys"' in page.text
    assert "You have no SSH keys." in page.text

    key = asyncssh.generate_private_key("ssh-ed25519", comment="alice@laptop")
    line = key.export_public_key().decode()
    added = await browser.post("/profile/ssh-keys", {"public_key": line, "name": ""})
    assert added.status_code == 303
    page = await browser.get(added.headers["location"])
    assert "SSH key alice@laptop was added." in page.text
    assert key.get_fingerprint("sha256") in page.text
    (stored,) = await _keys(db)
    assert (stored.user_id, stored.name) == (alice.user_id, "alice@laptop")

    deleted = await browser.post(f"/profile/ssh-keys/{stored.id}/delete")
    assert deleted.status_code == 303
    assert await _keys(db) == []


async def test_a_bad_key_is_explained_and_kept_in_the_form(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")
    browser = await open_browser("alice")
    response = await browser.post("/profile/ssh-keys", {"public_key": "ssh-ed25519 bm90IGEga2V5", "name": "x"})
    assert response.status_code == 422
    assert 'data-testid="ssh-key-public-key-error"' in response.text
    assert "ssh-ed25519 bm90IGEga2V5" in response.text  # what was pasted is kept
    assert await _keys(db) == []


async def test_another_users_key_cannot_be_deleted(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    alice = await open_browser("alice")
    line = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    assert (await alice.post("/profile/ssh-keys", {"public_key": line})).status_code == 303
    (stored,) = await _keys(db)
    bob = await open_browser("bob")
    assert stored.fingerprint not in (await bob.get("/profile")).text
    refused = await bob.post(f"/profile/ssh-keys/{stored.id}/delete")
    assert refused.status_code == 404
    assert len(await _keys(db)) == 1
