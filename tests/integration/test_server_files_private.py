"""The server's own files (home, store, SQLite database and its WAL, generated secret key, blobs) are private to
its Unix user: created so on a fresh home, tightened on an old one, and unreadable to a second local account."""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi import FastAPI

from aicenter.app import create_app
from aicenter.config import Settings
from tests.support.settings import make_settings


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def open_parent() -> Iterator[Path]:
    """A directory every account may traverse (pytest's own tmp dirs are 0700, which would hide the home anyway)."""
    parent = Path(tempfile.mkdtemp(prefix="aic-home-"))
    parent.chmod(0o755)
    yield parent
    shutil.rmtree(parent, ignore_errors=True)


def _settings(home: Path) -> Settings:
    # No secret key: the server generates one and keeps it in the home.
    return make_settings(home, secret_key=None)


WAL_MODES: dict[str, int] = {}


async def _start_and_write(settings: Settings) -> tuple[FastAPI, str]:
    """Run the app's start-up (migrations, bootstrap: SQLite writes its -wal and -shm) and store one blob; the
    modes of the -wal and -shm files while the server runs go to WAL_MODES."""
    app = create_app(settings, run_controllers=False)
    async with app.router.lifespan_context(app):
        sha, _ = app.state.ctx.store.put_bytes(b"tenant data\n")
        db_file = settings.home_dir / "aicenter.db"
        for suffix in ("-wal", "-shm"):
            WAL_MODES[suffix] = _mode(db_file.with_name(db_file.name + suffix))
    return app, sha


async def test_a_fresh_home_is_created_private(open_parent: Path) -> None:
    settings = _settings(open_parent / "home")
    app, sha = await _start_and_write(settings)
    home = settings.home_dir
    db_file = home / "aicenter.db"
    assert (_mode(home), _mode(settings.store_dir)) == (0o700, 0o700)
    assert _mode(db_file) == 0o600
    assert WAL_MODES == {"-wal": 0o600, "-shm": 0o600}  # SQLite gives them the database file's mode
    assert _mode(home / "secret_key") == 0o600
    assert _mode(app.state.ctx.store.path(sha)) == 0o444
    for path in (home, settings.store_dir, db_file):
        assert path.stat().st_uid == os.getuid()


async def test_an_old_home_readable_by_others_is_tightened_at_start_up(
    open_parent: Path, caplog: pytest.LogCaptureFixture
) -> None:
    home = open_parent / "home"
    settings = _settings(home)
    await _start_and_write(settings)
    # What an older release left: everything readable by every local account.
    for path, mode in (
        (home, 0o755),
        (home / "store", 0o755),
        (home / "aicenter.db", 0o644),
        (home / "secret_key", 0o644),
    ):
        path.chmod(mode)

    with caplog.at_level(logging.WARNING, logger="aicenter"):
        await _start_and_write(settings)

    assert (_mode(home), _mode(home / "store")) == (0o700, 0o700)
    assert (_mode(home / "aicenter.db"), _mode(home / "secret_key")) == (0o600, 0o600)
    tightened = [r.getMessage() for r in caplog.records if "private" in r.getMessage()]
    assert len(tightened) == 1, tightened
    assert f"{home}: 0755 -> 0700" in tightened[0]
    assert f"{home / 'aicenter.db'}: 0644 -> 0600" in tightened[0]
    assert f"{home / 'secret_key'}: 0644 -> 0600" in tightened[0]


@pytest.fixture
def probe_user() -> Iterator[str]:
    """A throwaway system account: the "second local user" of the host."""
    if os.geteuid() != 0:
        pytest.skip("creating a second Unix user needs root (CI and production run the server as root)")
    if shutil.which("useradd") is None or shutil.which("runuser") is None:
        pytest.skip("useradd and runuser are needed to create and act as a second Unix user")
    name = f"aic-probe-{secrets.token_hex(4)}"
    subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/bin/sh", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], check=False)


def _as(user: str, *command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user, "--", *command],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=30,
        check=False,
    )


async def test_a_second_local_user_cannot_read_the_home(open_parent: Path, probe_user: str) -> None:
    settings = _settings(open_parent / "home")
    app, sha = await _start_and_write(settings)
    home = settings.home_dir
    # The probe works: the same account reads a world-readable file next to the home.
    control = open_parent / "public.txt"
    control.write_text("public\n")
    control.chmod(0o644)
    assert _as(probe_user, "cat", str(control)).stdout == "public\n"

    attempts = {
        "read the database": _as(probe_user, "cat", str(home / "aicenter.db")),
        "list the home": _as(probe_user, "ls", str(home)),
        "read the secret key": _as(probe_user, "cat", str(home / "secret_key")),
        "read a blob": _as(probe_user, "cat", str(app.state.ctx.store.path(sha))),
        "list the store": _as(probe_user, "ls", str(settings.store_dir)),
    }
    for what, result in attempts.items():
        assert result.returncode != 0, (what, result.stdout)
        assert "Permission denied" in result.stderr, (what, result.stderr)
        assert result.stdout == "", what
