"""CLI tests that need no server: each test with its own CLI home."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import isolate_cli_home


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The CLI's own home (config.toml)."""
    return isolate_cli_home(tmp_path / "cli-home", monkeypatch)
