"""``aicenter ssh-key``: add from the default file, a path or stdin; list; delete by name or id; clear errors."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.integration.cli.conftest import Run


def _keygen(path: Path, comment: str) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


def _names(run: Run) -> list[str]:
    result = run("ssh-key", "list", "-o", "json")
    assert result.exit_code == 0, result.output
    return [k["name"] for k in json.loads(result.stdout)]


def test_add_list_delete(admin_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".ssh").mkdir()
    _keygen(tmp_path / ".ssh" / "id_ed25519", "admin@laptop")
    added = admin_cli("ssh-key", "add")  # ~/.ssh/id_ed25519.pub, named by its comment
    assert added.exit_code == 0, added.output
    assert "Added SSH key 'admin@laptop'" in added.stdout
    assert "SHA256:" in added.stdout

    other = _keygen(tmp_path / "ci_key", "")
    from_stdin = admin_cli("ssh-key", "add", "-", "--name", "ci", input=other + "\n")
    assert from_stdin.exit_code == 0, from_stdin.output
    by_path = admin_cli("ssh-key", "add", str(_keygen_pub(tmp_path / "desk", "")))
    assert by_path.exit_code == 0, by_path.output
    assert _names(admin_cli) == ["admin@laptop", "ci", "desk"]  # a comment-less key is named after its file

    table = admin_cli("ssh-key", "list")
    assert "FINGERPRINT" in table.stdout
    assert "never" in table.stdout

    assert admin_cli("ssh-key", "delete", "ci").exit_code == 0
    key_id = json.loads(admin_cli("ssh-key", "list", "-o", "json").stdout)[0]["id"]
    assert admin_cli("ssh-key", "delete", str(key_id)).exit_code == 0
    assert _names(admin_cli) == ["desk"]


def _keygen_pub(path: Path, comment: str) -> Path:
    _keygen(path, comment)
    return path.with_suffix(".pub")


def test_errors_are_messages(admin_cli: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    missing = admin_cli("ssh-key", "add")
    assert missing.exit_code == 2
    assert "ssh-keygen -t ed25519" in missing.output

    _keygen(tmp_path / "k", "k")
    private = admin_cli("ssh-key", "add", str(tmp_path / "k"))
    assert private.exit_code == 2
    assert "private key" in private.output

    junk = admin_cli("ssh-key", "add", "-", input="ssh-ed25519 bm90IGEga2V5\n")
    assert junk.exit_code == 2  # the server's 422, as a message
    assert "ssh_key_invalid" in junk.output
    assert "Traceback" not in junk.output

    assert admin_cli("ssh-key", "add", str(tmp_path / "k.pub")).exit_code == 0
    again = admin_cli("ssh-key", "add", str(tmp_path / "k.pub"), "--name", "again")
    assert again.exit_code == 1
    assert "already registered" in again.output

    gone = admin_cli("ssh-key", "delete", "nope")
    assert gone.exit_code == 1
    assert "no SSH key named 'nope'" in gone.output
