"""Billing in a real browser: a platform admin recharges a workspace through the form (a bad amount is shown on
the form and records nothing), the recharge appears in its recharge records and in the member's balance."""

from __future__ import annotations

from typing import Any

import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server

pytestmark = [pytest.mark.e2e, pytest.mark.browser, pytest.mark.slow]


def test_admin_recharges_through_the_form(server: Server, browser_page: Any) -> None:
    base = server.url
    with Client(base) as api:
        api.login("admin", ADMIN_PASSWORD)
        ws = api.me().default_workspace_id
        assert ws is not None
    page = browser_page
    page.goto(f"{base}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")
    page.click("[data-testid=nav-billing]")
    page.click("[data-testid=billing-admin-link]")
    page.goto(f"{base}/billing/workspaces/{ws}")

    page.fill("#billing-entry-amount", "-3")
    page.fill("#billing-entry-reason", "browser top-up")
    with page.expect_navigation():
        page.click("[data-testid=billing-entry-submit]")
    assert "more than 0" in page.inner_text("[data-testid=billing-entry-amount-error]")

    page.fill("#billing-entry-amount", "12.34")
    with page.expect_navigation():
        page.click("[data-testid=billing-entry-submit]")
    assert "Recharge of 12.34 coins recorded." in page.inner_text("[data-testid=flash]")
    rows = page.locator("[data-testid=billing-entry]")
    assert rows.count() == 1
    assert "browser top-up" in rows.first.inner_text()
    page.goto(f"{base}/billing")
    row = page.locator(f"[data-testid=billing-account][data-workspace-id='{ws}']")
    assert row.locator("[data-testid=billing-balance]").inner_text() == "12.34"
    with Client(base) as api:
        api.login("admin", ADMIN_PASSWORD)
        assert str(api.balance(ws).balance) == "12.34"
