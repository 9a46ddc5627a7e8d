"""``aicenter up`` as a real process: first start prints the admin password once, restarts keep the data,
SIGINT and SIGTERM exit 0. Start-up time is measured by bench-style scripts, never asserted here.

The first-start test runs on the defaults a user gets, production password hashing included (the admin's
stored hash is checked for its parameters); the others use the cheap profile of tests/support/settings.py.
"""

from __future__ import annotations

import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from aicenter.client import Client
from tests.support.servers import clean_env, free_port
from tests.support.settings import FAST_HASHING_ENV, SSH_ANY_PORT_ENV

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

READY = re.compile(r"aicenter is ready at (http://\S+) \(console\)")
PASSWORD = re.compile(r"Created platform admin 'admin' with password: (\S+)")


class Up:
    """One ``aicenter up`` process; collects its output until it is ready."""

    def __init__(self, home: Path, *extra: str, env: dict[str, str] | None = None) -> None:
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "aicenter.cli", "up", "--home", str(home), "--port", str(self.port), *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=clean_env(**(env or {})),
        )
        self.lines: list[str] = []
        deadline = time.monotonic() + 60
        assert self.proc.stdout is not None
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if READY.search(line):
                return
        self.proc.kill()
        raise AssertionError("aicenter up did not become ready:\n" + "\n".join(self.lines))

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self, sig: int) -> tuple[int, str]:
        self.proc.send_signal(sig)
        rest, _ = self.proc.communicate(timeout=30)
        return self.proc.returncode, "\n".join(self.lines) + "\n" + rest


def test_first_start_prints_password_once_and_restarts_keep_data(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = Up(home)
    output = "\n".join(first.lines)
    match = PASSWORD.search(output)
    assert match, output
    password = match.group(1)
    assert f"aicenter is ready at {first.url} (console) — API docs at /api/docs" in output
    assert httpx.get(first.url + "/api/v1/health").status_code == 200
    with Client(first.url) as api:
        api.login("admin", password)
        api.create_workspace("kept")
    code, output = first.stop(signal.SIGINT)
    assert code == 0, output
    assert "Traceback" not in output

    second = Up(home)
    with Client(second.url) as api:
        api.login("admin", password)
        assert [w.name for w in api.list_workspaces(name="kept")] == ["kept"]
    code, output = second.stop(signal.SIGTERM)
    assert code == 0, output
    assert "password" not in output
    assert "Traceback" not in output
    assert (home / "aicenter.db").exists()
    with sqlite3.connect(home / "aicenter.db") as db:
        (stored,) = db.execute("SELECT password_hash FROM users WHERE username = 'admin'").fetchone()
    assert stored.startswith("$argon2id$v=19$m=65536,t=3,p=4$"), "the default is not production hashing"


def test_workers_share_the_port(tmp_path: Path) -> None:
    up = Up(tmp_path / "home", "--workers", "2", env={**FAST_HASHING_ENV, **SSH_ANY_PORT_ENV})
    output = "\n".join(up.lines)
    assert PASSWORD.search(output), output
    assert output.count("Created platform admin") == 1
    for _ in range(4):
        assert httpx.get(up.url + "/api/v1/health").status_code == 200
    code, output = up.stop(signal.SIGTERM)
    assert code == 0, output


def test_without_a_sandbox_up_says_so_and_refuses_a_second_user(tmp_path: Path) -> None:
    password = "a-strong-admin-password-1"
    up = Up(tmp_path / "home", env={"AICENTER_SANDBOX": "off", "AICENTER_ADMIN_PASSWORD": password})
    output = "\n".join(up.lines)
    assert "NO SANDBOX: AICENTER_SANDBOX=off." in output, output
    assert "SINGLE-USER MODE" in output
    with Client(up.url) as api:
        api.login("admin", password)
        response = httpx.post(
            up.url + "/api/v1/users",
            json={"username": "second", "password": "another-strong-password-2"},
            headers={"Authorization": f"Bearer {api.token}"},
        )
    assert response.status_code == 409, response.text
    body = response.json()
    assert body["error"]["code"] == "single_user_mode"
    assert "install bubblewrap" in body["error"]["message"].lower()
    users = httpx.get(up.url + "/api/v1/users", headers={"Authorization": f"Bearer {api.token}"}).json()
    assert [u["username"] for u in users["items"]] == ["admin"], "nothing was created"
    code, output = up.stop(signal.SIGINT)
    assert code == 0, output
    assert output.count("SINGLE-USER MODE") == 1, "said once"


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--executor", "kubernetes"), "name one or more of local, ray, slurm"),
        (("--executor", "ray"), "aicenter up --ray-address"),
    ],
)
def test_bad_engine_flags_are_refused_before_anything_is_created(
    tmp_path: Path, flags: tuple[str, ...], says: str
) -> None:
    home = tmp_path / "home"
    result = subprocess.run(
        [sys.executable, "-m", "aicenter.cli", "up", "--home", str(home), "--port", str(free_port()), *flags],
        capture_output=True,
        text=True,
        env=clean_env(**FAST_HASHING_ENV, **SSH_ANY_PORT_ENV),
        timeout=60,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("error: bad_config:"), result.stderr
    assert says in result.stderr
    assert "Traceback" not in result.stderr
    assert not (home / "aicenter.db").exists()
