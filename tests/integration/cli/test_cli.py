"""The CLI end to end against a real server: login, config file, tables, -o json/yaml, errors, every group."""

from __future__ import annotations

import json
import socket
import stat
import tomllib
from pathlib import Path

import pytest
import yaml

from aicenter import __version__
from tests.integration.cli.conftest import Run
from tests.support.settings import ADMIN_PASSWORD


def one_error_line(result: object, code: str) -> str:
    """The failure printed exactly one line on stderr, of the form ``error: <code>: ...``, and no traceback."""
    stderr: str = result.stderr  # type: ignore[attr-defined]
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"error: {code}: "), stderr
    assert "Traceback" not in result.output  # type: ignore[attr-defined]
    return lines[0]


def as_json(result: object) -> object:
    assert result.exit_code == 0, result.output  # type: ignore[attr-defined]
    return json.loads(result.stdout)  # type: ignore[attr-defined]


# -- login, profiles, tokens -----------------------------------------------------------------------------------


def test_login_writes_a_private_config_then_whoami(run: Run, server_url: str, home: Path) -> None:
    result = run("login", "--server", server_url, "-u", "admin", "--password-stdin", input=ADMIN_PASSWORD + "\n")
    assert result.exit_code == 0, result.output
    assert "Logged in" in result.stdout
    path = home / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    data = tomllib.loads(path.read_text())
    assert data["current"] == "default"
    assert data["profiles"]["default"]["server"] == server_url
    assert data["profiles"]["default"]["token"].startswith("aic_")
    assert ADMIN_PASSWORD not in path.read_text()

    who = run("whoami")
    assert who.exit_code == 0, who.output
    assert "admin" in who.stdout
    assert server_url in who.stdout
    assert as_json(run("whoami", "-o", "json"))["username"] == "admin"  # type: ignore[index]
    assert yaml.safe_load(run("whoami", "-o", "yaml").stdout)["is_platform_admin"] is True


def test_login_again_revokes_the_previous_token(admin_cli: Run, server_url: str, home: Path) -> None:
    first = tomllib.loads((home / "config.toml").read_text())["profiles"]["default"]["token"]
    again = admin_cli("login", "-u", "admin", "--password-stdin", input=ADMIN_PASSWORD)
    assert again.exit_code == 0, again.output
    tokens = as_json(admin_cli("token", "list", "--all", "-o", "json"))
    assert sum(1 for t in tokens if t["revoked_at"] is not None) >= 1  # type: ignore[union-attr,index]
    import httpx

    answer = httpx.get(f"{server_url}/api/v1/users/me", headers={"Authorization": f"Bearer {first}"})
    assert answer.status_code == 401


def test_wrong_password_is_one_line(run: Run, server_url: str) -> None:
    result = run("login", "--server", server_url, "-u", "admin", "--password-stdin", input="nope\n")
    assert result.exit_code == 1
    one_error_line(result, "unauthenticated")


def test_tokens_create_list_revoke(admin_cli: Run, server_url: str) -> None:
    created = admin_cli("token", "create", "ci-nightly", "--expires-in", "30d")
    assert created.exit_code == 0, created.output
    secret = created.stdout.strip().splitlines()[-1]
    assert secret.startswith("aic_")
    table = admin_cli("token", "list")
    assert "ci-nightly" in table.stdout
    assert secret not in table.stdout
    listed = as_json(admin_cli("token", "list", "-o", "json"))
    assert "ci-nightly" in [t["name"] for t in listed]  # type: ignore[union-attr,index]
    assert all("token" not in t for t in listed)  # type: ignore[union-attr]
    as_json_created = as_json(admin_cli("token", "create", "ci-json", "-o", "json"))
    assert as_json_created["token"].startswith("aic_")  # type: ignore[index]
    revoked = admin_cli("token", "revoke", "ci-nightly")
    assert revoked.exit_code == 0, revoked.output
    assert "ci-nightly" not in [t["name"] for t in as_json(admin_cli("token", "list", "-o", "json"))]  # type: ignore[union-attr,index]


