"""Test data through the real services and API, so that tests exercise the same paths as users."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from aicenter.db.engine import Database
from aicenter.services import tenancy
from aicenter.services.context import Actor
from tests.support.settings import ADMIN_PASSWORD

ADMIN = Actor.system("test-admin")


@dataclass
class Login:
    user_id: int
    username: str
    token: str

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}


async def login(client: httpx.AsyncClient, username: str, password: str) -> Login:
    response = await client.post("/api/v1/auth/login", json={"username": username, "password": password})
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return Login(body["user"]["id"], username, body["token"])


async def admin_login(client: httpx.AsyncClient) -> Login:
    return await login(client, "admin", ADMIN_PASSWORD)


async def make_user(
    db: Database, client: httpx.AsyncClient, username: str, *, password: str = "user-password-1", admin: bool = False
) -> Login:
    """Create a user (with a default workspace) through the service and log them in through the API."""
    async with db.write() as session:
        await tenancy.create_user(session, ADMIN, username=username, password=password, is_platform_admin=admin)
    return await login(client, username, password)
