"""Console sign-in and sign-out, cookies, redirects, CSRF and error pages."""

from __future__ import annotations

from http.cookies import SimpleCookie

import httpx
import pytest
from sqlalchemy import func, select
from starlette.responses import Response

from aicenter.config import Settings
from aicenter.db.engine import Database
from aicenter.db.models import ApiToken, LoginAttempt
from aicenter.web.security import safe_next, set_session_cookie
from tests.conftest import ADMIN_PASSWORD
from tests.factories import make_user
from tests.integration.web.conftest import Browser, OpenBrowser, csrf_in


def _set_cookie(response: httpx.Response, name: str) -> str:
    headers = [h for h in response.headers.get_list("set-cookie") if h.startswith(f"{name}=")]
    assert len(headers) == 1, response.headers.get_list("set-cookie")
    return headers[0]


async def _count(db: Database, model: type[ApiToken] | type[LoginAttempt]) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def test_login_page_has_stable_fields(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    page = await browser.get("/login")
    assert page.status_code == 200
    for marker in (
        'id="login-username"',
        'name="username"',
        'id="login-password"',
        'name="password"',
        'data-testid="login-submit"',
        'name="csrf_token"',
    ):
        assert marker in page.text
    assert "aicenter_login_csrf=" in page.headers["set-cookie"]
    assert "https://" not in page.text  # nothing from a CDN


async def test_login_sets_session_cookie_with_right_attributes(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    response = await browser.sign_in("admin", ADMIN_PASSWORD, next_path="/tokens")
    assert response.status_code == 303
    assert response.headers["location"] == "/tokens"
    header = _set_cookie(response, "aicenter_session")
    morsel = SimpleCookie(header)["aicenter_session"]
    assert morsel.value.startswith("aic_")
    assert morsel["httponly"] is True
    assert morsel["samesite"].lower() == "lax"
    assert morsel["path"] == "/"
    assert not morsel["secure"]  # plain http in tests; see the next test for https
    assert int(morsel["max-age"]) == 12 * 3600
    assert (await browser.get("/tokens")).status_code == 200


def test_session_cookie_is_secure_behind_https(tmp_path: object) -> None:
    settings = Settings(public_url="https://aic.example.org", secret_key="k" * 32, register_host=False)
    response = Response()
    set_session_cookie(response, settings, "aic_1_x")
    header = response.headers["set-cookie"]
    assert "Secure" in header
    assert "HttpOnly" in header


async def test_login_refuses_open_redirects(open_browser: OpenBrowser) -> None:
    for evil in ("//evil.example", "https://evil.example/", "/\\evil.example", "javascript:alert(1)"):
        browser = await open_browser()
        response = await browser.sign_in("admin", ADMIN_PASSWORD, next_path=evil)
        assert response.headers["location"] == "/", evil


@pytest.mark.parametrize(
    ("value", "expected"),
    [("/users?q=a", "/users?q=a"), ("//x.org", "/"), ("http://x.org", "/"), ("/a\r\nSet-Cookie: x", "/"), ("", "/")],
)
def test_safe_next(value: str, expected: str) -> None:
    assert safe_next(value) == expected


async def test_wrong_password_shows_error_and_counts(open_browser: OpenBrowser, db: Database) -> None:
    browser = await open_browser()
    response = await browser.sign_in("admin", "not-the-password")
    assert response.status_code == 401
    assert 'data-testid="login-error"' in response.text
    assert "aicenter_session=" not in response.headers.get("set-cookie", "")
    assert 'value="admin"' in response.text  # the user name is kept, the password is not
    assert await _count(db, LoginAttempt) == 1


async def test_login_without_form_token_is_refused(open_browser: OpenBrowser, db: Database) -> None:
    browser = await open_browser()
    await browser.get("/login")
    for token in ("", "forged"):
        response = await browser.client.post(
            "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": token}
        )
        assert response.status_code == 403
        assert "aicenter_session=" not in response.headers.get("set-cookie", "")
    # A token from another browser does not fit this browser's cookie either.
    other = await open_browser()
    foreign = csrf_in((await other.get("/login")).text)
    fresh = await open_browser()
    response = await fresh.client.post(
        "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": foreign}
    )
    assert response.status_code == 403
    assert await _count(db, ApiToken) == 0


