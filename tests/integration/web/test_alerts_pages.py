"""The console's Alerts and Events pages and the home page's recent-alerts partial: admins manage rules and
silences; members see their workspaces' alerts and cluster-wide events, never another workspace's."""

from __future__ import annotations

import httpx

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job
from aicenter.services import alerts
from aicenter.services.context import Actor
from aicenter.web.routes.alerts import recent_alerts
from aicenter.web.templating import build_environment
from tests.factories import make_user
from tests.integration.web.conftest import Browser, OpenBrowser


async def _failed_job(db: Database, workspace_id: int, name: str) -> None:
    async with db.write() as session:
        session.add(Job(workspace_id=workspace_id, name=name, status="failed", finished_at=utcnow()))
    async with db.write() as session:
        await alerts.evaluate_rules(session)


async def _default_workspace(client: httpx.AsyncClient, headers: dict[str, str]) -> int:
    return int((await client.get("/api/v1/users/me", headers=headers)).json()["default_workspace_id"])


async def test_alerts_and_events_pages_per_tenant(
    admin: Browser, open_browser: OpenBrowser, db: Database, client: httpx.AsyncClient
) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    await _failed_job(db, await _default_workspace(client, alice.headers), "alice-train")
    await _failed_job(db, await _default_workspace(client, bob.headers), "bob-train")
    async with db.write() as session:
        alerts.record_event(session, "node.lost", "node n1 lost: no heartbeat for 60 s")

    page = await admin.get("/alerts")
    assert page.status_code == 200
    assert page.text.count('data-testid="alert-row"') == 2
    assert 'data-name="node-down"' in page.text  # built-in rules listed
    assert 'data-testid="rule-add-form"' in page.text

    as_alice = await open_browser("alice")
    page = await as_alice.get("/alerts")
    assert page.status_code == 200
    assert "alice-train" in page.text
    assert "bob-train" not in page.text
    assert 'data-testid="rule-add-form"' not in page.text  # platform rules are the platform admins'
    assert 'data-testid="nav-alerts"' in page.text
    events = await as_alice.get("/events")
    assert "node n1 lost" in events.text
    assert "bob-train" not in events.text
    assert 'data-kind="alert.firing"' in events.text
    filtered = await as_alice.get("/events", params={"kind": "node."})
    assert filtered.text.count('data-testid="event-row"') == 1

    async with db.read() as session:
        recent = await recent_alerts(session, Actor(alice.user_id, "alice"), 5)
    assert [v.rule_name for v in recent] == ["job-failed"]
    # The home page shows the firing alerts the member sees: her job's, not bob's.
    home = await as_alice.get("/")
    assert home.text.count('data-testid="recent-alert"') == 1
    assert 'data-rule="job-failed"' in home.text
    template = build_environment().get_template("alerts/_recent.html")
    assert "No alert is firing" in template.render(recent=[])


async def test_admin_adds_a_rule_and_a_silence_and_bad_input_is_shown(admin: Browser) -> None:
    bad = await admin.post("/alerts/rules", {"name": "hot", "expression": "accelerator.temperature_celsius >"})
    assert bad.status_code == 400
    assert "position 33" in bad.text
    ok = await admin.post(
        "/alerts/rules",
        {"name": "hot", "expression": "accelerator.temperature_celsius > 90", "for_s": "60", "severity": "critical"},
    )
    assert ok.status_code == 303
    page = await admin.get("/alerts")
    assert 'data-name="hot"' in page.text
    silenced = await admin.post("/alerts/silences", {"matchers": "rule=hot", "duration_s": "600", "comment": "upgrade"})
    assert silenced.status_code == 303
    page = await admin.get("/alerts")
    assert page.text.count('data-testid="silence-row"') == 1
    empty = await admin.post("/alerts/silences", {"matchers": "", "duration_s": "600"})
    assert empty.status_code == 422
