"""Live servers for tests: an in-process uvicorn thread, or ``aicenter up`` as a real process.

Both listen on a free 127.0.0.1 port and run in development mode with cheap password hashing
(tests/support/settings.py), so that logging in costs microseconds rather than an argon2 verification.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

from aicenter.app import create_app
from tests.support.settings import ADMIN_PASSWORD, FAST_HASHING_ENV, SSH_ANY_PORT_ENV, make_settings

READY_TIMEOUT_S = 60.0  # generous: CI shares 2 cores; start-up time is measured by bench/, never asserted


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any AICENTER_* setting, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AICENTER_")}
    env.update(extra)
    return env


def executable(name: str) -> str:
    """The console script installed beside this interpreter (the one pip put there), else from PATH."""
    beside = Path(sys.executable).with_name(name)
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.fail(f"`{name}` is not installed; run pip install -e '.[test]'")
    return found


@contextmanager
def live_server(home: Path, **settings: Any) -> Iterator[str]:
    """Serve a fresh app (SQLite under ``home``) in a background thread and yield its base URL; stop it on exit.

    The SDK is synchronous, so it cannot use httpx's ASGI transport (async only); a real uvicorn server also
    covers what the CLI meets in practice: sockets, HTTP parsing, the lifespan with migrations and bootstrap.
    ``settings`` override the test defaults; unset ones still read ``AICENTER_*`` from the environment.
    """
    defaults: dict[str, Any] = {
        "token_cache_s": 0,  # tests check revocation at once
        "login_max_failures": 1000,  # tests log in with wrong passwords on purpose
    }
    app = create_app(make_settings(home, **{**defaults, **settings}), run_controllers=False)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # proxy_headers off as in `aicenter up`: the app decides whom X-Forwarded-For is trusted from.
    config = uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False, proxy_headers=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="aicenter-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()


@dataclass
class Server:
    """One ``aicenter up`` process. ``start`` waits for /api/v1/health; ``stop`` sends SIGINT and checks exit 0.

    It is the installed console script, started the way a user starts it, on SQLite in ``home`` unless ``env``
    names a database; the environment is cleared of AICENTER_* first.
    """

    home: Path
    port: int = field(default_factory=free_port)
    env: dict[str, str] = field(default_factory=dict)  # AICENTER_* settings for this server (override the defaults)
    proc: subprocess.Popen[str] | None = None
    ready_after_s: float = 0.0
    output: str = ""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.home.parent / f"{self.home.name}-server.log"

    def start(self) -> Server:
        assert self.proc is None, "already running"
        log = self.log_path.open("w")
        started = time.monotonic()
        self.proc = subprocess.Popen(
            [executable("aicenter"), "up", "--home", str(self.home), "--port", str(self.port)],
            env=clean_env(
                **{"AICENTER_ADMIN_PASSWORD": ADMIN_PASSWORD, **FAST_HASHING_ENV, **SSH_ANY_PORT_ENV, **self.env}
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
        )
        deadline = started + READY_TIMEOUT_S
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"aicenter up exited with {self.proc.returncode} before it was ready:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.stop(check=False)
                pytest.fail(f"aicenter up was not ready within {READY_TIMEOUT_S} s:\n{self.log()}")
            time.sleep(0.05)
        self.ready_after_s = time.monotonic() - started
        print(f"aicenter up ready after {self.ready_after_s:.2f} s")  # shown with -s, and on failure
        return self

    def stop(self, *, check: bool = True) -> int:
        """Ctrl-C by pid; returns the exit status, which must be 0 when ``check``."""
        assert self.proc is not None, "not running"
        self.proc.send_signal(signal.SIGINT)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait(timeout=10)
        self.proc = None
        self.output = self.log()
        if check:
            assert code == 0, f"aicenter up exited with {code} after SIGINT:\n{self.output}"
        return code

    def log(self) -> str:
        """The last 5,000 characters the server printed."""
        return self.log_path.read_text(errors="replace")[-5000:] if self.log_path.exists() else ""
