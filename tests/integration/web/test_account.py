"""My profile and my tokens through the console's forms."""

from __future__ import annotations

import re

import httpx

from aicenter.db.engine import Database
from aicenter.db.models import User
from tests.factories import make_user
from tests.integration.web.conftest import Browser, OpenBrowser


async def _user(db: Database, user_id: int) -> User:
    async with db.read() as session:
        user = await session.get(User, user_id)
    assert user is not None
    return user


async def test_profile_update_changes_the_database(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    alice = await make_user(db, client, "alice")
    browser = await open_browser("alice")
    page = await browser.get("/profile")
    assert page.status_code == 200
    assert 'id="profile-display-name"' in page.text
    response = await browser.post("/profile", {"display_name": "Alice Liddell", "email": "alice@example.org"})
    assert response.status_code == 303
    page = await browser.get(response.headers["location"])
    assert 'data-testid="flash"' in page.text
    assert "Your profile was saved." in page.text
    user = await _user(db, alice.user_id)
    assert (user.display_name, user.email) == ("Alice Liddell", "alice@example.org")


async def test_profile_error_is_shown_next_to_the_field(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    alice = await make_user(db, client, "alice")
    browser = await open_browser("alice")
    response = await browser.post("/profile", {"display_name": "Typo", "email": "not-an-address"})
    assert response.status_code == 422
    assert 'data-testid="profile-email-error"' in response.text
    assert 'value="not-an-address"' in response.text  # what was typed is kept
    assert (await _user(db, alice.user_id)).display_name == "alice"  # nothing changed


async def test_change_password(open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient) -> None:
    await make_user(db, client, "alice")
    browser = await open_browser("alice")
    wrong = await browser.post(
        "/profile/password",
        {"current_password": "nope-nope", "new_password": "brand-new-pass", "new_password_confirm": "brand-new-pass"},
    )
    assert wrong.status_code == 403
    assert 'data-testid="password-current-password-error"' in wrong.text
    differ = await browser.post(
        "/profile/password",
        {"current_password": "user-password-1", "new_password": "brand-new-pass", "new_password_confirm": "other"},
    )
    assert differ.status_code == 422
    assert 'data-testid="password-new-password-confirm-error"' in differ.text
    short = await browser.post(
        "/profile/password", {"current_password": "user-password-1", "new_password": "x", "new_password_confirm": "x"}
    )
    assert short.status_code == 422
    assert 'data-testid="password-new-password-error"' in short.text
    ok = await browser.post(
        "/profile/password",
        {
            "current_password": "user-password-1",
            "new_password": "brand-new-pass",
            "new_password_confirm": "brand-new-pass",
        },
    )
    assert ok.status_code == 303
    assert (await browser.get("/profile")).status_code == 200  # this session stays valid
    fresh = await open_browser()
    assert (await fresh.sign_in("alice", "brand-new-pass")).status_code == 303


async def test_token_is_shown_once_works_and_can_be_revoked(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")
    browser = await open_browser("alice")
    page = await browser.get("/tokens")
    assert 'data-testid="tokens-table"' in page.text
    created = await browser.post("/tokens", {"name": "ci", "expires_on": ""})
    assert created.status_code == 200
    assert created.headers["cache-control"] == "no-store"
    match = re.search(r'data-testid="new-token-secret">([^<]+)<', created.text)
    assert match
    secret = match.group(1)
    assert 'data-copy-target="new-token-secret"' in created.text
    me = await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.json()["username"] == "alice"
    listed = await browser.get("/tokens")
    assert secret not in listed.text
    token_id = int(re.findall(r'data-token-id="(\d+)"', listed.text)[0])
    revoked = await browser.post(f"/tokens/{token_id}/revoke")
    assert revoked.status_code == 303
    me = await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {secret}"})
    assert me.status_code == 401
    assert "revoked" in (await browser.get("/tokens?revoked=true")).text


async def test_token_form_errors(admin: Browser) -> None:
    empty = await admin.post("/tokens", {"name": ""})
    assert empty.status_code == 422
    assert 'data-testid="token-create-name-error"' in empty.text
    past = await admin.post("/tokens", {"name": "old", "expires_on": "2001-01-01"})
    assert past.status_code == 422
    assert 'data-testid="token-create-expires-on-error"' in past.text
    garbage = await admin.post("/tokens", {"name": "x", "expires_on": "soon"})
    assert garbage.status_code == 422


async def test_cannot_revoke_another_users_token(
    open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    alice = await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    created = await client.post("/api/v1/tokens", json={"name": "mine"}, headers=alice.headers)
    bob = await open_browser("bob")
    response = await bob.post(f"/tokens/{created.json()['id']}/revoke")
    assert response.status_code == 404
