"""Whose address the login limiter counts, on a real `aicenter up`: the socket peer, unless it is a trusted proxy.

uvicorn on its own trusts X-Forwarded-For from 127.0.0.1, which on a shared host is every local user and every
job; the server must ignore the header unless AICENTER_TRUSTED_PROXIES names the peer.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from tests.support.servers import Server
from tests.support.settings import ADMIN_PASSWORD

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _login(url: str, password: str, forwarded_for: str) -> int:
    r = httpx.post(
        f"{url}/api/v1/auth/login",
        json={"username": "admin", "password": password},
        headers={"X-Forwarded-For": forwarded_for},
    )
    return r.status_code


def _fail_five_times(url: str) -> None:
    """Five wrong passwords (the default limit), each claiming to come from a different address."""
    for n in range(5):
        assert _login(url, "wrong-password", f"203.0.113.{n + 1}") == 401


def test_forwarded_for_from_an_untrusted_peer_is_ignored(tmp_path: Path) -> None:
    server = Server(tmp_path / "home").start()
    try:
        _fail_five_times(server.url)
        # All five counted against 127.0.0.1, the real peer: a sixth claimed address does not get in.
        assert _login(server.url, ADMIN_PASSWORD, "198.51.100.9") == 429
    finally:
        server.stop()


def test_forwarded_for_from_a_trusted_proxy_names_the_client(tmp_path: Path) -> None:
    server = Server(tmp_path / "home", env={"AICENTER_TRUSTED_PROXIES": '["127.0.0.0/8"]'}).start()
    try:
        _fail_five_times(server.url)  # five clients behind the proxy, one failure each
        assert _login(server.url, ADMIN_PASSWORD, "198.51.100.9") == 200
        for _ in range(4):
            assert _login(server.url, "wrong-password", "203.0.113.1") == 401
        # 203.0.113.1 has failed five times now; a forged hop left of it (what the client wrote) changes nothing.
        assert _login(server.url, ADMIN_PASSWORD, "198.51.100.7, 203.0.113.1") == 429
    finally:
        server.stop()
