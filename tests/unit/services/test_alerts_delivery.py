"""Alert delivery rules that need no server: backoff, channel targets, e-mail without an SMTP host, and the
CLI's durations."""

from __future__ import annotations

from pathlib import Path

import pytest

from aicenter.cli.alerts import duration_s
from aicenter.cli.common import CliError
from aicenter.config import Settings
from aicenter.core.errors import ValidationFailed
from aicenter.services import alerts


def test_backoff_doubles_from_ten_seconds_up_to_an_hour() -> None:
    assert [alerts.backoff_s(n) for n in (1, 2, 3, 4)] == [10.0, 20.0, 40.0, 80.0]
    assert alerts.backoff_s(30) == 3600.0


@pytest.mark.parametrize(
    ("kind", "target"),
    [("webhook", "http://hooks.example/x"), ("webhook", "https://10.0.0.1:8443/a?b=c"), ("email", "ops@example.com")],
)
def test_good_targets(kind: str, target: str) -> None:
    assert alerts.check_target(kind, f" {target} ") == target


@pytest.mark.parametrize(
    ("kind", "target"),
    [
        ("webhook", "ftp://example.com"),
        ("webhook", "http://"),
        ("webhook", "example.com/hook"),
        ("email", "not-an-address"),
        ("email", "a@b.c, d@e.f"),
        ("sms", "+100"),
    ],
)
def test_bad_targets_name_the_field(kind: str, target: str) -> None:
    with pytest.raises(ValidationFailed) as caught:
        alerts.check_target(kind, target)
    assert caught.value.details["field"] in ("target", "kind")


async def test_email_without_smtp_host_fails_with_a_clear_error(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, smtp_host="")
    error = await alerts.send(settings, "email", "ops@example.com", {"status": "firing", "summary": "x"})
    assert error == "no SMTP server configured (AICENTER_SMTP_HOST)"


def test_cli_durations() -> None:
    assert [duration_s(v, "--for") for v in ("90", "90s", "5m", "2h", "1d")] == [90, 90, 300, 7200, 86400]
    with pytest.raises(CliError):
        duration_s("5 minutes", "--for")
