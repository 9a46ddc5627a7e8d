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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from aicenter.client import Client
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from tests.e2e.conftest import ADMIN_PASSWORD, CHROMIUM_ARGS, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]  # a browser journey

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
    # No sampler: its real readings of this host would join the seeded series the tests count and read.
    srv = Server(tmp_path_factory.mktemp("charts") / "home", env={"AICENTER_METRICS_SAMPLE_INTERVAL_S": "0"}).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


@pytest.fixture(scope="module")
def browser(chromium_path: Path) -> Iterator[Any]:
    """One headless Chromium for every test of the module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


def _signed_in(browser: Any, server: Server, username: str, password: str) -> Any:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(15_000)
    tab = context.new_page()
    tab.goto(f"{server.url}/login")
    tab.fill("#login-username", username)
    tab.fill("#login-password", password)
    with tab.expect_navigation():
        tab.click("#login-submit")
    return tab


@pytest.fixture(scope="module")
def page(server: Server, browser: Any) -> Any:
    """The admin's page, shared by the module's tests."""
    return _signed_in(browser, server, "admin", ADMIN_PASSWORD)


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


# (value, unit) -> what a chart prints: binary bytes, percentages of ratios, durations, SI counts.
UNITS = [
    (0, "bytes", "0 B"),
    (1536, "bytes", "1.5 KiB"),
    (3 * GiB, "bytes", "3 GiB"),
    (12.5 * 2**20, "bytes_per_second", "12.5 MiB/s"),
    (0.423, "ratio", "42.3%"),
    (1, "ratio", "100%"),
    (0.25, "seconds", "250 ms"),
    (90, "seconds", "90 s"),
    (5400, "seconds", "90 min"),
    (1, "cores", "1 core"),
    (1.5, "cores", "1.5 cores"),
    (71, "celsius", "71 °C"),
    (250, "watts", "250 W"),
    (12400, "", "12.4k"),
    (3_200_000, "", "3.2M"),
    (0.1, "", "0.1"),
]


def test_units_read_as_a_person_writes_them(server: Server, page: Any) -> None:
    page.goto(f"{server.url}/")
    page.wait_for_function("() => !!window.AicenterCharts")
    got = page.evaluate("cases => cases.map(c => window.AicenterCharts.format(c[0], c[1]))", [u[:2] for u in UNITS])
    assert got == [u[2] for u in UNITS]


def _seed(server: Server, samples: list[Any]) -> None:
    """record_samples into the server's own SQLite database, in a thread of its own: Playwright's event loop runs
    in this one for the whole module."""
    from aicenter.services.monitoring import record_samples

    async def write() -> None:
        db = Database(f"sqlite+aiosqlite:///{server.home / 'aicenter.db'}")
        try:
            async with db.write() as session:
                await record_samples(session, samples)
        finally:
            await db.dispose()

    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, write()).result(timeout=60)


def _drawn(page: Any, key: str) -> Any:
    chart = page.locator(f"[data-testid=chart-{key}]")
    chart.locator("[data-testid=chart-line]").first.wait_for(state="attached")  # a flat line has no height
    assert chart.get_attribute("data-state") == "drawn"
    return chart


def _empty(page: Any, key: str, text: str) -> None:
    chart = page.locator(f"[data-testid=chart-{key}][data-state=empty]")
    chart.wait_for()
    assert chart.locator("[data-testid=chart-empty]").inner_text() == text
    assert chart.locator("[data-testid=chart-line]").count() == 0


def test_home_node_and_job_pages_chart_the_series_with_readable_units(server: Server, page: Any, api: Client) -> None:
    from aicenter.services.monitoring import Sample

    node = next(iter(api.list_nodes()))
    job = api.submit_job(_spec("sampled", "true"))
    now = utcnow()
    on_node = {"node": node.name}
    replica = {"task": "worker", "replica": "0"}
    minutes = range(20)  # one sample a minute for the last 20 minutes
    samples = [
        *(
            Sample("node.cpu_utilization", now - timedelta(minutes=m), 0.2 + m / 50, on_node, node_id=node.id)
            for m in minutes
        ),
        # Three days old: only the 7-day range reaches it.
        Sample("node.cpu_utilization", now - timedelta(days=3), 0.9, on_node, node_id=node.id),
        *(
            Sample("node.memory_used_bytes", now - timedelta(minutes=m), 3 * GiB, on_node, node_id=node.id)
            for m in minutes
        ),
        *(
            Sample("node.memory_total_bytes", now - timedelta(minutes=m), 16 * GiB, on_node, node_id=node.id)
            for m in minutes
        ),
        *(
            Sample(
                name,
                now - timedelta(minutes=m),
                value,
                replica,
                workspace_id=job.workspace_id,
                job_id=job.id,
                node_id=node.id,
            )
            for m in minutes
            for name, value in (("replica.cpu_cores", 1.5), ("replica.memory_bytes", 300 * 2**20))
        ),
    ]
    _seed(server, samples)

    # Home: the cluster's CPU over the last hour, as a percentage; memory in GiB; no accelerators here.
    page.goto(f"{server.url}/")
    cpu = _drawn(page, "cluster-cpu")
    assert _line_points(cpu.locator("[data-testid=chart-line]").get_attribute("d")) == 20
    yticks = cpu.locator("[data-testid=chart-ytick]").all_text_contents()
    assert yticks[0] == "0%"
    assert yticks[-1] == "100%"
    memory = _drawn(page, "cluster-memory")
    assert memory.locator("[data-testid=chart-legend-item]").all_text_contents() == ["used 3 GiB", "total 16 GiB"]
    assert any(t.endswith(" GiB") for t in memory.locator("[data-testid=chart-ytick]").all_text_contents())
    _empty(page, "cluster-accelerators", "no accelerator telemetry")

    # Hovering shows the values under the pointer, with their unit and time.
    box = cpu.locator("svg").bounding_box()
    page.mouse.move(box["x"] + box["width"] - 20, box["y"] + box["height"] / 2)
    tip = cpu.locator("[data-testid=chart-tooltip]")
    tip.wait_for()
    assert re.search(r"all nodes: \d+(\.\d+)?%", tip.inner_text())
    assert "UTC" in tip.inner_text()

    # The range picker asks the series API again, for seven days at an hourly step; the old sample shows up.
    with page.expect_request(lambda r: "/api/v1/series" in r.url and "node.cpu_utilization" in r.url) as asked:
        page.click("[data-testid=range-7d]")
    query = parse_qs(urlparse(asked.value.url).query)
    span = datetime.fromisoformat(query["end"][0]) - datetime.fromisoformat(query["start"][0])
    assert span == timedelta(days=7)
    assert query["step"] == ["3600"]
    assert "range=7d" in page.url
    # Hourly means: the 20 recent samples fall in one or two hours, the old one in its own.
    page.wait_for_function(
        "() => { const c = document.querySelector('[data-testid=chart-cluster-cpu]');"
        " return !c.hasAttribute('data-loading') && ['2', '3'].includes(c.getAttribute('data-points')); }"
    )
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d", cpu.locator("[data-testid=chart-xtick]").first.text_content() or "")
    assert page.locator("[data-testid=range-7d]").get_attribute("aria-current") == "true"
    page.select_option("[data-testid=auto-refresh]", "15")
    assert "refresh=15" in page.url
    # A refresh tick (called here rather than waited for) swaps in the server's fresh tiles and tables.
    page.evaluate("document.querySelector('[data-testid=tile-running]').setAttribute('data-stale', '')")
    page.evaluate("window.AicenterCharts.refresh()")
    page.locator("[data-testid=tile-running]:not([data-stale])").wait_for()

    # Node page: utilization over time; "no accelerator telemetry" for a node without NVML; disk never sampled.
    page.goto(f"{server.url}/nodes/{node.id}")
    assert _line_points(_drawn(page, "node-cpu").locator("[data-testid=chart-line]").get_attribute("d")) == 20
    node_memory = _drawn(page, "node-memory")
    assert node_memory.locator("[data-testid=chart-legend-item]").all_text_contents() == ["used 3 GiB", "total 16 GiB"]
    _empty(page, "accelerator-utilization", "no accelerator telemetry")
    _empty(page, "node-disk", "no samples yet")

    # Job page: resource use per replica, in cores and MiB.
    page.goto(f"{server.url}/jobs/{job.id}")
    replica_cpu = _drawn(page, "replica-cpu")
    assert replica_cpu.locator("[data-testid=chart-legend-item]").all_text_contents() == ["worker-0 1.5 cores"]
    assert replica_cpu.locator("[data-testid=chart-latest]").inner_text() == "1.5 cores"
    replica_memory = _drawn(page, "replica-memory")
    assert replica_memory.locator("[data-testid=chart-latest]").inner_text() == "300 MiB"
    _empty(page, "replica-accelerator-memory", "no accelerator memory reported")


def test_a_member_sees_the_cluster_charts_and_only_their_workspaces(server: Server, browser: Any, api: Client) -> None:
    from aicenter.services.monitoring import Sample

    node = next(iter(api.list_nodes()))
    now = utcnow()
    _seed(
        server,
        [
            Sample("node.cpu_utilization", now - timedelta(minutes=m), 0.5, {"node": node.name}, node_id=node.id)
            for m in range(5)
        ],
    )
    api.create_user("mia", "mia-password-1")
    tab = _signed_in(browser, server, "mia", "mia-password-1")
    try:
        tab.goto(f"{server.url}/")
        assert tab.locator("[data-testid=overview-scope]").inner_text() == "Your workspaces now"
        _drawn(tab, "cluster-cpu")  # cluster series are every user's
        assert (
            tab.locator("[data-testid=tile-running] .tile-value").inner_text() == "0"
        )  # the admin's jobs are not hers
        assert tab.locator("[data-testid=overview-nodes-down]").count() == 0
        assert tab.locator("[data-testid=workspace-row]").count() == 0
    finally:
        tab.context.close()
