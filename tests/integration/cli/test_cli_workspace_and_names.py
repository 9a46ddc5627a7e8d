"""The CLI names things as people do: jobs by name, a default workspace kept in the profile, "not logged in"."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

from tests.integration.cli.conftest import Run
from tests.integration.cli.test_cli import as_json, one_error_line

SPEC = """\
name: {name}
tasks:
  - name: worker
    resources: {{cpu: 500m, memory: 64Mi}}
    command: echo hi
"""


def _submit(cli: Run, tmp_path: Path, name: str, *extra: str) -> dict[str, object]:
    path = tmp_path / f"{name}.yaml"
    path.write_text(SPEC.format(name=name))
    job = as_json(cli("job", "submit", str(path), "-o", "json", *extra))
    assert isinstance(job, dict)
    return job


def _node(cli: Run) -> None:
    result = cli("node", "create", "cli-names-node", "--cpu", "8", "--memory", "16Gi")
    assert result.exit_code == 0 or "already" in result.output, result.output


def test_a_job_is_named_by_its_name_newest_first(admin_cli: Run, tmp_path: Path) -> None:
    _node(admin_cli)
    first = _submit(admin_cli, tmp_path, "named-job")
    second = _submit(admin_cli, tmp_path, "named-job")
    assert as_json(admin_cli("job", "get", "named-job", "-o", "json"))["id"] == second["id"]  # type: ignore[index]
    events = as_json(admin_cli("job", "events", "named-job", "-o", "json"))
    assert isinstance(events, list)
    assert events
    stopped = as_json(admin_cli("job", "stop", "named-job", "-o", "json"))
    assert stopped["id"] == second["id"]  # type: ignore[index]
    resubmitted = as_json(admin_cli("job", "resubmit", "named-job", "-o", "json"))
    assert resubmitted["name"] == "named-job"  # type: ignore[index]
    assert resubmitted["id"] > second["id"]  # type: ignore[index,operator]
    assert admin_cli("job", "stop", str(resubmitted["id"])).exit_code == 0  # type: ignore[index]
    admin_cli("job", "stop", str(first["id"]))
    assert as_json(admin_cli("job", "get", f"#{first['id']}", "-o", "json"))["id"] == first["id"]  # type: ignore[index]
    missing = admin_cli("job", "get", "no-such-job")
    assert missing.exit_code == 1
    assert "no-such-job" in one_error_line(missing, "not_found")


def test_workspace_use_sets_the_default_workspace(admin_cli: Run, tmp_path: Path, home: Path) -> None:
    _node(admin_cli)
    assert admin_cli("user", "create", "dora", "--password-stdin", input="dora-password-1").exit_code == 0
    assert admin_cli("workspace", "create", "team-use", "--admin", "dora").exit_code == 0
    assert admin_cli("workspace", "create", "team-other").exit_code == 0
    not_member = admin_cli("workspace", "use", "team-use")  # a platform admin sees it but cannot submit there
    assert not_member.exit_code == 1
    assert "not a member" in one_error_line(not_member, "not_found")
    assert admin_cli("workspace", "use", "no-such-workspace").exit_code == 1
    assert admin_cli("member", "add", "admin", "-w", "team-use").exit_code == 0

    used = admin_cli("workspace", "use", "team-use")
    assert used.exit_code == 0, used.output
    saved = tomllib.loads((home / "config.toml").read_text())
    assert saved["profiles"]["default"]["workspace"] == "team-use"

    job = _submit(admin_cli, tmp_path, "in-default-ws")
    assert job["workspace_name"] == "team-use"
    explicit = _submit(admin_cli, tmp_path, "in-other-ws", "-w", "team-other")
    assert explicit["workspace_name"] == "team-other"
    listed = as_json(admin_cli("job", "list", "-o", "json"))
    assert {j["workspace_name"] for j in listed} == {"team-use"}  # type: ignore[union-attr,index]
    # a name is looked up within the default workspace, and -w looks in another
    assert admin_cli("job", "get", "in-other-ws").exit_code == 1
    found = as_json(admin_cli("job", "get", "in-other-ws", "-w", "team-other", "-o", "json"))
    assert found["id"] == explicit["id"]  # type: ignore[index]
    for ref in (job["id"], explicit["id"]):
        admin_cli("job", "stop", str(ref))

    assert admin_cli("workspace", "use", "--unset").exit_code == 0
    assert "workspace" not in tomllib.loads((home / "config.toml").read_text())["profiles"]["default"]


def test_commands_without_a_login_say_not_logged_in(run: Run) -> None:
    result = run("job", "list")
    assert result.exit_code == 1
    assert "aicenter login" in one_error_line(result, "not_logged_in")
    assert json.loads(run("version", "-o", "json").stdout)["version"]
