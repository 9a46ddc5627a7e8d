"""What a new user reads: every validation problem, an example spec to start from, tables in units and names."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cli.conftest import Run
from tests.integration.cli.test_cli import as_json
from tests.support.servers import live_server


@pytest.fixture(scope="module")
def server_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cli-readable-server")


@pytest.fixture(scope="module")
def server_url(server_home: Path) -> Iterator[str]:
    """The module's server, on a home the tests can reach (its SQLite database)."""
    with live_server(server_home) as url:
        yield url


THREE_MISTAKES = """\
name: three-mistakes
tasks:
  - name: worker
    resources: {cpu: 1, memory: 8Gx}
    replicas: 0
    command: echo hi
priority: bogus
"""


def test_every_validation_problem_is_printed(admin_cli: Run, tmp_path: Path) -> None:
    spec = tmp_path / "bad.yaml"
    spec.write_text(THREE_MISTAKES)
    result = admin_cli("job", "submit", str(spec))
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines[0].startswith("error: validation_failed: "), result.stderr
    assert len(lines) == 3, result.stderr
    for field in ("tasks[0].replicas", "tasks[0].resources.memory", "priority"):
        assert sum(field in line for line in lines) == 1, result.stderr
    assert "Traceback" not in result.output


def test_job_init_writes_a_commented_spec_that_submits(admin_cli: Run, tmp_path: Path) -> None:
    assert "aicenter job init" in admin_cli("job", "submit", "--help").stdout
    assert admin_cli("node", "create", "readable-init-node", "--cpu", "8", "--memory", "16Gi").exit_code == 0
    path = tmp_path / "job.yaml"
    written = admin_cli("job", "init", str(path))
    assert written.exit_code == 0, written.output
    text = path.read_text()
    assert text.count("\n# ") >= 5  # the optional fields are there, commented out
    job = as_json(admin_cli("job", "submit", str(path), "-o", "json"))
    assert job["status"] in ("pending", "queued")  # type: ignore[index]
    assert admin_cli("job", "stop", str(job["id"])).exit_code == 0  # type: ignore[index]
    again = admin_cli("job", "init", str(path))
    assert again.exit_code == 1
    assert "--force" in again.stderr
    assert admin_cli("job", "init", "-").stdout == text


def test_tables_show_readable_units_and_names(admin_cli: Run) -> None:
    node = admin_cli("node", "create", "odd-memory", "--cpu", "8", "--memory", "24683664Ki")
    assert node.exit_code == 0, node.output
    listed = admin_cli("node", "list").stdout
    row = next(line for line in listed.splitlines() if "odd-memory" in line)
    assert "23.54Gi" in row
    assert "Ki" not in row

    assert admin_cli("pool", "create", "readable-pool", "--selector", "tier=x").exit_code == 0
    created = admin_cli(
        "spec", "create", "pooled-spec", "--cpu", "2", "--memory", "4Gi", "--price", "1", "--pool", "readable-pool"
    )
    assert created.exit_code == 0, created.output
    row = next(line for line in admin_cli("spec", "list").stdout.splitlines() if "pooled-spec" in line)
    assert "readable-pool" in row
    assert "readable-pool" in admin_cli("spec", "get", "pooled-spec").stdout

    assert admin_cli("workspace", "create", "audited-ws").exit_code == 0
    audit = admin_cli("audit", "list", "-w", "audited-ws", "--action", "workspace.create").stdout
    row = next(line for line in audit.splitlines() if "workspace.create" in line)
    assert "audited-ws" in row.split("workspace.create", 1)[1]


def test_the_output_option_may_come_before_the_command(admin_cli: Run) -> None:
    result = admin_cli("-o", "json", "workspace", "list")
    assert result.exit_code == 0, result.output
    assert isinstance(json.loads(result.stdout), list)
    assert isinstance(json.loads(admin_cli("--output=yaml", "-o", "json", "whoami").stdout), dict)
    nowhere = admin_cli("-o", "json", "job", "logs", "1")
    assert nowhere.exit_code == 2
    assert "aicenter job logs --help" in nowhere.stderr