def test_profiles_and_logout(admin_cli: Run, server_url: str) -> None:
    second = admin_cli("login", "--profile", "other", "-u", "admin", "--password-stdin", input=ADMIN_PASSWORD)
    assert second.exit_code == 0, second.output
    profiles = as_json(admin_cli("profile", "list", "-o", "json"))
    assert {p["name"]: p["current"] for p in profiles} == {"default": False, "other": True}  # type: ignore[union-attr,index]
    assert admin_cli("profile", "use", "default").exit_code == 0
    assert admin_cli("--profile", "other", "whoami").exit_code == 0
    missing = admin_cli("profile", "use", "nope")
    assert missing.exit_code == 1
    one_error_line(missing, "not_found")
    out = admin_cli("logout")
    assert out.exit_code == 0, out.output
    after = admin_cli("whoami")
    assert after.exit_code == 1
    line = one_error_line(after, "not_logged_in")
    assert "aicenter login" in line
    assert admin_cli("--profile", "other", "whoami").exit_code == 0
    assert admin_cli("profile", "remove", "other").exit_code == 0


# -- errors ----------------------------------------------------------------------------------------------------


def test_bad_input_is_one_line_and_exit_2(admin_cli: Run) -> None:
    local = admin_cli("quota", "set", "--pool", "default", "--max", "cpu")
    assert local.exit_code == 2
    assert "--max" in one_error_line(local, "validation_failed")
    server = admin_cli("node", "create", "bad-node", "--cpu", "4", "--memory", "16Gx")
    assert server.exit_code == 2
    assert "memory" in one_error_line(server, "validation_failed")
    usage = admin_cli("token", "list", "--bogus")
    assert usage.exit_code == 2
    one_error_line(usage, "usage")
    choice = admin_cli("whoami", "-o", "xml")
    assert choice.exit_code == 2
    one_error_line(choice, "usage")


def test_not_found_is_exit_1(admin_cli: Run) -> None:
    result = admin_cli("workspace", "get", "no-such-workspace")
    assert result.exit_code == 1
    one_error_line(result, "not_found")


def test_unreachable_server_names_the_url(run: Run) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    result = run("login", "--server", url, "-u", "admin", "--password-stdin", input="x")
    assert result.exit_code == 1
    assert url in one_error_line(result, "connection_failed")


