"""Console layout in a real browser: a version's manifest hash (64 hex digits, no break point) stays inside its
card instead of running past its edge."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]


def test_the_manifest_hash_stays_inside_its_card(server: Server, browser_page: Any, tmp_path: Path) -> None:
    base = server.url
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("a\n")
    with Client(base) as api:
        api.login("admin", ADMIN_PASSWORD)
        version = api.push("dataset", tmp_path / "data", name="hashed")
    page = browser_page
    page.set_viewport_size({"width": 1024, "height": 800})  # two cards side by side, each a half
    page.goto(f"{base}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")
    page.goto(f"{base}/datasets/{version.item_id}/versions/{version.number}")
    hash_box = page.locator("[data-testid=version-manifest]").bounding_box()
    card_box = page.locator("[data-testid=version-facts]").locator("xpath=..").bounding_box()
    assert hash_box is not None
    assert card_box is not None
    assert hash_box["x"] + hash_box["width"] <= card_box["x"] + card_box["width"] + 0.5, (hash_box, card_box)
