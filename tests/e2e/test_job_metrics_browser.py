"""The job page draws a line chart per reported metric, and adds the points a running job reports."""

from __future__ import annotations

from typing import Any

import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Server

pytestmark = [pytest.mark.e2e, pytest.mark.browser]

# Five steps, a pause while the page is open, five more: the chart must grow without a reload.
TRAIN = (
    "import time\n"
    "from aicenter.runtime import report\n"
    "for s in range(1, 6): report(step=s, loss=1.0 / s, accuracy=s / 10)\n"
    "time.sleep(4)\n"
    "for s in range(6, 11): report(step=s, loss=1.0 / s, accuracy=s / 10)\n"
)


def test_the_job_page_charts_each_metric_and_follows_a_running_job(server: Server, browser_page: Any) -> None:
    with Client(server.url) as api:
        api.login("admin", ADMIN_PASSWORD)
        spec = {
            "name": "charted",
            "tasks": [
                {
                    "name": "worker",
                    "resources": {"cpu": "500m", "memory": "256Mi"},
                    "command": f"python -c '{TRAIN}'",
                }
            ],
        }
        job_id = api.submit_job(spec).id
        quiet = api.submit_job({**spec, "name": "quiet", "tasks": [{**spec["tasks"][0], "command": "true"}]}).id

    page = browser_page
    page.goto(f"{server.url}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")

    page.goto(f"{server.url}/jobs/{job_id}")
    page.locator("[data-testid=metric-chart][data-metric=loss]").wait_for(timeout=60_000)
    page.locator("[data-testid=metric-chart][data-metric=loss][data-points='10']").wait_for(timeout=60_000)
    charts = page.locator("[data-testid=metric-chart]")
    assert [charts.nth(i).get_attribute("data-metric") for i in range(charts.count())] == ["accuracy", "loss"]
    loss = page.locator("[data-testid=metric-chart][data-metric=loss]")
    assert loss.locator("[data-testid=metric-latest]").text_content() == "0.1"
    assert len(loss.locator("polyline").get_attribute("points").split()) == 10
    assert "step 10" in (loss.text_content() or "")
    assert page.locator("[data-testid=metrics-state]").inner_text().startswith("Replica worker-0")

    page.goto(f"{server.url}/jobs/{quiet}")
    page.locator("[data-testid=job-status][data-status=succeeded]").wait_for(timeout=60_000)
    page.reload()
    state = page.locator("[data-testid=metrics-state]")
    state.filter(has_text="reported no metrics").wait_for(timeout=15_000)
    assert page.locator("[data-testid=metric-chart]").count() == 0
