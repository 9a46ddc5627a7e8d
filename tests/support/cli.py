"""The CLI's own home for in-process CLI tests, apart from any server's and from the caller's environment."""

from __future__ import annotations

from pathlib import Path

import pytest

# Settings that would point the CLI at another profile, server or token than the test's own config file.
_CLI_ENV = ("AICENTER_PROFILE", "AICENTER_SERVER", "AICENTER_TOKEN", "AICENTER_API_URL")


def isolate_cli_home(path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Point ``AICENTER_HOME`` (config.toml) at ``path`` and clear the settings that would override it."""
    monkeypatch.setenv("AICENTER_HOME", str(path))
    for name in _CLI_ENV:
        monkeypatch.delenv(name, raising=False)
    return path
