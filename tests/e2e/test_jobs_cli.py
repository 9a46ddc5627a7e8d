"""Jobs through the real `aicenter` command against a real `aicenter up` process (its controllers run the jobs on
this host): submit a spec file with --set, list, get, follow the logs of a short job until it ends, stop a long
one, and a bad spec reported in one line naming the field."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

SPEC = """\
name: hello
tasks:
  - name: worker
    replicas: 1
    resources: {cpu: 500m, memory: 128Mi}
    command: echo placeholder
"""
DEADLINE_S = 60.0  # generous: the machine is shared; a trivial job normally ends within seconds

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The installed ``aicenter`` as a process: its exit codes and one-line errors are what this module tests."""
    home = tmp_path / "cli-home"
    home.mkdir()
    return Cli(home, process=True)


def _job(cli: Cli, job_id: int) -> dict[str, Any]:
    data: dict[str, Any] = cli.json("job", "get", str(job_id))
    return data


def _wait(cli: Cli, job_id: int, statuses: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        job = _job(cli, job_id)
        if job["status"] in statuses:
            return job
        assert time.monotonic() < deadline, f"job {job_id} stayed {job['status']}: {job}"
        time.sleep(0.2)


def test_submit_list_get_logs_stop(server: Server, cli: Cli, tmp_path: Path) -> None:
    cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)

    submitted = json.loads(
        cli.run(
            "job", "submit", str(spec), "--set", "tasks[0].command=echo hello-from-cli; echo second line", "-o", "json"
        ).stdout
    )
    job_id = submitted["id"]
    assert submitted["status"] in ("pending", "queued")
    assert submitted["spec"]["tasks"][0]["command"] == "echo hello-from-cli; echo second line"

    listed = cli.json("job", "list")
    assert [j["id"] for j in listed] == [job_id]

    followed = cli.run("job", "logs", str(job_id), "-f")  # returns once the job has ended
    lines = followed.stdout.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["hello-from-cli", "second line"]
    assert all(line[:4].isdigit() and line.split(" ", 1)[0].endswith("Z") for line in lines)  # timestamps

    job = _wait(cli, job_id, {"succeeded", "failed", "stopped"})
    assert job["status"] == "succeeded", job
    assert [(r["task"], r["index"], r["status"]) for r in job["replicas"]] == [("worker", 0, "succeeded")]
    assert job["replicas"][0]["node_name"]
    assert [e["to_status"] for e in job["events"]][:2] == ["pending", "queued"]
    table = cli.run("job", "get", str(job_id)).stdout
    assert "Replicas" in table
    assert "Events" in table
    assert "succeeded" in table

    assert "succeeded" in cli.run("job", "list", "--status", "succeeded").stdout
    assert cli.json("job", "list", "--status", "running") == []

    long = cli.json(
        "job", "submit", str(spec), "--set", "tasks[0].command=echo started; sleep 120", "--set", "name=long"
    )
    _wait(cli, long["id"], {"running"})
    stopping = cli.run("job", "stop", str(long["id"]))
    assert stopping.stdout.startswith(f"job {long['id']} ")
    stopped = _wait(cli, long["id"], {"stopped", "failed", "succeeded"})
    assert (stopped["status"], stopped["failure_reason"]) == ("stopped", "stopped")
    events = cli.json("job", "events", str(long["id"]))
    assert events[-1]["to_status"] == "stopped"


def test_bad_spec_is_one_line_naming_the_field(server: Server, cli: Cli, tmp_path: Path) -> None:
    cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)

    bad = cli.run("job", "submit", str(spec), "--set", "tasks[0].resources.memory=8Gx", check=False)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == [
        'error: validation_failed: tasks[0].resources.memory: "8Gx" is not a quantity (examples: 512Mi, 16Gi, 1T)'
    ]
    typo = tmp_path / "typo.yaml"
    typo.write_text(SPEC.replace("replicas: 1", "replica: 1"))
    refused = cli.run("job", "submit", str(typo), check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        'error: validation_failed: tasks[0].replica: unknown field "replica" (did you mean "replicas"?)'
    ]
    assert "Traceback" not in bad.stderr + refused.stderr
    assert cli.json("job", "list") == []  # nothing was created
