"""Every console chart in headless Chromium, on one ``aicenter up`` and one browser for the whole module.

The job page draws a chart per reported metric and adds the points a running job reports; the compare page
overlays several runs; the home, node and job pages draw the series the samplers write (seeded here with
record_samples into the server's own database), show "no samples yet" / "no accelerator telemetry" where there
are none, ask the series API again for the range the picker chooses, and print readable units.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from aicenter.client import Client
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from tests.e2e.conftest import ADMIN_PASSWORD, CHROMIUM_ARGS, Server

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# Five steps, a pause while the page is open, five more: the chart must grow without a reload.
TRAIN = (
    "import time\n"
    "from aicenter.runtime import report\n"
    "for s in range(1, 6): report(step=s, loss=1.0 / s, accuracy=s / 10)\n"
    "time.sleep(4)\n"
    "for s in range(6, 11): report(step=s, loss=1.0 / s, accuracy=s / 10)\n"
)
# A second run to compare with: a slower loss, no pause.
OTHER = "from aicenter.runtime import report\nfor s in range(1, 11): report(step=s, loss=2.0 / s)\n"
GiB = 2**30


def _spec(name: str, command: str) -> dict[str, Any]:
    return {
        "name": name,
        "tasks": [{"name": "worker", "resources": {"cpu": "500m", "memory": "256Mi"}, "command": command}],
    }


@pytest.fixture(autouse=True)
def _clean_database() -> None:
    """Overrides the shared reset: this module's server keeps its own database, and the shared (async) fixture
    would start an event loop while Playwright's, open for the whole module, runs in this thread."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("charts") / "home").start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


@pytest.fixture(scope="module")
def page(server: Server, chromium_path: Path) -> Iterator[Any]:
    """One headless Chromium page signed in as the admin, for every test of the module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            context.set_default_timeout(15_000)
            tab = context.new_page()
            tab.goto(f"{server.url}/login")
            tab.fill("#login-username", "admin")
            tab.fill("#login-password", ADMIN_PASSWORD)
            with tab.expect_navigation():
                tab.click("#login-submit")
            yield tab
        finally:
            browser.close()


@pytest.fixture(scope="module")
def api(server: Server) -> Iterator[Client]:
    with Client(server.url) as client:
        client.login("admin", ADMIN_PASSWORD)
        yield client


def _line_points(d: str | None) -> int:
    """How many points an SVG path's ``d`` (M x,y L x,y ...) draws."""
    return len(re.findall(r"[ML]", d or ""))


def test_the_job_page_charts_each_metric_and_follows_a_running_job(server: Server, page: Any, api: Client) -> None:
    job_id = api.submit_job(_spec("charted", f"python -c '{TRAIN}'")).id
    quiet = api.submit_job(_spec("quiet", "true")).id

    page.goto(f"{server.url}/jobs/{job_id}")
    page.locator("[data-testid=metric-chart][data-metric=loss]").wait_for(timeout=60_000)
    page.locator("[data-testid=metric-chart][data-metric=loss][data-points='10']").wait_for(timeout=60_000)
    charts = page.locator("[data-testid=metric-chart]")
    assert [charts.nth(i).get_attribute("data-metric") for i in range(charts.count())] == ["accuracy", "loss"]
    loss = page.locator("[data-testid=metric-chart][data-metric=loss]")
    assert loss.locator("[data-testid=chart-latest]").text_content() == "0.1"
    assert _line_points(loss.locator("[data-testid=chart-line]").get_attribute("d")) == 10
    ticks = loss.locator("[data-testid=chart-xtick]").all_text_contents()
    assert ticks[0] == "step 1"
    assert ticks[-1] == "step 10"
    assert page.locator("[data-testid=metrics-state]").inner_text().startswith("Replica worker-0")

    page.goto(f"{server.url}/jobs/{quiet}")
    page.locator("[data-testid=job-status][data-status=succeeded]").wait_for(timeout=60_000)
    page.reload()
    state = page.locator("[data-testid=metrics-state]")
    state.filter(has_text="reported no metrics").wait_for(timeout=15_000)
    assert page.locator("[data-testid=metric-chart]").count() == 0


def test_the_compare_page_overlays_runs_from_the_jobs_list(server: Server, page: Any, api: Client) -> None:
    first = api.submit_job(_spec("run-a", f"python -c '{OTHER}'")).id
    second = api.submit_job(_spec("run-b", f"python -c '{OTHER.replace('2.0', '3.0')}'")).id
    for job_id in (first, second):
        page.goto(f"{server.url}/jobs/{job_id}")
        page.locator("[data-testid=job-status][data-status=succeeded]").wait_for(timeout=60_000)

    page.goto(f"{server.url}/jobs")
    page.check(f"[data-testid=compare-{first}]")
    page.check(f"[data-testid=compare-{second}]")
    with page.expect_navigation():
        page.click("[data-testid=compare-submit]")
    assert "/jobs/compare" in page.url
    loss = page.locator("[data-testid=metric-chart][data-metric=loss]")
    loss.locator("[data-testid=chart-line]").nth(1).wait_for()
    lines = loss.locator("[data-testid=chart-line]")
    assert lines.count() == 2
    assert {lines.nth(i).get_attribute("data-series") for i in range(2)} == {f"#{first} run-a", f"#{second} run-b"}
    assert all(_line_points(lines.nth(i).get_attribute("d")) == 10 for i in range(2))
    legend = loss.locator("[data-testid=chart-legend-item]").all_text_contents()
    # Each line's last value (2/10, 3/10), in the order the ids came: the list's, newest first.
    assert legend == [f"#{second} run-b 0.3", f"#{first} run-a 0.2"]
    # Hiding a line from its legend entry leaves the other one.
    loss.locator("[data-testid=chart-legend-item]").first.click()
    assert loss.locator("[data-testid=chart-line]").count() == 1
