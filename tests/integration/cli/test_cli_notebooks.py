"""``aicenter notebook ...`` against a real server (no controllers: notebooks stay queued). The SSH endpoint's
answer is the one piece faked (monkeypatched SDK method): what is tested is the CLI's own use of it, the
known_hosts file and the ssh command line, the latter run through the system's real OpenSSH ``ssh -G``."""

from __future__ import annotations

import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml

from aicenter.client import Client, NotebookSsh
from tests.integration.cli.conftest import Run
from tests.integration.cli.test_cli import as_json, one_error_line

NOTEBOOK_FILE = """\
name: from-file
resources: {cpu: 500m, memory: 128Mi}
env: {A: "1"}
"""


def _node(cli: Run) -> None:
    result = cli("node", "create", "cli-nb-node", "--cpu", "8", "--memory", "16Gi")
    assert result.exit_code == 0 or "already" in result.output, result.output


def _create(cli: Run, name: str, *extra: str) -> dict[str, Any]:
    _node(cli)
    created = as_json(cli("notebook", "create", name, "--cpu", "1", "--memory", "256Mi", "-o", "json", *extra))
    assert isinstance(created, dict)
    return created


def test_create_list_get(admin_cli: Run, tmp_path: Path) -> None:
    nb = _create(admin_cli, "cli-nb", "--env", "EPOCHS=3", "--idle-timeout", "90")
    assert (nb["name"], nb["status"], nb["own_idle_timeout_s"]) == ("cli-nb", "queued", 5400)
    assert nb["resources"]["cpu"] == "1"

    table = admin_cli("notebook", "create", "cli-nb-table", "--cpu", "1", "--memory", "256Mi", "--idle-timeout", "0")
    assert table.exit_code == 0, table.output
    assert "never" in table.stdout
    assert "notebook open cli-nb-table" in table.stderr

    path = tmp_path / "nb.yaml"
    path.write_text(NOTEBOOK_FILE)
    from_file = as_json(admin_cli("notebook", "create", "--file", str(path), "-o", "json"))
    assert from_file["name"] == "from-file"  # type: ignore[index]
    renamed = as_json(admin_cli("notebook", "create", "renamed", "--file", str(path), "--env", "B=2", "-o", "json"))
    assert renamed["name"] == "renamed"  # type: ignore[index]

    listed = admin_cli("notebook", "list")
    assert listed.exit_code == 0, listed.output
    assert "cli-nb" in listed.stdout
    assert "90m" in listed.stdout
    ids = [n["id"] for n in as_json(admin_cli("notebook", "list", "-o", "json", "--status", "queued"))]  # type: ignore[union-attr,index]
    assert nb["id"] in ids
    assert as_json(admin_cli("notebook", "list", "--status", "running", "-o", "json")) == []
    assert as_json(admin_cli("notebook", "list", "--all-users", "-o", "json"))

    got = admin_cli("notebook", "get", "cli-nb")
    assert got.exit_code == 0, got.output
    assert f"/notebooks/{nb['id']}/lab" in got.stdout
    assert "Events" in got.stdout
    assert as_json(admin_cli("notebook", "get", str(nb["id"]), "-o", "json"))["name"] == "cli-nb"  # type: ignore[index]

    twice = admin_cli("notebook", "create", "cli-nb", "--cpu", "1", "--memory", "256Mi")
    assert twice.exit_code == 1
    one_error_line(twice, "conflict")


