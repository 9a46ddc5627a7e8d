"""Settings: environment prefix, defaults, and refusal of weak secrets and cheap password hashing."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from aicenter.config import Settings


def test_reads_prefixed_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("AICENTER_HOME", str(tmp_path))
    monkeypatch.setenv("AICENTER_PORT", "8123")
    settings = Settings()
    assert settings.port == 8123
    assert settings.effective_database_url == f"sqlite+aiosqlite:///{tmp_path.resolve() / 'aicenter.db'}"


def test_weak_secret_refused_outside_dev(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="too weak"):
        Settings(home=tmp_path, secret_key="changeme")
    assert Settings(home=tmp_path, secret_key="changeme", dev=True).secret_key == "changeme"


def test_default_admin_password_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="well-known"):
        Settings(home=tmp_path, admin_password="admin")


def test_generated_secret_is_kept_private_and_stable(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    first = settings.resolve_secret_key()
    assert len(first) >= 32
    assert (tmp_path / "secret_key").stat().st_mode & 0o777 == 0o600
    assert Settings(home=tmp_path).resolve_secret_key() == first


def test_every_field_is_described() -> None:
    missing = [name for name, field in Settings.model_fields.items() if not field.description]
    assert missing == []


def test_password_hashing_defaults_to_production(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).password_hashing == "production"
    assert Settings(home=tmp_path, dev=True).password_hashing == "production"


def test_fast_password_hashing_refused_outside_dev(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValidationError, match=r"AICENTER_PASSWORD_HASHING=fast .* set AICENTER_DEV=1"):
        Settings(home=tmp_path, password_hashing="fast")
    monkeypatch.setenv("AICENTER_PASSWORD_HASHING", "fast")
    with pytest.raises(ValidationError, match="cheap to crack"):
        Settings(home=tmp_path)
    monkeypatch.setenv("AICENTER_DEV", "1")
    assert Settings(home=tmp_path).password_hashing == "fast"


def test_unknown_password_hashing_profile_refused(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="production"):
        Settings(home=tmp_path, dev=True, password_hashing="none")  # type: ignore[arg-type]


def test_sandbox_is_auto_by_default_and_read_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert (Settings(home=tmp_path).sandbox, Settings(home=tmp_path).sandbox_uid_base) == ("auto", 200_000)
    monkeypatch.setenv("AICENTER_SANDBOX", "bwrap")
    monkeypatch.setenv("AICENTER_SANDBOX_UID_BASE", "300000")
    settings = Settings(home=tmp_path)
    assert (settings.sandbox, settings.sandbox_uid_base) == ("bwrap", 300_000)


def test_sandbox_settings_refuse_unknown_modes_and_system_uids(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="sandbox"):
        Settings(home=tmp_path, sandbox="docker")
    with pytest.raises(ValidationError, match="sandbox_uid_base"):
        Settings(home=tmp_path, sandbox_uid_base=0)


def test_sandbox_network_is_isolated_by_default_and_host_on_request(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert Settings(home=tmp_path).sandbox_network == "isolated"
    monkeypatch.setenv("AICENTER_SANDBOX_NETWORK", "host")
    assert Settings(home=tmp_path).sandbox_network == "host"
    with pytest.raises(ValidationError, match="sandbox_network"):
        Settings(home=tmp_path, sandbox_network="bridge")  # type: ignore[arg-type]


def test_executors_default_to_local_and_read_a_comma_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(home=tmp_path).executors == ("local",)
    monkeypatch.setenv("AICENTER_EXECUTOR", " slurm , local,slurm")
    assert Settings(home=tmp_path).executors == ("slurm", "local")  # order kept, duplicates dropped


@pytest.mark.parametrize("value", ["", "kubernetes", "local,,mesos"])
def test_unknown_executors_are_refused_with_the_known_ones(tmp_path: Path, value: str) -> None:
    with pytest.raises(ValidationError, match="name one or more of local, ray, slurm"):
        Settings(home=tmp_path, executor=value)


def test_ray_needs_its_address(tmp_path: Path) -> None:
    with pytest.raises(ValidationError, match="needs the Ray head's address: set AICENTER_RAY_ADDRESS"):
        Settings(home=tmp_path, executor="ray")
    assert Settings(home=tmp_path, executor="ray", ray_address="10.0.0.1:6379").executors == ("ray",)


def test_metric_series_settings_default_and_refuse_too_short_retention(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    settings = Settings(home=tmp_path)
    assert (
        settings.metrics_raw_retention_s,
        settings.metrics_5m_retention_s,
        settings.metrics_1h_retention_s,
        settings.metrics_ingest_interval_s,
        settings.metrics_prune_interval_s,
    ) == (86_400, 90 * 86_400, 5 * 365 * 86_400, 10.0, 300.0)
    monkeypatch.setenv("AICENTER_METRICS_RAW_RETENTION_S", "7200")
    assert Settings(home=tmp_path).metrics_raw_retention_s == 7200
    with pytest.raises(ValidationError, match="metrics_raw_retention_s"):
        Settings(home=tmp_path, metrics_raw_retention_s=10)


def test_the_sampler_interval_is_off_or_at_least_a_second(tmp_path: Path) -> None:
    assert Settings(home=tmp_path).metrics_sample_interval_s == 15.0
    assert Settings(home=tmp_path, metrics_sample_interval_s=0).metrics_sample_interval_s == 0
    with pytest.raises(ValidationError, match="0 \\(off\\) or at least 1 second"):
        Settings(home=tmp_path, metrics_sample_interval_s=0.5)
