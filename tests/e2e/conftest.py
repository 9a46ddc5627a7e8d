"""A real ``aicenter up`` process on a temporary home and a free port, the CLI (in this process, or as a subprocess
where the command itself is under test), and Chromium.

The server (tests/support/servers.py) is the installed console script, started the way a user starts it and
stopped with SIGINT (Ctrl-C), which must exit 0. It runs on SQLite (the embedded shape) in development mode with
cheap password hashing: the environment is cleared of AICENTER_* first.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest
from typer.testing import CliRunner

from aicenter.cli.main import app as cli_app
from tests.support.postgres import fresh_database
from tests.support.servers import Server, clean_env, executable
from tests.support.settings import ADMIN_PASSWORD

# Test modules import the server and its admin password from here, beside the fixtures.
__all__ = ["ADMIN_PASSWORD", "Cli", "Server", "signed_in"]

CHROMIUM = Path("/usr/bin/chromium")
# Flags for a closed network and a root user: without the background-networking ones Chromium keeps trying
# to reach Google's hosts, and as root it refuses to start without --no-sandbox.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


@pytest.fixture(scope="module", autouse=True)
def _reap_replicas(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Once a module is done, kill what its servers left running under this worker's temporary directory.

    Replicas outlive their server by design (a restarted server adopts them), so a service or notebook a test
    did not stop would otherwise run on, sandboxed, through the rest of the session and beyond it. Every run
    directory of the module's servers lies under the base temp directory (one per xdist worker; a worker runs a
    module whole), and killing a sandbox's bwrap ends everything in its PID namespace.
    """
    yield
    base = str(tmp_path_factory.getbasetemp())
    for proc in psutil.process_iter(["pid", "cmdline"]):
        with contextlib.suppress(psutil.Error):
            if proc.pid != os.getpid() and base in " ".join(proc.info["cmdline"] or ()):
                proc.kill()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    """A started server on a fresh home; stopped (and checked to exit 0 on SIGINT) after the test."""
    srv = Server(tmp_path / "home").start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


@dataclass
class Cli:
    """The ``aicenter`` command with its own home (profiles in ``home/config.toml``).

    In this process by default (typer's CliRunner, with the environment the process would get): an ``aicenter``
    process costs ~0.7 s of CPU in interpreter start and imports (httpx, typer, the SDK's models), and the e2e
    journeys run ~250 commands, on 2 CI cores. ``process=True`` starts the installed console script instead, for
    the tests about the command itself (tests/e2e/test_jobs_cli.py, test_catalog_cli.py) and anything that must
    outlive a call.
    """

    home: Path
    process: bool = False

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = self._spawn(args, stdin) if self.process else self._invoke(args, stdin)
        if check:
            assert result.returncode == 0, f"aicenter {' '.join(args)} exited {result.returncode}:\n{result.stderr}"
            assert "Traceback" not in result.stderr, result.stderr
        return result

    def _spawn(self, args: tuple[str, ...], stdin: str | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [executable("aicenter"), *args],
            input=stdin,
            capture_output=True,
            text=True,
            env=clean_env(AICENTER_HOME=str(self.home)),
            timeout=60,
            check=False,
        )

    def _invoke(self, args: tuple[str, ...], stdin: str | None) -> subprocess.CompletedProcess[str]:
        # The process's environment: no AICENTER_* of this one, this CLI's home.
        env: dict[str, str | None] = {name: None for name in os.environ if name.startswith("AICENTER_")}
        env["AICENTER_HOME"] = str(self.home)
        outcome = CliRunner().invoke(cli_app, list(args), input=stdin, env=env, catch_exceptions=True)
        stderr = outcome.stderr
        if outcome.exception is not None and not isinstance(outcome.exception, SystemExit):
            # What the interpreter prints for an uncaught exception, so that checks for a traceback still see it.
            stderr += "".join(traceback.format_exception(outcome.exception))
        return subprocess.CompletedProcess(["aicenter", *args], outcome.exit_code, outcome.stdout, stderr)

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "-o", "json").stdout)


def signed_in(tmp_path: Path, server: Server, username: str, password: str) -> Cli:
    """A signed-in ``aicenter`` CLI with its own home."""
    home = tmp_path / f"cli-{username}"
    home.mkdir()
    cli = Cli(home)
    login = cli.run("login", "--server", server.url, "--username", username, "--password-stdin", stdin=password + "\n")
    assert username in login.stdout
    return cli


@pytest.fixture
def cli(tmp_path: Path) -> Cli:
    home = tmp_path / "cli-home"
    home.mkdir()
    return Cli(home)


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A throwaway PostgreSQL database for one server; dropped (with its connections) afterwards."""
    with fresh_database("aicenter_e2e") as url:
        yield url


@pytest.fixture(scope="session")
def chromium_path() -> Path:
    """Debian's Chromium; never a downloaded browser. Missing: skipped on a laptop, a failure in CI."""
    if not CHROMIUM.exists():
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing; .ci/run must apt-get install chromium")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium)")
    return CHROMIUM


@pytest.fixture
def browser_page(chromium_path: Path) -> Iterator[Any]:
    """A Playwright page in headless Debian Chromium, with a fresh profile."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium_path), args=CHROMIUM_ARGS)
        try:
            context = browser.new_context()
            context.set_default_timeout(15_000)
            yield context.new_page()
        finally:
            browser.close()
