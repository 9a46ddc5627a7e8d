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
from tests.support.receivers import webhook_receiver


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


async def test_a_workspace_webhook_reaches_no_private_address_unless_its_network_is_allowed(tmp_path: Path) -> None:
    """A workspace admin's channel must not make the server call (or, through the channel test, probe) services
    inside the center; a platform admin's channel may, and an allowed network opens it to workspaces."""
    body = {"status": "firing", "summary": "x"}
    with webhook_receiver() as receiver:
        settings = Settings(home=tmp_path)
        for url in (f"{receiver.url}/ws", f"http://localhost:{receiver.url.rsplit(':', 1)[1]}/ws"):
            error = await alerts.send(settings, "webhook", url, body, workspace_id=7)
            assert error is not None
            assert "private address" in error
            assert "AICENTER_ALERT_WEBHOOK_PRIVATE_NETWORKS" in error
        assert receiver.bodies("/ws") == []  # refused before any connection

        assert await alerts.send(settings, "webhook", f"{receiver.url}/platform", body) is None
        allowed = Settings(home=tmp_path, alert_webhook_private_networks=["127.0.0.0/8"])
        assert await alerts.send(allowed, "webhook", f"{receiver.url}/ws", body, workspace_id=7) is None
        assert receiver.bodies("/platform") == receiver.bodies("/ws") == [body]


def test_allowed_webhook_networks_are_checked_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="AICENTER_ALERT_WEBHOOK_PRIVATE_NETWORKS: 'intranet' is neither"):
        Settings(home=tmp_path, alert_webhook_private_networks=["intranet"])
