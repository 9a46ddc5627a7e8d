"""An alert on a failed job reaches a real webhook receiver and a real SMTP inbox, through a real `aicenter up`
(its evaluator and delivery loops running) and the real `aicenter` command."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server
from tests.support.receivers import Inbox, WebhookReceiver, smtp_server, webhook_receiver

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SPEC = """\
name: doomed
tasks:
  - name: worker
    replicas: 1
    resources: {cpu: 100m, memory: 64Mi}
    command: echo failing on purpose; exit 3
"""
DEADLINE_S = 90.0  # generous: the machine is shared; evaluation runs every second here


# One server for the module (a start costs seconds on a shared machine): the tests add what they check under
# names of their own.
@pytest.fixture(scope="module")
def receivers() -> Iterator[tuple[Inbox, int, WebhookReceiver]]:
    with smtp_server() as (inbox, port), webhook_receiver() as hook:
        yield inbox, port, hook


@pytest.fixture(scope="module")
def alerting_server(
    tmp_path_factory: pytest.TempPathFactory, receivers: tuple[Inbox, int, WebhookReceiver]
) -> Iterator[Server]:
    _, port, _ = receivers
    env = {
        "AICENTER_SMTP_HOST": "127.0.0.1",
        "AICENTER_SMTP_PORT": str(port),
        "AICENTER_SMTP_FROM": "alerts@aicenter.test",
        "AICENTER_ALERT_EVAL_INTERVAL_S": "1",
    }
    srv = Server(tmp_path_factory.mktemp("alerts") / "home", env=env).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


def _until(what: str, check: Callable[[], bool]) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while not check():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_failed_job_alert_reaches_webhook_and_inbox(
    alerting_server: Server, cli: Cli, tmp_path: Path, receivers: tuple[Inbox, int, WebhookReceiver]
) -> None:
    inbox, _, hook = receivers
    cli.run("login", "--server", alerting_server.url, "--username", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
    cli.run("alert", "channel-add", "ops-hook", "--webhook", f"{hook.url}/ok")
    cli.run("alert", "channel-add", "ops-mail", "--email", "ops@example.com")
    assert "delivered" in cli.run("alert", "test", "ops-mail").stdout
    assert "delivered" in cli.run("alert", "test", "ops-hook").stdout
    assert [m["Subject"] for m in inbox.to("ops@example.com")] == [
        "[aicenter] TEST test message to channel ops-mail from admin"
    ]

    # A bad rule is a one-line message naming the position, not a traceback.
    bad = cli.run("alert", "rule-add", "hot", "accelerator.temperature_celsius >", check=False)
    assert bad.returncode != 0
    assert "invalid_expression" in bad.stderr
    assert "position 33" in bad.stderr
    assert "Traceback" not in bad.stderr

    spec = tmp_path / "job.yaml"
    spec.write_text(SPEC)
    job_id = json.loads(cli.run("job", "submit", str(spec), "-o", "json").stdout)["id"]

    def fired() -> bool:
        return any(b.get("status") == "firing" and b.get("rule") == "job-failed" for b in hook.bodies("/ok"))

    _until("the webhook's firing notification", fired)
    [body] = [b for b in hook.bodies("/ok") if b.get("rule") == "job-failed"]
    assert body["labels"]["job"] == str(job_id)
    assert body["labels"]["job_name"] == "doomed"
    _until("the alert e-mail", lambda: any("FIRING" in m["Subject"] for m in inbox.to("ops@example.com")))
    [mail] = [m for m in inbox.to("ops@example.com") if "FIRING" in m["Subject"]]
    assert "job-failed" in mail["Subject"]
    assert mail["From"] == "alerts@aicenter.test"

    alerts = cli.json("alert", "list")
    assert [(a["rule"], a["labels"]["job"]) for a in alerts] == [("job-failed", str(job_id))]
    kinds = [e["kind"] for e in cli.json("events", "--kind", "alert.")]
    assert kinds == ["alert.firing"]


@pytest.mark.browser
def test_alerts_and_events_pages_in_a_browser(alerting_server: Server, browser_page: Any) -> None:
    page = browser_page
    base = alerting_server.url
    page.goto(f"{base}/login")
    page.fill("#login-username", "admin")
    page.fill("#login-password", ADMIN_PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")

    page.goto(f"{base}/alerts")
    assert page.locator("[data-testid=alerts-table]").is_visible()
    page.click("[data-testid=rule-add-toggle]")
    page.fill("#rule-add-name", "gpu-hot")
    page.fill("#rule-add-expression", "accelerator.temperature_celsius >")
    with page.expect_navigation():
        page.click("[data-testid=rule-add-submit]")
    # The mistake is shown at its field, pointing at the position; what was typed stays.
    error = page.locator("[data-testid=rule-add-expression-error]")
    assert "position 33" in error.inner_text()
    assert page.input_value("#rule-add-name") == "gpu-hot"
    page.fill("#rule-add-expression", "accelerator.temperature_celsius > 90")
    with page.expect_navigation():
        page.click("[data-testid=rule-add-submit]")
    assert page.locator("[data-testid=rule-row][data-name=gpu-hot]").is_visible()
    with page.expect_navigation():
        page.click("[data-testid=rule-toggle-gpu-hot]")
    assert "no" in page.locator("[data-testid=rule-row][data-name=gpu-hot]").inner_text()

    # The server registered this host at start: the event log says so.
    page.goto(f"{base}/events")
    assert page.locator("[data-testid=event-row][data-kind='node.joined']").count() >= 1
    page.click("[data-testid=nav-alerts]")
    page.wait_for_url(f"{base}/alerts")
