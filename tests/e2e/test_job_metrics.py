"""Reported metrics end to end: a job in a venv image (built by the server, without aicenter installed in it)
imports ``aicenter.runtime.report``; its metrics come back through the CLI, the REST API and the SDK."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from aicenter.client import Client
from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

pytestmark = [pytest.mark.slow, pytest.mark.e2e]  # builds a venv image, then runs a job in it

DEADLINE_S = 120.0  # a venv build (ensurepip) plus a job on a shared 2-core machine
PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"

# What the job runs: it fails loudly if the helpers are missing or if server code leaked onto its path.
TRAIN = """\
import importlib.util, sys
from aicenter.runtime import report
assert importlib.util.find_spec("aicenter.config") is None, "server code is importable in the job"
assert importlib.util.find_spec("sqlalchemy") is None, "the server's site-packages leaked into the venv"
print("python", sys.prefix)
for step in range(1, 6):
    report(step=step, loss=1.0 / step, accuracy=step / 10)
report(step=6, loss=float("nan"))
"""


def _spec(tmp_path: Path, image: str) -> Path:
    # The script travels in the job's environment: a sandboxed job sees no host path outside its own dirs.
    spec = tmp_path / "job.yaml"
    spec.write_text(
        "name: reports\n"
        f"image: {image}\n"
        "tasks:\n"
        "  - name: worker\n"
        "    replicas: 1\n"
        "    resources: {cpu: 500m, memory: 256Mi}\n"
        f"    env: {{TRAIN_PY: {json.dumps(TRAIN)}}}\n"
        '    command: python -c "$TRAIN_PY"\n'
    )
    return spec


def _wait(check: Any, what: str) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while True:
        value = check()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_a_venv_image_job_reports_metrics_seen_by_cli_api_and_sdk(server: Server, cli: Cli, tmp_path: Path) -> None:
    cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    cli.run("image", "create", "bare-venv", "--type", "venv")
    cli.run("image", "version", "bare-venv", "--python", PYTHON)  # no requirements: a plain venv
    build = cli.json("image", "build", "bare-venv:1", "--follow")
    assert build["state"] == "ready", build

    job_id = cli.json("job", "submit", str(_spec(tmp_path, "bare-venv:1")))["id"]

    def finished() -> dict[str, Any] | None:
        job: dict[str, Any] = cli.json("job", "get", str(job_id))
        return job if job["status"] in ("succeeded", "failed", "stopped") else None

    job = _wait(finished, f"job {job_id} to end")
    logs = cli.run("job", "logs", str(job_id)).stdout
    assert job["status"] == "succeeded", logs
    assert "envs" in logs  # it ran the image's interpreter, not the server's

    latest = cli.json("job", "metrics", str(job_id))
    assert (latest["task"], latest["replica"], latest["reporting"]) == ("worker", 0, ["worker-0"])
    assert latest["latest"]["accuracy"]["value"] == pytest.approx(0.5)
    assert latest["latest"]["accuracy"]["step"] == 5
    assert latest["latest"]["loss"] == {"step": 6, "at": latest["latest"]["loss"]["at"], "value": None}

    table = cli.run("job", "metrics", str(job_id)).stdout
    rows = {line.split()[0]: line.split()[1] for line in table.splitlines()[1:]}
    assert rows == {"accuracy": "0.5", "loss": "-"}

    series = cli.json("job", "metrics", str(job_id), "--name", "loss")
    assert [(p["step"], p["value"]) for p in series] == [(1, 1.0), (2, 0.5), (3, 1 / 3), (4, 0.25), (5, 0.2), (6, None)]

    with Client(server.url) as sdk:
        token = sdk.login("admin", ADMIN_PASSWORD).token
        assert [p.value for p in sdk.job_metric_series(job_id, "accuracy")] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.5])
        assert sdk.job_metrics(job_id, name="accuracy", limit=2).next_cursor is not None
        # The ingest controller copies them into series (report.<name>, per replica) within one interval (10 s).
        names = _wait(lambda: sdk.series_names(job_id=job_id) or None, "the reported metrics to become series")
        assert names == ["report.accuracy", "report.loss", "report.step"]
        [loss] = sdk.series("report.loss", job_id=job_id).series
        assert loss.labels == {"task": "worker", "replica": "0"}
        assert (min(p.min for p in loss.points), max(p.max for p in loss.points)) == (0.2, 1.0)  # NaN dropped
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=10)
    page = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"limit": 4}).json()
    assert sum(len(s["points"]) for s in page["series"]) == 4  # two lines of two metrics
    assert page["next_cursor"] is not None
    rest = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"cursor": page["next_cursor"]}).json()
    assert {s["name"]: len(s["points"]) for s in rest["series"]} == {"accuracy": 3, "loss": 4}
    assert rest["next_cursor"] is None
    # Polling from the last cursor returns nothing new once the job has ended.
    again = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"cursor": rest["cursor"]}).json()
    assert again["series"] == []

    bad = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"cursor": "yesterday"})
    assert bad.status_code == 422
    assert bad.json()["error"]["details"]["field"] == "cursor"
    missing = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"task": "ps"})
    assert missing.status_code == 404
    assert missing.json()["error"]["details"]["field"] == "task"
    no_replica = api.get(f"/api/v1/jobs/{job_id}/metrics", params={"replica": 3})
    assert no_replica.status_code == 404
    assert no_replica.json()["error"]["message"] == f"job {job_id} has no replica worker-3"