async def test_pages_without_session_redirect_to_login(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    for path in ("/", "/profile", "/workspaces", "/users", "/nodes"):
        response = await browser.get(path)
        assert response.status_code == 303, path
        expected = "/login" if path == "/" else f"/login?next=%2F{path[1:]}"
        assert response.headers["location"] == expected
    response = await browser.post("/tokens", {"name": "x"}, csrf="whatever")
    assert response.status_code == 303
    assert response.headers["location"].startswith("/login")


async def test_stale_session_cookie_redirects_and_is_cleared(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    browser.client.cookies.set("aicenter_session", "aic_999_nope")
    response = await browser.get("/profile")
    assert response.status_code == 303
    assert 'aicenter_session=""' in response.headers["set-cookie"]


async def test_signed_in_user_skips_login_page(admin: Browser) -> None:
    response = await admin.get("/login?next=/users")
    assert response.status_code == 303
    assert response.headers["location"] == "/users"


async def test_logout_revokes_the_session(admin: Browser) -> None:
    cookie = admin.client.cookies["aicenter_session"]
    response = await admin.post("/logout")
    assert response.status_code == 303
    assert response.headers["location"] == "/login"
    assert 'aicenter_session=""' in _set_cookie(response, "aicenter_session")
    # The old cookie no longer works, even if a browser kept it.
    admin.client.cookies.set("aicenter_session", cookie)
    assert (await admin.get("/")).status_code == 303
    login = await admin.get("/login")
    assert "You are signed out." in login.text


async def test_post_without_or_with_wrong_csrf_is_403_and_changes_nothing(admin: Browser, db: Database) -> None:
    before = await _count(db, ApiToken)
    for token in ("", "0" * 64):
        response = await admin.post("/tokens", {"name": "sneaky"}, csrf=token)
        assert response.status_code == 403
        assert 'data-testid="error-page"' in response.text
    assert await _count(db, ApiToken) == before
    # A token of another session is wrong for this one.
    response = await admin.post("/logout", csrf=admin.csrf[::-1])
    assert response.status_code == 403
    assert (await admin.get("/")).status_code == 200  # still signed in


async def test_csrf_of_another_session_is_refused(open_browser: OpenBrowser) -> None:
    first = await open_browser("admin", ADMIN_PASSWORD)
    second = await open_browser("admin", ADMIN_PASSWORD)
    response = await first.post("/tokens", {"name": "x"}, csrf=second.csrf)
    assert response.status_code == 403


async def test_unknown_page_is_a_friendly_404(admin: Browser, open_browser: OpenBrowser) -> None:
    for browser in (admin, await open_browser()):
        response = await browser.get("/no/such/page")
        assert response.status_code == 404
        assert response.headers["content-type"].startswith("text/html")
        assert "Page not found" in response.text
    for path in (
        "/workspaces/987654",
        "/users/987654",
        "/nodes/987654",
        "/specs/987654",
        "/pools/987654",
        "/accelerator-types/987654",
        "/workspaces/abc",
    ):
        response = await admin.get(path)
        assert response.status_code == 404, path
        assert 'data-testid="error-page"' in response.text
    api = await admin.get("/api/v1/no-such-thing")
    assert api.status_code == 404
    assert api.json()["error"]["code"] == "not_found"


async def test_static_assets_are_served(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    css = await browser.get("/static/console.css")
    assert css.status_code == 200
    assert "text/css" in css.headers["content-type"]
    assert (await browser.get("/static/console.js")).status_code == 200
    assert "@import" not in css.text
    assert "url(http" not in css.text


async def test_workspace_switcher(
    open_browser: OpenBrowser, admin: Browser, db: Database, client: httpx.AsyncClient
) -> None:
    await make_user(db, client, "alice")
    await make_user(db, client, "bob")
    alice = await open_browser("alice")
    home = await alice.get("/")
    assert 'data-testid="workspace-select"' in home.text
    # bob's workspace: alice is not a member, so the choice is refused and nothing is stored.
    page = await admin.get("/workspaces?name=bob")
    bob_ws = int(page.text.split('data-workspace-id="')[1].split('"')[0])
    response = await alice.post("/workspace", {"workspace_id": bob_ws, "next": "/"})
    assert response.status_code == 303
    assert not any(h.startswith("aicenter_workspace=") for h in response.headers.get_list("set-cookie"))
    # After admin adds alice to bob's workspace, she may switch to it.
    r = await admin.post(f"/workspaces/{bob_ws}/members", {"username": "alice", "role": "member"})
    assert r.status_code == 303
    response = await alice.post("/workspace", {"workspace_id": bob_ws, "next": "/profile"})
    assert response.headers["location"] == "/profile"
    assert f"aicenter_workspace={bob_ws}" in response.headers["set-cookie"]
    home = await alice.get("/")
    assert 'data-testid="home-workspace"' in home.text
    assert ">bob</a>" in home.text
    # Platform admins may pick any workspace.
    response = await admin.post("/workspace", {"workspace_id": bob_ws, "next": "/"})
    assert f"aicenter_workspace={bob_ws}" in response.headers["set-cookie"]
    assert "(admin view)" in (await admin.get("/")).text


async def test_pages_carry_a_strict_content_security_policy(admin: Browser, open_browser: OpenBrowser) -> None:
    pages = [await admin.get("/"), await admin.get("/nope"), await (await open_browser()).get("/login")]
    for page in pages:
        assert "script-src" not in page.headers["content-security-policy"]  # default-src 'self': no inline script
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        assert page.headers["x-frame-options"] == "DENY"
        assert "<script>" not in page.text
        assert ' style="' not in page.text


async def test_a_login_form_that_is_not_utf8_is_a_wrong_password(open_browser: OpenBrowser) -> None:
    browser = await open_browser()
    token = csrf_in((await browser.get("/login")).text).encode()
    for body, content_type in (
        (b"username=\xff\xfe&password=\xfe\xff&csrf_token=" + token, "application/x-www-form-urlencoded"),
        (b"username=%ff%fe&password=%fe%ff&csrf_token=" + token, "application/x-www-form-urlencoded"),
    ):
        response = await browser.client.post("/login", content=body, headers={"Content-Type": content_type})
        assert response.status_code == 401, response.text
        assert "wrong user name or password" in response.text
