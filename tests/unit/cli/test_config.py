"""The profile file: atomic 0600 writes, profiles, environment overrides. No server needed."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from aicenter.cli.config import DEFAULT_SERVER, CliConfig, Profile, config_path


def test_missing_file_is_an_empty_config(home: Path) -> None:
    cfg = CliConfig.load()
    assert cfg.profiles == {}
    assert cfg.active().name == "default"
    assert cfg.active().server == DEFAULT_SERVER
    assert cfg.active().token is None


def test_save_is_0600_and_round_trips(home: Path) -> None:
    cfg = CliConfig.load()
    cfg.profiles["prod"] = Profile("prod", "https://ai.example.org", "aic_secret", "alice")
    cfg.current = "prod"
    cfg.save()
    path = config_path()
    assert path == home / "config.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert not list(home.glob(".*.tmp"))
    again = CliConfig.load()
    assert again.current == "prod"
    assert again.active() == Profile("prod", "https://ai.example.org", "aic_secret", "alice")


def test_environment_overrides(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = CliConfig(profiles={"a": Profile("a", "http://a", "ta"), "b": Profile("b", "http://b", "tb")}, current="a")
    assert cfg.active().server == "http://a"
    assert cfg.active("b").token == "tb"
    monkeypatch.setenv("AICENTER_PROFILE", "b")
    assert cfg.active().name == "b"
    monkeypatch.setenv("AICENTER_TOKEN", "from-env")
    monkeypatch.setenv("AICENTER_SERVER", "http://env")
    assert (cfg.active().server, cfg.active().token) == ("http://env", "from-env")
    assert cfg.profiles["b"].token == "tb"  # overrides never leak into what is saved


def test_api_url_of_a_job_is_used_without_a_profile(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AICENTER_API_URL", "http://api:8000")
    assert CliConfig().active().server == "http://api:8000"


def test_broken_file_is_reported(home: Path) -> None:
    home.mkdir(parents=True)
    (home / "config.toml").write_text("current = [")
    with pytest.raises(ValueError, match="not valid TOML"):
        CliConfig.load()
