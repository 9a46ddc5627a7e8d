"""A platform's first workspace, end to end: the admin sets things up in the console (headless Chromium), and a
member logs in with the CLI and lists the specs they may use."""

from __future__ import annotations

from typing import Any

import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]  # a browser journey

MEMBER_PASSWORD = "bob-Passw0rd-1"


def _submit(page: Any, form: str) -> None:
    """Submit a console form and wait for the page it leads to."""
    with page.expect_navigation():
        page.click(f"#{form}-submit")
    error = page.locator(f"[data-testid={form}-error]")
    assert error.count() == 0, f"{form}: {error.first.inner_text()}"


def _open(page: Any, toggle: str) -> None:
    """Open a collapsed "New ..." section."""
    page.click(f"[data-testid={toggle}]")


def test_admin_sets_up_a_workspace_in_the_console_and_a_member_lists_specs_with_the_cli(
    server: Server, browser_page: Any, cli: Cli
) -> None:
    page = browser_page
    base = server.url

    # The admin signs in to the console.
    page.goto(f"{base}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")
    assert page.locator("[data-testid=current-user]").is_visible(), "the admin is not signed in"

    # A user who will become a member.
    page.goto(f"{base}/users")
    _open(page, "user-create-toggle")
    page.fill("#user-create-username", "bob")
    page.fill("#user-create-password", MEMBER_PASSWORD)
    _submit(page, "user-create")

    # A pool of A100 nodes.
    page.goto(f"{base}/pools")
    _open(page, "pool-create-toggle")
    page.fill("#pool-create-name", "a100")
    page.fill("#pool-create-selector", "gpu=a100")
    _submit(page, "pool-create")

    # A spec usable only in that pool.
    page.goto(f"{base}/specs")
    _open(page, "spec-create-toggle")
    page.fill("#spec-create-name", "cpu-8")
    page.fill("#spec-create-cpu", "8")
    page.fill("#spec-create-memory", "64Gi")
    page.fill("#spec-create-price-per-hour", "2.5")
    page.select_option("#spec-create-pool-id", label="a100")
    _submit(page, "spec-create")
    assert page.locator("[data-testid=spec-row][data-name=cpu-8]").count() == 1

    # The workspace, its quota in the pool (which also grants the pool), and the member.
    page.goto(f"{base}/workspaces")
    _open(page, "workspace-create-toggle")
    page.fill("#workspace-create-name", "vision")
    _submit(page, "workspace-create")
    assert "/workspaces/" in page.url
    _open(page, "quota-toggle")
    page.select_option("#quota-pool-id", label="a100")
    page.fill("#quota-guaranteed-cpu", "8")
    page.fill("#quota-maximum-cpu", "16")
    page.fill("#quota-maximum-memory", "128Gi")
    _submit(page, "quota")
    assert page.locator("[data-testid=quota-row][data-pool=a100]").count() >= 1
    page.fill("#member-add-username", "bob")
    page.select_option("#member-add-role", "member")
    _submit(page, "member-add")
    assert page.locator("[data-testid=member-row][data-username=bob]").count() == 1

    # What the console did, read back through the SDK; and a spec in a pool the workspace may not use.
    with Client(base) as api:
        api.login("admin", ADMIN_PASSWORD)
        (workspace,) = list(api.list_workspaces(name="vision"))
        (pool,) = [p for p in api.list_pools() if p.name == "a100"]
        (quota,) = [q for q in api.list_quotas(workspace.id) if q.pool_id == pool.id]
        assert quota.maximum["cpu"] == 16_000
        assert quota.maximum["memory"] == 128 * 2**30
        hidden_pool = api.create_pool("reserved", selector={"gpu": "h100"})
        api.create_spec("hidden-spec", cpu="1", memory="1Gi", price_per_hour="1", pool_id=hidden_pool.id)

    # The member logs in with the CLI and lists the specs they may use.
    login = cli.run("login", "--server", base, "--username", "bob", "--password-stdin", stdin=MEMBER_PASSWORD + "\n")
    assert "bob" in login.stdout
    specs = cli.json("spec", "list")
    names = {s["name"] for s in specs}
    assert "cpu-8" in names, f"the member does not see the spec of the pool their workspace uses: {specs}"
    assert "hidden-spec" not in names, "the member sees a spec of a pool their workspace may not use"
    table = cli.run("spec", "list").stdout
    assert "cpu-8" in table
