"""A new admin's first pool, through the real `aicenter` command against a real `aicenter up`: a pool carved out
of this host's node leaves the node in `default` too, jobs of both pools run on it, and a job that could never
fit is refused at submit in one line naming the pool."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

SPEC = """\
name: hello
tasks:
  - resources: {cpu: 500m, memory: 128Mi}
    command: echo hello
"""
DEADLINE_S = 60.0  # generous: the machine is shared; a trivial job normally ends within seconds
HOSTNAME = "aicenter.io/hostname"

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _wait_done(cli: Cli, job_id: int) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        job: dict[str, Any] = cli.json("job", "get", str(job_id))
        if job["status"] in ("succeeded", "failed", "stopped"):
            return job
        assert time.monotonic() < deadline, f"job {job_id} stayed {job['status']}: {job.get('pending_reason')}"
        time.sleep(0.2)


def test_jobs_of_default_and_of_a_pool_of_the_only_node_both_run(server: Server, cli: Cli, tmp_path: Path) -> None:
    cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    [node] = cli.json("node", "list")
    cli.run("pool", "create", "mine", "--selector", f"{HOSTNAME}={node['labels'][HOSTNAME]}")
    [workspace] = [w["name"] for w in cli.json("workspace", "list")]  # the admin's own, granted default
    cli.run("pool", "grant", "mine", workspace)
    assert cli.json("node", "list")[0]["pools"] == ["default", "mine"]
    assert {p["name"]: p["node_count"] for p in cli.json("pool", "list")} == {"default": 1, "mine": 1}

    for name, extra, pool in (("in-default", [], "default"), ("in-mine", ["--set", "pool=mine"], "mine")):
        submitted = cli.json("job", "submit", str(_spec(tmp_path)), "--set", f"name={name}", *extra)
        assert submitted["pool_name"] == pool
        job = _wait_done(cli, submitted["id"])
        assert (job["status"], job["replicas"][0]["node_name"]) == ("succeeded", node["name"])

    huge = cli.run(
        "job", "submit", str(_spec(tmp_path)), "--set", "pool=mine", "--set", "tasks[0].resources.cpu=4096", check=False
    )
    assert huge.returncode == 2
    [line] = huge.stderr.strip().splitlines()
    assert line.startswith(
        "error: validation_failed: tasks[0].resources: needs 4096 CPU; the largest node of pool mine has"
    )
    elsewhere = cli.run("job", "submit", str(_spec(tmp_path)), "--set", "pool=a100", check=False)
    assert elsewhere.returncode == 2
    assert elsewhere.stderr.strip().splitlines() == [
        f'error: validation_failed: pool: workspace {workspace} may not use pool "a100"; '
        "pools it may use: default, mine"
    ]


def _spec(tmp_path: Path) -> Path:
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    return spec