def test_bad_input_is_one_line(admin_cli: Run, tmp_path: Path) -> None:
    _create(admin_cli, "bad-input")
    for args in (("get", "no-such-nb"), ("stop", "no-such-nb"), ("ssh-config", "no-such-nb"), ("open", "no-such-nb")):
        missing = admin_cli("notebook", *args)
        assert missing.exit_code == 1, missing.output
        assert "no-such-nb" in one_error_line(missing, "not_found")
    assert admin_cli("notebook", "get", "999999").exit_code == 1
    for minutes, code in (
        ("abc", "validation_failed"),
        ("1.5", "validation_failed"),
        ("999999", "validation_failed"),
        ("-5", "usage"),
    ):
        bad = admin_cli("notebook", "idle-timeout", "bad-input", minutes)
        assert bad.exit_code == 2, bad.output
        one_error_line(bad, code)
    bad_create = admin_cli("notebook", "create", "x", "--cpu", "1", "--memory", "1Gi", "--idle-timeout", "soon")
    assert bad_create.exit_code == 2
    one_error_line(bad_create, "validation_failed")
    no_resources = admin_cli("notebook", "create", "x")
    assert no_resources.exit_code == 2
    one_error_line(no_resources, "validation_failed")
    bad_memory = admin_cli("notebook", "create", "x", "--cpu", "1", "--memory", "lots")
    assert bad_memory.exit_code == 2
    assert "resources.memory" in one_error_line(bad_memory, "validation_failed")
    missing_file = admin_cli("notebook", "create", "--file", str(tmp_path / "none.yaml"))
    assert missing_file.exit_code == 2
    one_error_line(missing_file, "validation_failed")
    both = admin_cli("notebook", "create", "x", "--spec", "s", "--cpu", "1")
    assert both.exit_code == 2
    one_error_line(both, "validation_failed")
    assert as_json(admin_cli("notebook", "list", "--all-users", "-o", "json"))  # nothing named x was written
    assert "x" not in [n["name"] for n in as_json(admin_cli("notebook", "list", "-o", "json"))]  # type: ignore[union-attr,index]


def test_a_name_in_two_workspaces_needs_the_workspace(admin_cli: Run) -> None:
    first = _create(admin_cli, "twin")
    assert admin_cli("workspace", "create", "twin-ws").exit_code == 0
    second = _create(admin_cli, "twin", "-w", "twin-ws")
    ambiguous = admin_cli("notebook", "stop", "twin")
    assert ambiguous.exit_code == 1
    assert "--workspace" in one_error_line(ambiguous, "conflict")
    stopped = as_json(admin_cli("notebook", "stop", "twin", "-w", "twin-ws", "-o", "json"))
    assert stopped["id"] == second["id"]  # type: ignore[index]
    assert as_json(admin_cli("notebook", "get", str(first["id"]), "-o", "json"))["status"] == "queued"  # type: ignore[index]


def test_idle_timeout(admin_cli: Run) -> None:
    nb = _create(admin_cli, "idle-nb")
    result = admin_cli("notebook", "idle-timeout", "idle-nb", "30")
    assert result.exit_code == 0, result.output
    assert "30m" in result.stdout
    assert as_json(admin_cli("notebook", "idle-timeout", "idle-nb", "0", "-o", "json"))["idle_timeout_s"] == 0  # type: ignore[index]
    back = as_json(admin_cli("notebook", "idle-timeout", str(nb["id"]), "default", "-o", "json"))
    assert back["own_idle_timeout_s"] is None  # type: ignore[index]


def test_a_workspace_sets_its_notebooks_idle_timeout(admin_cli: Run) -> None:
    nb = _create(admin_cli, "ws-idle-nb")
    workspace = str(nb["workspace_id"])
    changed = as_json(admin_cli("workspace", "notebook-idle-timeout", workspace, "45", "-o", "json"))
    assert changed["notebook_idle_timeout_s"] == 2700  # type: ignore[index]
    assert as_json(admin_cli("notebook", "get", "ws-idle-nb", "-o", "json"))["idle_timeout_s"] == 2700  # type: ignore[index]
    back = as_json(admin_cli("workspace", "notebook-idle-timeout", workspace, "default", "-o", "json"))
    assert back["notebook_idle_timeout_s"] is None  # type: ignore[index]
    bad = admin_cli("workspace", "notebook-idle-timeout", workspace, "soon")
    assert bad.exit_code == 2
    one_error_line(bad, "validation_failed")


