"""A console 'browser' for tests: an httpx client with its own cookie jar that signs in through the login form."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest_asyncio
from fastapi import FastAPI

from tests.conftest import ADMIN_PASSWORD

_CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_in(page: str) -> str:
    match = _CSRF_RE.search(page)
    assert match, "the page has no form with a csrf_token"
    return html.unescape(match.group(1))


@dataclass
class Browser:
    """One signed-in (or not yet) console user; ``csrf`` is the session's form token once signed in."""

    client: httpx.AsyncClient
    csrf: str = ""

    async def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return await self.client.get(path, **kwargs)

    async def post(self, path: str, data: dict[str, Any] | None = None, *, csrf: str | None = None) -> httpx.Response:
        """POST a form with the session's CSRF token (or ``csrf`` instead, e.g. a wrong one or "")."""
        form = dict(data or {})
        token = self.csrf if csrf is None else csrf
        if token:
            form["csrf_token"] = token
        return await self.client.post(path, data=form)

    async def sign_in(self, username: str, password: str, *, next_path: str = "/") -> httpx.Response:
        page = await self.client.get("/login")
        assert page.status_code == 200
        response = await self.client.post(
            "/login",
            data={"username": username, "password": password, "csrf_token": csrf_in(page.text), "next": next_path},
        )
        if response.status_code == 303:
            home = await self.client.get("/")
            assert home.status_code == 200, home.text
            self.csrf = csrf_in(home.text)
        return response


OpenBrowser = Callable[..., Awaitable[Browser]]


@pytest_asyncio.fixture(loop_scope="session")
async def open_browser(app: FastAPI) -> AsyncIterator[OpenBrowser]:
    """Open a fresh browser; signed in as ``username`` unless it is None."""
    clients: list[httpx.AsyncClient] = []

    async def _open(username: str | None = None, password: str = "user-password-1") -> Browser:
        transport = httpx.ASGITransport(app=app, client=("127.0.0.1", 50000 + len(clients)))
        client = httpx.AsyncClient(transport=transport, base_url="http://testserver")
        clients.append(client)
        browser = Browser(client)
        if username is not None:
            response = await browser.sign_in(username, password)
            assert response.status_code == 303, response.text
        return browser

    yield _open
    for client in clients:
        await client.aclose()


@pytest_asyncio.fixture(loop_scope="session")
async def admin(open_browser: OpenBrowser) -> Browser:
    return await open_browser("admin", ADMIN_PASSWORD)