def test_the_rest_body_in_the_jobs_guide_is_what_the_api_takes(admin_cli: Run, server_url: str, home: Path) -> None:
    import re
    import tomllib

    import httpx

    guide = (Path(__file__).parents[3] / "docs" / "jobs.md").read_text()
    assert "POST /api/v1/jobs\n" in guide, "docs/jobs.md shows no request for POST /api/v1/jobs"
    request = guide.split("POST /api/v1/jobs\n", 1)[1].split("```", 1)[0]
    example = re.search(r"^(\{$.*^\})$", request, re.S | re.M)
    assert example is not None, "docs/jobs.md shows no body for POST /api/v1/jobs"
    assert admin_cli("node", "create", "rest-doc-node", "--cpu", "8", "--memory", "16Gi").exit_code == 0
    token = tomllib.loads((home / "config.toml").read_text())["profiles"]["default"]["token"]
    created = httpx.post(
        f"{server_url}/api/v1/jobs", json=json.loads(example.group(1)), headers={"Authorization": f"Bearer {token}"}
    )
    assert created.status_code == 201, created.text
    assert admin_cli("job", "stop", str(created.json()["id"])).exit_code == 0


def test_catalog_lists_name_the_home_workspace_apart_from_the_shared_scope(admin_cli: Run) -> None:
    assert admin_cli("dataset", "create", "home-ws-data").exit_code == 0
    header = admin_cli("dataset", "list").stdout.splitlines()[0]
    assert "HOME WORKSPACE" in header
    assert "shared with one of your workspaces" in " ".join(admin_cli("dataset", "list", "--help").stdout.split())


def test_a_stopped_job_says_stopped_once(admin_cli: Run, tmp_path: Path) -> None:
    assert admin_cli("node", "create", "stop-once-node", "--cpu", "8", "--memory", "16Gi").exit_code == 0
    path = tmp_path / "job.yaml"
    assert admin_cli("job", "init", str(path)).exit_code == 0
    job = as_json(admin_cli("job", "submit", str(path), "-o", "json"))
    stopped = admin_cli("job", "stop", str(job["id"]))  # type: ignore[index]
    assert stopped.exit_code == 0, stopped.output
    assert "stopped (stopped" not in stopped.stdout
    assert f"job {job['id']} stopped" in stopped.stdout  # type: ignore[index]
    row = next(line for line in admin_cli("job", "list").stdout.splitlines() if line.split()[0] == str(job["id"]))  # type: ignore[index]
    assert "stopped (stopped" not in row


def test_job_get_names_the_saved_model_as_a_reference(admin_cli: Run, tmp_path: Path, server_home: Path) -> None:
    assert admin_cli("node", "create", "saved-model-node", "--cpu", "8", "--memory", "16Gi").exit_code == 0
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "w.bin").write_bytes(b"w")
    for _ in range(2):  # version 2, whose id is not 2 once other versions exist
        pushed = as_json(admin_cli("model", "push", str(tmp_path / "weights"), "-n", "linreg-model", "-o", "json"))
    path = tmp_path / "job.yaml"
    assert admin_cli("job", "init", str(path)).exit_code == 0
    job = as_json(admin_cli("job", "submit", str(path), "-o", "json"))
    # What the reconciler records when the job's output became that version (no controller runs here).
    with sqlite3.connect(server_home / "aicenter.db") as db:
        db.execute("UPDATE jobs SET output_model_version_id = ? WHERE id = ?", (pushed["id"], job["id"]))  # type: ignore[index]
    shown = admin_cli("job", "get", str(job["id"])).stdout  # type: ignore[index]
    row = next(line for line in shown.splitlines() if line.startswith("output model"))
    assert row.split()[-1] == "linreg-model:2"
    cost = next(line for line in shown.splitlines() if line.startswith("cost"))
    assert cost.split()[1:] == ["0.00", "coins,", "0.000000", "machine-hours"]  # no copy started: nothing yet
    admin_cli("job", "stop", str(job["id"]))  # type: ignore[index]