def test_stop_start_save_delete(admin_cli: Run) -> None:
    nb = _create(admin_cli, "life-nb")
    queued_start = admin_cli("notebook", "start", "life-nb")
    assert queued_start.exit_code == 1
    one_error_line(queued_start, "invalid_transition")
    queued_save = admin_cli("notebook", "save", "life-nb", "--algorithm", "my-code")
    assert queued_save.exit_code == 1
    one_error_line(queued_save, "invalid_transition")
    logs = admin_cli("notebook", "logs", "life-nb")  # queued: nothing launched, so no log yet
    assert logs.exit_code == 1
    one_error_line(logs, "conflict")

    stopped = admin_cli("notebook", "stop", "life-nb")
    assert stopped.exit_code == 0, stopped.output
    assert stopped.stdout.strip() == f"notebook {nb['id']} (life-nb) stopped"
    started = as_json(admin_cli("notebook", "start", "life-nb", "-o", "json"))
    assert (started["status"], started["restart_count"]) == ("queued", 1)  # type: ignore[index]
    assert admin_cli("notebook", "stop", "life-nb").exit_code == 0

    unconfirmed = admin_cli("notebook", "delete", "life-nb")  # no terminal: --yes is required
    assert unconfirmed.exit_code == 2
    one_error_line(unconfirmed, "confirmation_required")
    deleted = admin_cli("notebook", "delete", "life-nb", "--yes")
    assert deleted.exit_code == 0, deleted.output
    assert f"Deleted notebook {nb['id']}" in deleted.stdout
    assert admin_cli("notebook", "get", str(nb["id"])).exit_code == 1


def test_train(admin_cli: Run, tmp_path: Path) -> None:
    _create(admin_cli, "train-nb", "--env", "LR=0.1")
    printed = admin_cli("notebook", "train", "train-nb")
    assert printed.exit_code == 0, printed.output
    spec = yaml.safe_load(printed.stdout)
    assert (spec["kind"], spec["name"], spec["env"]) == ("train", "train-nb-train", {"LR": "0.1"})
    target = tmp_path / "train.yaml"
    wrote = admin_cli("notebook", "train", "train-nb", "--file", str(target))
    assert wrote.exit_code == 0, wrote.output
    assert yaml.safe_load(target.read_text()) == spec
    job = as_json(admin_cli("notebook", "train", "train-nb", "--submit", "-o", "json"))
    assert (job["kind"], job["status"], job["name"]) == ("train", "queued", "train-nb-train")  # type: ignore[index]
    assert admin_cli("job", "stop", str(job["id"])).exit_code == 0  # type: ignore[index]


