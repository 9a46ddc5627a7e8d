"""A real Prometheus (Debian's package) scrapes a real `aicenter up` with the scraper token and answers PromQL
over its metrics: the names, types and text format are what a Prometheus server accepts, not only what the
Python parser reads."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.dashboards import concrete, dashboards, expressions
from tests.support.servers import Server, free_port

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PROMETHEUS = Path("/usr/bin/prometheus")
TOKEN = "prometheus-scrape-token-0123"
DEADLINE_S = 60.0  # generous on 2 shared cores; never asserted as a duration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    srv = Server(tmp_path_factory.mktemp("prom") / "home", env={"AICENTER_METRICS_TOKEN": TOKEN}).start()
    try:
        yield srv
    finally:
        srv.stop(check=False)


@pytest.fixture(scope="module")
def prometheus(server: Server, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if not PROMETHEUS.exists():
        pytest.skip("Debian's prometheus is not installed (apt-get install -y --no-install-recommends prometheus)")
    work = tmp_path_factory.mktemp("prometheus")
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "scrape_configs": [
            {
                "job_name": "aicenter",
                "metrics_path": "/metrics",
                "authorization": {"credentials": TOKEN},
                "static_configs": [{"targets": [f"127.0.0.1:{server.port}"]}],
            }
        ],
    }
    (work / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
    port = free_port()
    log = (work / "prometheus.log").open("w")
    proc = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()  # by pid
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def _query(prometheus: str, promql: str) -> list[dict[str, Any]]:
    """The result vector of an instant query, polled until non-empty."""
    deadline = time.monotonic() + DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            r = httpx.get(f"{prometheus}/api/v1/query", params={"query": promql}, timeout=5)
            last = r.text
            if r.status_code == 200 and r.json()["data"]["result"]:
                result: list[dict[str, Any]] = r.json()["data"]["result"]
                return result
        except httpx.TransportError as exc:  # not listening yet
            last = exc
        time.sleep(0.5)
    pytest.fail(f"no answer to {promql!r} within {DEADLINE_S} s: {last}")


def test_prometheus_scrapes_and_answers_promql(server: Server, prometheus: str) -> None:
    info = _query(prometheus, "aicenter_build_info")
    assert info[0]["metric"]["job"] == "aicenter"
    assert float(info[0]["value"][1]) == 1
    assert _query(prometheus, 'up{job="aicenter"} == 1')
    assert float(_query(prometheus, "sum(aicenter_nodes) >= 0")[0]["value"][1]) >= 0
    for _ in range(20):
        httpx.get(f"{server.url}/api/v1/health")
    rate = _query(prometheus, 'rate(aicenter_http_requests_total{route="/api/v1/health"}[30s]) > 0')
    assert rate[0]["metric"]["method"] == "GET"
    assert _query(
        prometheus, "histogram_quantile(0.99, sum by (le) (rate(aicenter_http_request_duration_seconds_bucket[30s])))"
    )


def test_new_families_answer_promql_and_every_dashboard_query_evaluates(server: Server, prometheus: str) -> None:
    # The server's scheduler ticks even with nothing queued: its lease is held and its cycles are timed.
    [holder] = _query(prometheus, 'aicenter_controller_lease_holder{lease="scheduler"} == 1')
    assert holder["metric"]["holder"]
    assert _query(prometheus, 'aicenter_controller_lease_held{lease="scheduler"} == 1')
    p99 = _query(
        prometheus,
        "histogram_quantile(0.99, sum by (le) (rate(aicenter_scheduler_cycle_duration_seconds_bucket[30s]))) >= 0",
    )
    assert float(p99[0]["value"][1]) >= 0
    assert _query(prometheus, "sum(aicenter_node_cpu_cores) > 0")  # `aicenter up` registers its own host
    # Every dashboard expression is one this Prometheus evaluates (a syntax check cannot see a many-to-many
    # match or a type error); an empty answer is fine (no accelerators, no services here).
    failed = {}
    with httpx.Client(base_url=prometheus, timeout=10) as http:  # one connection for ~45 queries
        for name, board in dashboards().items():
            for expr in expressions(board):
                r = http.get("/api/v1/query", params={"query": concrete(expr)})
                if r.status_code != 200 or r.json()["status"] != "success":
                    failed[f"{name}: {expr}"] = r.text
    assert not failed, failed
