"""CLI tests: typer's CliRunner against a real server in a thread (tests/support/servers.py), each test with its
own CLI home."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner, Result

from aicenter.cli.main import app
from tests.support.cli import isolate_cli_home
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD

Run = Callable[..., Result]


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_server(tmp_path_factory.mktemp("cli-server")) as url:
        yield url


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's own home (config.toml), apart from the server's."""
    return isolate_cli_home(tmp_path / "cli-home", monkeypatch)


@pytest.fixture
def run(home: Path) -> Run:
    """Invoke the CLI in-process: ``run("token", "list", input=...)``."""
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None) -> Result:
        return runner.invoke(app, list(args), input=input, catch_exceptions=False)

    return invoke


@pytest.fixture
def admin_cli(run: Run, server_url: str) -> Run:
    """``run`` after `aicenter login` as the platform admin."""
    result = run("login", "--server", server_url, "--username", "admin", "--password-stdin", input=ADMIN_PASSWORD)
    assert result.exit_code == 0, result.output
    return run
