"""The first admin's password: never printed by a start that cannot listen, and recoverable on the server's host
with ``aicenter admin reset-password`` (no API, no sign-in), on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import os
import pty
import select
import selectors
import signal
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import Cli
from tests.support.servers import READY_TIMEOUT_S, Server, clean_env, free_port
from tests.support.servers import executable as _executable
from tests.support.settings import ADMIN_PASSWORD

# A real server process: with the slow tests (README).
pytestmark = [pytest.mark.slow, pytest.mark.e2e]

NEW_PASSWORD = "reset-Passw0rd-42"


def _aicenter(*args: str, stdin: str | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_executable("aicenter"), *args],
        input=stdin,
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=120,
        check=False,
    )


def _login(url: str, password: str) -> httpx.Response:
    return httpx.post(f"{url}/api/v1/auth/login", json={"username": "admin", "password": password}, timeout=30)


def _first_start_output(home: Path, port: int) -> str:
    """Run ``aicenter up`` without AICENTER_ADMIN_PASSWORD until it is ready; its stdout up to then."""
    proc = subprocess.Popen(
        [_executable("aicenter"), "up", "--home", str(home), "--port", str(port)],
        env=clean_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + READY_TIMEOUT_S
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        try:
            while not any("is ready at" in line for line in lines):
                assert time.monotonic() < deadline, "".join(lines)
                if sel.select(timeout=1):
                    line = proc.stdout.readline()
                    assert line, f"aicenter up exited with {proc.wait()}:\n{''.join(lines)}"
                    lines.append(line)
        finally:
            proc.send_signal(signal.SIGINT)
            assert proc.wait(timeout=30) == 0
    return "".join(lines)


def _reset_on_a_terminal(home: list[str], env: dict[str, str], answers: list[str]) -> str:
    """Run ``admin reset-password admin`` on a pseudo-terminal, answering its prompts in turn; its output."""
    main, child = pty.openpty()
    proc = subprocess.Popen(
        [_executable("aicenter"), "admin", "reset-password", "admin", *home],
        stdin=child, stdout=child, stderr=child, env=clean_env(**env), close_fds=True,
    )  # fmt: skip
    os.close(child)
    output = b""
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([main], [], [], 0.5)
            if ready:
                try:
                    chunk = os.read(main, 4096)
                except OSError:  # the child closed the terminal
                    break
                if not chunk:
                    break
                output += chunk
                if output.endswith((b"password: ", b"confirmation: ")) and answers:  # a prompt waits
                    os.write(main, answers.pop(0).encode() + b"\n")
            elif proc.poll() is not None:
                break
    finally:
        os.close(main)
    assert proc.wait(timeout=30) == 0, output.decode(errors="replace")
    return output.decode(errors="replace")


def test_up_on_a_busy_port_fails_clearly_and_creates_no_admin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        busy = _aicenter("up", "--home", str(home), "--port", str(port))
        busy_workers = _aicenter("up", "--home", str(home), "--port", str(port), "--workers", "2")
    assert busy.returncode == 1, busy.stderr
    assert busy.stderr.startswith(f"error: port_in_use: cannot listen on 127.0.0.1:{port}"), busy.stderr
    assert "--port" in busy.stderr
    assert "Traceback" not in busy.stderr
    assert "password" not in busy.stdout
    assert not (home / "aicenter.db").exists()  # nothing was created: no database, no admin
    assert (busy_workers.returncode, busy_workers.stderr) == (1, busy.stderr)

    first = _first_start_output(home, free_port())
    assert "Created platform admin 'admin' with password: " in first
    password = first.split("with password: ", 1)[1].split()[0]

    server = Server(home).start()  # its AICENTER_ADMIN_PASSWORD does not replace the admin made above
    try:
        assert _login(server.url, password).status_code == 200
        assert _login(server.url, ADMIN_PASSWORD).status_code == 401
    finally:
        server.stop()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_env(request: pytest.FixtureRequest) -> dict[str, str]:
    """The server's database setting as its operator's shell has it: none for SQLite under the home."""
    return {} if request.param == "sqlite" else {"AICENTER_DATABASE_URL": request.getfixturevalue("pg_url")}


def test_reset_password_on_the_servers_database_signs_the_admin_in_again(
    tmp_path: Path, cli: Cli, database_env: dict[str, str]
) -> None:
    # No token cache: the revocation is checked at once, not within AICENTER_TOKEN_CACHE_S (2 s by default).
    server = Server(tmp_path / "home", env={**database_env, "AICENTER_TOKEN_CACHE_S": "0"}).start()
    try:
        cli.run("login", "--server", server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
        assert cli.run("whoami").returncode == 0
        home = ["--home", str(server.home)]

        reset = _aicenter(
            "admin", "reset-password", "admin", *home, "--password-stdin", stdin=NEW_PASSWORD, **database_env
        )
        assert reset.returncode == 0, reset.stderr
        assert reset.stdout.startswith("password of user 'admin' reset; 1 console session(s) and CLI login(s) revoked")

        assert _login(server.url, ADMIN_PASSWORD).status_code == 401
        signed_in = _login(server.url, NEW_PASSWORD)
        assert signed_in.status_code == 200, signed_in.text
        token = signed_in.json()["token"]

        old_login = cli.run("whoami", check=False)  # the CLI's login token was revoked
        assert old_login.returncode == 1
        assert "revoked" in old_login.stderr

        audit = httpx.get(
            f"{server.url}/api/v1/audit-events", params={"action": "user.reset_password"},
            headers={"Authorization": f"Bearer {token}"}, timeout=30,
        )  # fmt: skip
        assert audit.status_code == 200, audit.text
        entries = [e for e in audit.json()["items"] if e["action"] == "user.reset_password"]
        assert len(entries) == 1
        assert entries[0]["details"] == {"revoked_sign_ins": 1}
        assert entries[0]["actor_name"].startswith("host:")

        generated = _aicenter("admin", "reset-password", "admin", *home, "--generate", "-o", "json", **database_env)
        assert generated.returncode == 0, generated.stderr
        assert _login(server.url, json.loads(generated.stdout)["password"]).status_code == 200

        unknown = _aicenter("admin", "reset-password", "nobody", *home, "--generate", **database_env)
        assert unknown.returncode == 1
        assert unknown.stderr.startswith('error: not_found: no user is named "nobody"'), unknown.stderr
        assert "Traceback" not in unknown.stderr

        prompted = _reset_on_a_terminal(
            home, database_env, ["first-Try-123", "other-Try-456", NEW_PASSWORD, NEW_PASSWORD]
        )
        assert "do not match" in prompted
        assert "password of user 'admin' reset" in prompted
        assert _login(server.url, NEW_PASSWORD).status_code == 200

        weak = _aicenter("admin", "reset-password", "admin", *home, "--password-stdin", stdin="short\n", **database_env)
        assert weak.returncode == 2
        assert "at least 8 characters" in weak.stderr
    finally:
        server.stop()


def test_reset_password_without_a_database_says_where_it_looked(tmp_path: Path) -> None:
    result = _aicenter("admin", "reset-password", "admin", "--home", str(tmp_path / "empty"), "--generate")
    assert result.returncode == 1
    assert result.stderr.startswith(f"error: not_found: no aicenter database in {tmp_path / 'empty'}")
    assert not (tmp_path / "empty").exists()
