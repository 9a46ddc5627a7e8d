"""``aicenter top --once`` against a real ``aicenter up`` whose sampler runs every second: the node's CPU and
memory used vs allocated, "no accelerator telemetry" on this GPU-less host, the job counts and a running job among
the top jobs with its sampled memory, and the job's console page charting those same samples in Chromium while it
runs; a bad option is one line, not a traceback."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server, signed_in

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e, pytest.mark.browser]

SPEC = """\
name: topjob
tasks:
  - name: worker
    replicas: 1
    resources: {cpu: 500m, memory: 128Mi}
    command: sleep 120
"""
DEADLINE_S = 60.0


@pytest.fixture
def sampled_server(tmp_path: Path) -> Server:
    srv = Server(tmp_path / "home", env={"AICENTER_METRICS_SAMPLE_INTERVAL_S": "1"}).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


def test_top_once_shows_nodes_jobs_and_top_jobs(
    sampled_server: Server, cli: Cli, tmp_path: Path, browser_page: Any
) -> None:
    cli.run("login", "--server", sampled_server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    job_id = json.loads(cli.run("job", "submit", str(spec), "-o", "json").stdout)["id"]

    deadline = time.monotonic() + DEADLINE_S
    frame = ""
    while time.monotonic() < deadline:
        frame = cli.run("top", "--once").stdout
        # Running, with a sampled memory in a unit: a replica's first sample may read its group still empty.
        if re.search(rf"^{job_id}\s+topjob\s+running\s.*\d(\.\d+)?(Ki|Mi)\b", frame, re.MULTILINE):
            break
        time.sleep(0.5)
    else:
        pytest.fail(f"job {job_id} never appeared among the top jobs:\n{frame}")

    assert "jobs: running 1  queued 0  failed (24h) 0" in frame
    node_lines = [line for line in frame.splitlines() if " ready " in line]
    assert len(node_lines) == 1, frame
    node = node_lines[0]
    assert re.search(r"\s\d+%\s", node), node  # CPU used, a percentage
    assert "500m/" in node  # CPU allocated: the job's request, of the node's capacity
    assert "128Mi/" in node  # memory allocated
    assert "Gi/" in node  # memory used of total, readable units
    assert "no accelerator telemetry" in node
    job_line = next(line for line in frame.splitlines() if line.startswith(f"{job_id} "))
    assert re.search(r"\d+(\.\d+)?(Ki|Mi)\b", job_line), job_line  # the replica's sampled memory

    # The running job's page draws its resource use from the same samples: the sampler's, not seeded ones.
    page = browser_page
    page.goto(f"{sampled_server.url}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")
    page.goto(f"{sampled_server.url}/jobs/{job_id}")
    for key in ("replica-memory", "replica-cpu"):
        chart = page.locator(f"[data-testid=chart-{key}][data-state=drawn]")
        chart.wait_for(timeout=30_000)
        assert chart.locator("[data-testid=chart-legend-item]").first.inner_text().startswith("worker-0 ")
    memory_legend = page.locator("[data-testid=chart-replica-memory] [data-testid=chart-legend-item]").first
    assert re.search(r"\d+(\.\d+)? (KiB|MiB)$", memory_legend.inner_text())

    # A member: the cluster's use, none of the admin's jobs, no allocation (the node list is admins' only).
    cli.run("user", "create", "bob", "--password-stdin", stdin="bob-Passw0rd-1")
    bob = signed_in(tmp_path, sampled_server, "bob", "bob-Passw0rd-1")
    member = bob.run("top", "--once").stdout
    assert "jobs: running 0  queued 0  failed (24h) 0" in member
    assert "no running jobs" in member
    assert "(allocation columns: platform admins only)" in member
    assert re.search(r"^\S+\s+-\s+\d+%\s+-\s+\S+Gi/\S+Gi\s+-\s+none \(no accelerator telemetry\)", member, re.M), member

    cli.run("job", "stop", str(job_id))
    bad = cli.run("top", "--interval", "0", check=False)
    assert bad.returncode == 2
    assert "Traceback" not in bad.stderr
    assert "--interval" in bad.stderr
