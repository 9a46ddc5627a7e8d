"""The usage report page in headless Chromium: the chart draws one line per group over the report's periods
(rollups seeded into the server's own database), and the CSV link downloads the table's numbers."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import insert, select

from aicenter.db.engine import Database
from aicenter.db.models import BillingRollup, User
from tests.e2e.conftest import ADMIN_PASSWORD, CHROMIUM_ARGS, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]


@pytest.fixture(autouse=True)
def _clean_database() -> None:
    """Overrides the shared reset (see test_console_charts_browser.py): Playwright's loop owns this thread."""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "home", env={"AICENTER_METRICS_SAMPLE_INTERVAL_S": "0"}).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


def _seed(server: Server) -> None:
    async def write() -> None:
        db = Database(f"sqlite+aiosqlite:///{server.home / 'aicenter.db'}")
        try:
            async with db.write() as session:
                user_id, ws = (
                    await session.execute(select(User.id, User.default_workspace_id).where(User.username == "admin"))
                ).one()
                for day, kind, cents in [
                    (date(2026, 1, 10), "train", 1200),
                    (date(2026, 2, 10), "train", 800),
                    (date(2026, 2, 11), "notebook", 300),
                    (date(2026, 3, 1), "service", 450),
                ]:
                    await session.execute(
                        insert(BillingRollup).values(
                            day=day,
                            workspace_id=ws,
                            user_id=user_id,
                            kind=kind,
                            spec_name="cpu-4",
                            gpu_type="",
                            microhours=cents * 10_000,
                            cents=cents,
                            entries=1,
                        )
                    )
        finally:
            await db.dispose()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result(timeout=60)


def test_the_report_chart_draws_a_line_per_group_and_the_csv_downloads(
    server: Server, chromium_path: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import sync_playwright

    _seed(server)
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        try:
            context = chromium.new_context(viewport={"width": 1280, "height": 900}, accept_downloads=True)
            context.set_default_timeout(15_000)
            tab: Any = context.new_page()
            tab.goto(f"{server.url}/login")
            tab.fill("#login-username", "admin")
            tab.fill("#login-password", ADMIN_PASSWORD)
            with tab.expect_navigation():
                tab.click("#login-submit")
            tab.click("[data-testid=nav-billing-reports]")
            tab.select_option("#billing-report-group-by", "kind")
            tab.fill("#billing-report-from", "2026-01-01")
            tab.fill("#billing-report-to", "2026-04-01")
            with tab.expect_navigation():
                tab.click("[data-testid=billing-report-submit]")
            chart = tab.locator("[data-testid=billing-chart]")
            chart.locator("[data-testid=chart-line]").first.wait_for(state="attached")
            assert chart.locator("[data-testid=chart-line]").count() == 3  # notebook, service, train
            assert tab.locator("[data-testid=billing-report-row]").count() == 4
            tab.screenshot(path=str(tmp_path / "billing-reports.png"), full_page=True)
            with tab.expect_download() as info:
                tab.click("[data-testid=billing-report-csv]")
            lines = Path(info.value.path()).read_text().splitlines()
            assert lines[0] == "period_start,kind,machine_hours,amount,entries"
            assert "2026-02-01,notebook,3.000000,3.00,1" in lines
        finally:
            chromium.close()