def test_unexpected_errors_have_no_traceback_unless_debug(admin_cli: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("aicenter.cli.auth.client", broken)
    result = admin_cli("token", "list")
    assert result.exit_code == 1
    assert "RuntimeError: boom" in one_error_line(result, "internal")
    debug = admin_cli("--debug", "token", "list")
    assert debug.exit_code == 1
    assert "Traceback" in debug.stderr


def test_no_arguments_shows_help(run: Run) -> None:
    result = run()
    assert "Usage" in result.output
    assert "workspace" in result.output


# -- tenancy ---------------------------------------------------------------------------------------------------


def test_users_workspaces_members(admin_cli: Run) -> None:
    user = as_json(
        admin_cli(
            "user",
            "create",
            "carol",
            "--display-name",
            "Carol",
            "--password-stdin",
            "-o",
            "json",
            input="carol-password-1",
        )
    )
    assert user["username"] == "carol"  # type: ignore[index]
    assert "carol" in admin_cli("user", "list").stdout
    assert as_json(admin_cli("user", "get", "carol", "-o", "json"))["display_name"] == "Carol"  # type: ignore[index]
    updated = as_json(admin_cli("user", "update", "carol", "--email", "carol@example.org", "-o", "json"))
    assert updated["email"] == "carol@example.org"  # type: ignore[index]
    assert as_json(admin_cli("user", "freeze", "carol", "-o", "json"))["state"] == "frozen"  # type: ignore[index]
    assert as_json(admin_cli("user", "thaw", "carol", "-o", "json"))["state"] == "active"  # type: ignore[index]

    ws = as_json(admin_cli("workspace", "create", "vision", "--description", "CV team", "-o", "json"))
    assert ws["name"] == "vision"  # type: ignore[index]
    assert "vision" in admin_cli("workspace", "list").stdout
    assert as_json(admin_cli("workspace", "get", "vision", "-o", "json"))["id"] == ws["id"]  # type: ignore[index]
    assert as_json(admin_cli("workspace", "rename", "vision", "vision2", "-o", "json"))["name"] == "vision2"  # type: ignore[index]
    logs = as_json(admin_cli("workspace", "admins-read-logs", "vision2", "allow", "-o", "json"))
    assert logs["admins_read_logs"] is True  # type: ignore[index]
    assert admin_cli("workspace", "admins-read-logs", "vision2", "maybe").exit_code == 2
    granted = as_json(admin_cli("audit", "list", "-w", "vision2", "--action", "workspace.update", "-o", "json"))
    assert granted[0]["details"] == {"admins_read_logs": {"from": False, "to": True}}  # type: ignore[index]

    added = as_json(admin_cli("member", "add", "carol", "--workspace", "vision2", "-o", "json"))
    assert added["role"] == "member"  # type: ignore[index]
    role = as_json(admin_cli("member", "set-role", "carol", "workspace_admin", "-w", "vision2", "-o", "json"))
    assert role["role"] == "workspace_admin"  # type: ignore[index]
    assert "carol" in admin_cli("member", "list", "-w", "vision2").stdout
    bad_role = admin_cli("member", "set-role", "carol", "owner", "-w", "vision2")
    assert bad_role.exit_code == 2
    assert admin_cli("member", "remove", "carol", "-w", "vision2").exit_code == 0
    assert "carol" not in admin_cli("member", "list", "-w", "vision2").stdout
    mine = as_json(admin_cli("member", "list", "-o", "json"))  # the admin's default workspace
    assert [m["username"] for m in mine] == ["admin"]  # type: ignore[union-attr,index]

    refused = admin_cli("workspace", "delete", "vision2")
    assert refused.exit_code == 2
    one_error_line(refused, "confirmation_required")
    assert admin_cli("workspace", "delete", "vision2", "--yes").exit_code == 0
    audit = as_json(admin_cli("audit", "list", "--target-type", "workspace", "--limit", "3", "-o", "json"))
    assert 1 <= len(audit) <= 3  # type: ignore[arg-type]
    assert "workspace" in admin_cli("audit", "list", "--actor", "admin").stdout


def test_quota_set_as_documented(admin_cli: Run) -> None:
    assert (
        admin_cli("accelerator-type", "create", "nvidia-a100", "--vendor", "nvidia", "--memory", "80Gi").exit_code == 0
    )
    assert admin_cli("workspace", "create", "quota-ws").exit_code == 0
    args = ["--workspace", "quota-ws", "--pool", "default", "--max", "cpu=64", "--max", "memory=256Gi"]
    args += ["--max", "nvidia-a100=16", "--guaranteed", "nvidia-a100=8"]
    quota = as_json(admin_cli("quota", "set", *args, "-o", "json"))
    assert quota["maximum"] == {"cpu": 64000, "memory": 256 << 30, "nvidia-a100": 16}  # type: ignore[index]
    table = admin_cli("quota", "list", "-w", "quota-ws").stdout
    assert "cpu=64 memory=256Gi nvidia-a100=16" in table
    unknown = admin_cli("quota", "set", "-w", "quota-ws", "--pool", "default", "--guaranteed", "tpu=1")
    assert unknown.exit_code == 2
    assert "guaranteed.tpu" in one_error_line(unknown, "validation_failed")
    assert admin_cli("quota", "delete", "-w", "quota-ws", "--pool", "default").exit_code == 0
    assert as_json(admin_cli("quota", "list", "-w", "quota-ws", "-o", "json")) == []


# -- inventory -------------------------------------------------------------------------------------------------


def test_nodes(admin_cli: Run) -> None:
    assert admin_cli("accelerator-type", "create", "ascend-910b", "--vendor", "huawei").exit_code == 0
    assert "ascend-910b" in admin_cli("accelerator-type", "list").stdout
    node = as_json(
        admin_cli(
            "node",
            "create",
            "gpu-01",
            "--cpu",
            "64",
            "--memory",
            "512Gi",
            "--accelerator",
            "ascend-910bx8",
            "--label",
            "zone=a",
            "--rack",
            "r1",
            "-o",
            "json",
        )
    )
    assert len(node["accelerators"]) == 8
    assert node["labels"] == {"zone": "a"}
    assert "gpu-01" in admin_cli("node", "list").stdout
    assert "ascend-910bx8" in admin_cli("node", "get", "gpu-01").stdout
    labelled = as_json(admin_cli("node", "label", "gpu-01", "gpu=910b", "zone-", "-o", "json"))
    assert labelled["labels"] == {"gpu": "910b"}  # type: ignore[index]
    assert as_json(admin_cli("node", "cordon", "gpu-01", "-o", "json"))["schedule"] == "cordoned"  # type: ignore[index]
    assert as_json(admin_cli("node", "drain", "gpu-01", "-o", "json"))["schedule"] == "draining"  # type: ignore[index]
    assert as_json(admin_cli("node", "uncordon", "gpu-01", "-o", "json"))["schedule"] == "schedulable"  # type: ignore[index]
    in_use = admin_cli("accelerator-type", "delete", "ascend-910b")
    assert in_use.exit_code == 1
    one_error_line(in_use, "conflict")
    assert admin_cli("node", "delete", "gpu-01", "-y").exit_code == 0
    assert admin_cli("accelerator-type", "delete", "ascend-910b").exit_code == 0


def test_specs_pools_and_a_member_lists_their_specs(admin_cli: Run, server_url: str) -> None:
    assert admin_cli("user", "create", "dave", "--password-stdin", input="dave-password-1").exit_code == 0
    assert admin_cli("workspace", "create", "nlp", "--admin", "dave").exit_code == 0
    pool = as_json(
        admin_cli("pool", "create", "a100", "--selector", "gpu=a100", "--description", "A100s", "-o", "json")
    )
    assert pool["selector"] == {"gpu": "a100"}  # type: ignore[index]
    assert "a100" in admin_cli("pool", "list").stdout
    assert as_json(admin_cli("pool", "get", "a100", "-o", "json"))["description"] == "A100s"  # type: ignore[index]
    spec = admin_cli(
        "spec",
        "create",
        "gpu-a100-1",
        "--cpu",
        "8",
        "--memory",
        "64Gi",
        "--accelerators",
        "1",
        "--accelerator-type",
        "nvidia-a100",
        "--price",
        "12.5",
        "--pool",
        "a100",
        "-o",
        "json",
    )
    assert as_json(spec)["price_per_hour"] in ("12.5", "12.5000")  # type: ignore[index]
    assert "gpu-a100-1" in admin_cli("spec", "list").stdout
    assert as_json(admin_cli("spec", "get", "gpu-a100-1", "-o", "json"))["cpu_milli"] == 8000  # type: ignore[index]
    bad_price = admin_cli("spec", "create", "x", "--cpu", "1", "--memory", "1Gi", "--price", "cheap")
    assert bad_price.exit_code == 2
    assert admin_cli("pool", "grant", "a100", "nlp").exit_code == 0
    assert "nlp" in admin_cli("pool", "workspaces", "a100").stdout

    member = admin_cli(
        "--profile", "dave", "login", "--profile", "dave", "-u", "dave", "--password-stdin", input="dave-password-1"
    )
    assert member.exit_code == 0, member.output
    specs = as_json(admin_cli("spec", "list", "-w", "nlp", "-o", "json"))
    assert [s["name"] for s in specs] == ["gpu-a100-1"]  # type: ignore[union-attr,index]
    assert "a100" in admin_cli("pool", "list").stdout
    denied = admin_cli("user", "list")
    assert denied.exit_code == 1
    one_error_line(denied, "forbidden")

    assert admin_cli("profile", "use", "default").exit_code == 0
    assert admin_cli("pool", "revoke", "a100", "nlp").exit_code == 0
    busy = admin_cli("pool", "delete", "a100", "--yes")
    assert busy.exit_code == 1
    one_error_line(busy, "conflict")
    assert admin_cli("spec", "delete", "gpu-a100-1", "--yes").exit_code == 0
    assert admin_cli("pool", "delete", "a100", "--yes").exit_code == 0


# -- misc ------------------------------------------------------------------------------------------------------


def test_version_and_registered_commands(run: Run) -> None:
    assert run("version").stdout.strip() == f"aicenter {__version__}"
    assert as_json(run("version", "-o", "json")) == {"version": __version__}
    assert "--workers" in run("up", "--help").stdout
    assert "--trace" in run("simulate", "--help").stdout


def test_json_output_is_exactly_the_api_json(admin_cli: Run, server_url: str, home: Path) -> None:
    import httpx

    token = tomllib.loads((home / "config.toml").read_text())["profiles"]["default"]["token"]
    headers = {"Authorization": f"Bearer {token}"}
    assert admin_cli("workspace", "create", "exact").exit_code == 0
    raw = httpx.get(f"{server_url}/api/v1/workspaces", params={"name": "exact"}, headers=headers).json()
    assert as_json(admin_cli("workspace", "get", "exact", "-o", "json")) == raw["items"][0]
    raw_pools = httpx.get(f"{server_url}/api/v1/pools", headers=headers).json()["items"]
    assert as_json(admin_cli("pool", "list", "-o", "json")) == raw_pools
