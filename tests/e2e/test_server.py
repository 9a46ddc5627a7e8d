"""`aicenter up` as a user runs it: it serves the API and the console, stops cleanly on Ctrl-C, and a second
start on the same home keeps every piece of data."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def test_up_serves_the_api_and_the_console(server: Server) -> None:
    health = httpx.get(f"{server.url}/api/v1/health")
    assert health.status_code == 200
    assert health.json()["status"] == "ok"
    assert health.headers.get("x-request-id")

    document = httpx.get(f"{server.url}/api/openapi.json")
    assert document.status_code == 200
    assert "/api/v1/auth/login" in document.json()["paths"]
    assert httpx.get(f"{server.url}/api/docs").status_code == 200

    anonymous = httpx.get(f"{server.url}/api/v1/users/me")
    assert anonymous.status_code == 401
    assert anonymous.json()["error"]["code"] == "unauthenticated"

    home = httpx.get(f"{server.url}/", follow_redirects=True)
    assert home.status_code == 200
    assert 'id="login-username"' in home.text, "an anonymous visit to the console should land on the login page"
    assert "https://" not in home.text.split("<body", 1)[0], "the console loads assets from outside the server"

    with Client(server.url) as api:
        me = api.login("admin", ADMIN_PASSWORD).user
        assert me.is_platform_admin
        nodes = list(api.list_nodes())
        assert len(nodes) == 1, "aicenter up registers this host as a node"
        assert nodes[0].cpu_milli > 0

    assert server.stop() == 0
    assert "Created platform admin" not in server.output, "a password from the environment must not be printed"


def test_restart_on_the_same_home_keeps_all_data(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = Server(home).start()
    try:
        with Client(first.url) as api:
            api.login("admin", ADMIN_PASSWORD)
            bob = api.create_user("bob", "bob-Passw0rd-1")
            pool = api.create_pool("a100", selector={"gpu": "a100"})
            workspace = api.create_workspace("vision", description="restart test")
            api.set_quota(workspace.id, pool.id, maximum={"cpu": "16", "memory": "128Gi"})
            api.add_member(workspace.id, user_id=bob.id)
            spec = api.create_spec("cpu-8", cpu="8", memory="64Gi", price_per_hour="2.5", pool_id=pool.id)
            token = api.create_token("kept")
    finally:
        first.stop()

    second = Server(home).start()
    try:
        with Client(second.url, token=token.token) as api:
            assert api.me().username == "admin", "an API token did not survive the restart"
            assert api.get_workspace(workspace.id).description == "restart test"
            assert {m.username for m in api.list_members(workspace.id)} >= {"bob"}
            assert [q.pool_id for q in api.list_quotas(workspace.id)].count(pool.id) == 1
            assert api.get_spec(spec.id).name == "cpu-8"
            assert len(list(api.list_nodes())) == 1, "the host was registered twice"
        with Client(second.url) as api:
            assert api.login("bob", "bob-Passw0rd-1").user.id == bob.id
    finally:
        second.stop()