def test_open(admin_cli: Run, server_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    nb = _create(admin_cli, "open-nb")
    url = f"{server_url}/notebooks/{nb['id']}/lab"
    printed = admin_cli("notebook", "open", "open-nb", "--no-browser")
    assert printed.exit_code == 0, printed.output
    assert printed.stdout.strip() == url
    assert "signed in" in printed.stderr
    assert "queued" in printed.stderr
    opened: list[str] = []
    monkeypatch.setattr("webbrowser.open", lambda u, *a, **k: opened.append(u) or True)
    assert admin_cli("notebook", "open", "open-nb").exit_code == 0
    assert opened == [url]


# -- ssh -------------------------------------------------------------------------------------------------------

GATEWAY_KEY = "gw.example ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"


def _fake_ssh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The /ssh endpoint's contract, answered without a gateway: user, gateway, alias, host keys, config."""

    def answer(self: Client, notebook_id: int) -> NotebookSsh:
        alias = f"notebook-{notebook_id}"
        return NotebookSsh(
            user="admin",
            gateway_host="gw.example",
            gateway_port=2222,
            host_alias=alias,
            known_hosts=[
                f"[gw.example]:2222 {GATEWAY_KEY.split(' ', 1)[1]}",
                f"{alias} {GATEWAY_KEY.split(' ', 1)[1]}",
            ],
            config=f"Host {alias}\n    HostName {alias}\n    User admin\n    ProxyJump admin@gw.example:2222\n",
        )

    monkeypatch.setattr(Client, "notebook_ssh", answer)


def test_ssh_config_writes_known_hosts(admin_cli: Run, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_ssh(monkeypatch)
    first = _create(admin_cli, "ssh-a")
    second = _create(admin_cli, "ssh-b")
    result = admin_cli("notebook", "ssh-config", "ssh-a")
    assert result.exit_code == 0, result.output
    known = home / "ssh" / "known_hosts"
    assert stat.S_IMODE(known.stat().st_mode) == 0o600
    assert stat.S_IMODE(known.parent.stat().st_mode) == 0o700
    assert f"Host notebook-{first['id']}" in result.stdout
    assert f"UserKnownHostsFile {known}" in result.stdout
    assert "~/.ssh/config" in result.stderr
    assert "VS Code" in result.stderr
    assert admin_cli("notebook", "ssh-config", "ssh-b").exit_code == 0
    assert admin_cli("notebook", "ssh-config", "ssh-b").exit_code == 0  # again: its lines replaced, not doubled
    lines = known.read_text().splitlines()
    assert sorted(line.split()[0] for line in lines) == sorted(
        ["[gw.example]:2222", f"notebook-{first['id']}", f"notebook-{second['id']}"]
    )

    # the printed block is valid ssh_config that real OpenSSH reads, pointing at the CLI's known_hosts
    if shutil.which("ssh") is None:
        pytest.skip("no OpenSSH client here")
    config = home / "ssh_config"
    config.write_text(result.stdout)
    resolved = subprocess.run(
        ["ssh", "-G", "-F", str(config), f"notebook-{first['id']}"], capture_output=True, text=True, check=True
    ).stdout
    assert f"userknownhostsfile {known}" in resolved
    assert "proxyjump admin@gw.example:2222" in resolved


def test_ssh_runs_the_system_ssh(admin_cli: Run, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line is checked by real OpenSSH: ``-G`` makes it resolve everything and print, not connect."""
    binary = shutil.which("ssh")
    if binary is None:
        pytest.skip("no OpenSSH client here")
    _fake_ssh(monkeypatch)
    nb = _create(admin_cli, "ssh-run")
    ran: list[list[str]] = []

    def execv(path: str, argv: list[str]) -> None:  # in place of replacing the test process
        ran.append(argv)
        done = subprocess.run([path, *argv[1:]], capture_output=True, text=True, check=False)
        typer.echo(done.stdout + done.stderr)
        raise typer.Exit(done.returncode)

    monkeypatch.setattr("os.execv", execv)
    result = admin_cli("notebook", "ssh", "ssh-run", "--", "-G", "-L", "8888:localhost:8888", "nvidia-smi")
    assert result.exit_code == 0, result.output
    known = home / "ssh" / "known_hosts"
    argv = ran[0]
    assert argv[0] == binary
    assert f"UserKnownHostsFile={known}" in argv
    assert "StrictHostKeyChecking=yes" in argv
    assert argv[-2:] == [f"admin@notebook-{nb['id']}", "nvidia-smi"]  # options before the host, command after
    out = result.stdout
    assert f"hostname notebook-{nb['id']}" in out
    assert "user admin" in out
    assert "stricthostkeychecking true" in out
    assert f"userknownhostsfile {known}" in out
    assert "localforward 8888 [localhost]:8888" in out
    # the jump hop checks the gateway against the same file (-J would not pass it on)
    assert "proxycommand" in out
    assert f"UserKnownHostsFile={known}" in out.split("proxycommand", 1)[1].splitlines()[0]
    assert "-p 2222 -l admin -W '[%h]:%p' gw.example" in out


def test_ssh_without_an_ssh_client(admin_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _create(admin_cli, "no-ssh")
    monkeypatch.setenv("PATH", str(tmp_path))
    result = admin_cli("notebook", "ssh", "no-ssh")
    assert result.exit_code == 1
    assert "OpenSSH" in one_error_line(result, "ssh_not_found")
