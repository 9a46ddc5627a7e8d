"""The catalog through the real `aicenter` command against a real `aicenter up` process: push, list, share, copy,
pull, and one-line errors."""

from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    """The installed ``aicenter`` as a process: its exit codes and one-line errors are what this module tests."""
    home = tmp_path / "cli-home"
    home.mkdir()
    return Cli(home, process=True)


def _login(cli: Cli, server: Server, profile: str, username: str, password: str) -> None:
    cli.run("-P", profile, "login", "--server", server.url, "--username", username, "--password-stdin", stdin=password)


def _digest(root: Path) -> dict[str, str]:
    return {
        p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def test_push_share_copy_pull(server: Server, cli: Cli, tmp_path: Path) -> None:
    _login(cli, server, "admin", "admin", ADMIN_PASSWORD)
    for user in ("alice", "bob"):
        cli.run("-P", "admin", "user", "create", user, "--password-stdin", stdin=f"{user}-Passw0rd-1")
    cli.run("-P", "admin", "workspace", "create", "vision")
    for user in ("alice", "bob"):
        cli.run("-P", "admin", "member", "add", user, "--workspace", "vision")
        _login(cli, server, user, user, f"{user}-Passw0rd-1")

    rng = random.Random(7)
    src = tmp_path / "cats"
    for i in range(40):
        path = src / f"class{i % 4}" / f"{i:03d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(0, 20_000)))
    (src / "labels.csv").write_text("file,label\n000.jpg,cat\n")

    pushed = cli.run("-P", "alice", "dataset", "push", str(src), "--name", "cats", "--no-progress", "-o", "json")
    version = json.loads(pushed.stdout)
    assert (version["ref"], version["file_count"]) == ("cats:1", 41)
    assert pushed.stderr == ""  # no progress bar when asked not to draw one

    listed = cli.json("-P", "alice", "dataset", "list")
    assert [i["name"] for i in listed] == ["cats"]
    table = cli.run("-P", "alice", "dataset", "versions", "cats").stdout
    assert "cats:1" in table
    assert "private" in table

    shared = cli.json("-P", "alice", "dataset", "share", "cats:1", "--workspace", "vision")
    assert (shared["visibility"], shared["shared_workspace_name"]) == ("workspace", "vision")
    assert [i["name"] for i in cli.json("-P", "bob", "dataset", "list", "--scope", "workspace")] == ["cats"]

    copied = cli.json("-P", "bob", "dataset", "copy", "alice/cats:1", "--name", "my-cats")
    assert (copied["ref"], copied["file_count"]) == ("my-cats:1", 41)
    dest = tmp_path / "bob-cats"
    pulled = cli.run("-P", "bob", "dataset", "pull", "my-cats:1", str(dest), "--no-progress")
    assert "41 files" in pulled.stdout
    assert _digest(dest) == _digest(src)
    again = cli.json("-P", "bob", "dataset", "pull", "my-cats", str(dest), "--no-progress")
    assert (again["downloaded_files"], again["skipped_files"]) == (0, 41)

    usage = cli.json("-P", "admin", "workspace", "storage", "vision", "--limit", "1Gi")
    assert usage["limit_bytes"] == 1 << 30


def test_errors_are_one_line(server: Server, cli: Cli, tmp_path: Path) -> None:
    _login(cli, server, "admin", "admin", ADMIN_PASSWORD)

    missing = cli.run("-P", "admin", "dataset", "get", "nothing-here:3", check=False)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: not_found: ")
    assert len(missing.stderr.strip().splitlines()) == 1
    assert "Traceback" not in missing.stderr

    bad = cli.run("-P", "admin", "dataset", "pull", "a:b:c", str(tmp_path / "x"), "--no-progress", check=False)
    assert bad.returncode in (1, 2)
    assert bad.stderr.startswith("error: ")
    assert len(bad.stderr.strip().splitlines()) == 1

    src = tmp_path / "linked"
    src.mkdir()
    (src / "a.txt").write_text("a")
    (src / "b").symlink_to(src / "a.txt")
    refused = cli.run("-P", "admin", "dataset", "push", str(src), "--name", "linked", "--no-progress", check=False)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        f"error: validation_failed: {src / 'b'} is a symbolic link: symlinks cannot be pushed "
        "(copy the target or remove it) (field: source)"
    ]
