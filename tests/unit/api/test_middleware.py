"""The client address behind trusted proxies, and HSTS, on the app as built (no database: the requests
below are answered before any route touches one)."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import httpx
import pytest
from pydantic import ValidationError
from starlette.types import Receive, Scope, Send

from aicenter.api.middleware import ClientAddressMiddleware
from aicenter.app import create_app
from tests.support.settings import make_settings

PROXIES = [ipaddress.ip_network("10.9.0.0/16"), ipaddress.ip_network("fd00::1")]


async def _seen_client(peer: str, forwarded_for: list[str]) -> str:
    """The client address an app behind ClientAddressMiddleware sees for a request from ``peer``."""
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(scope["client"][0])
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    transport = httpx.ASGITransport(app=ClientAddressMiddleware(app, PROXIES), client=(peer, 40000))
    headers = [("X-Forwarded-For", value) for value in forwarded_for]
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        await client.get("/", headers=headers)
    return seen[0]


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        ("192.0.2.1", ["198.51.100.7"], "192.0.2.1"),  # an untrusted peer's header is ignored
        ("10.9.0.1", [], "10.9.0.1"),  # a trusted proxy that names nobody is the client itself
        ("10.9.0.1", ["198.51.100.7"], "198.51.100.7"),
        ("10.9.0.1", ["203.0.113.5, 198.51.100.7"], "198.51.100.7"),  # left of the nearest hop: client-written
        ("10.9.0.1", ["198.51.100.7, 10.9.3.3"], "198.51.100.7"),  # a chain of trusted proxies is skipped
        ("10.9.0.1", ["203.0.113.5", "198.51.100.7"], "198.51.100.7"),  # a repeated header counts as one list
        ("10.9.0.1", ["10.9.2.2"], "10.9.2.2"),  # every hop a proxy: the first one made the request
        ("10.9.0.1", ["not-an-address"], "10.9.0.1"),  # junk names nobody
        ("fd00::1", ["2001:db8::7"], "2001:db8::7"),
    ],
)
async def test_the_client_is_the_nearest_hop_that_is_not_a_trusted_proxy(
    peer: str, forwarded_for: list[str], client: str
) -> None:
    assert await _seen_client(peer, forwarded_for) == client


def test_trusted_proxies_must_be_addresses_or_networks(tmp_path: Path) -> None:
    assert make_settings(tmp_path, trusted_proxies=["10.0.0.1", "10.1.0.0/16"]).trusted_proxies
    with pytest.raises(ValidationError, match=r"'proxy\.example' is neither an IP address nor a network"):
        make_settings(tmp_path, trusted_proxies=["proxy.example"])


@pytest.mark.parametrize(
    ("public_url", "hsts"),
    [
        ("https://ai.example.org", "max-age=31536000; includeSubDomains"),
        ("http://ai.example.org", None),
        (None, None),
    ],
)
async def test_hsts_is_sent_exactly_when_the_public_url_is_https(
    tmp_path: Path, public_url: str | None, hsts: str | None
) -> None:
    app = create_app(make_settings(tmp_path, public_url=public_url), run_controllers=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        for response in (
            await client.get("/api/v1/no-such-thing"),  # an error
            await client.get("/api/v1/users/me"),  # a refusal (401)
            await client.get("/login"),  # a console page
        ):
            assert response.headers.get("strict-transport-security") == hsts, response.request.url
