"""Alerts end to end inside one process: rules over real facts, a real SMTP server and a real webhook receiver.

The evaluator and the delivery loop are driven by calling their service functions (the app's controllers do not
run in these tests), so every step is deterministic; tests/e2e/test_alerts_e2e.py runs the loops in a server.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select, update

from aicenter.controllers.alerts import read_series
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Notification, Replica
from aicenter.services import alerts, inventory, jobs, monitoring
from tests.factories import ADMIN, Login, admin_login, make_user
from tests.support.receivers import Inbox, WebhookReceiver, smtp_server, webhook_receiver

API = "/api/v1"


@pytest.fixture(scope="module")
def smtp() -> Iterator[tuple[Inbox, int]]:
    with smtp_server() as server:
        yield server


@pytest.fixture(scope="module")
def webhook() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


@pytest.fixture
def configured(app: FastAPI, smtp: tuple[Inbox, int], monkeypatch: pytest.MonkeyPatch) -> None:
    settings = app.state.ctx.settings
    monkeypatch.setattr(settings, "smtp_host", "127.0.0.1")
    monkeypatch.setattr(settings, "smtp_port", smtp[1])
    monkeypatch.setattr(settings, "alert_webhook_timeout_s", 1.0)


async def _failed_job(db: Database, workspace_id: int, name: str = "train-1") -> int:
    async with db.write() as session:
        job = Job(
            workspace_id=workspace_id,
            name=name,
            status="failed",
            failure_reason="exit_code",
            exit_code=3,
            finished_at=utcnow(),
            message="exit code 3",
        )
        session.add(job)
        await session.flush()
        return job.id


async def _channel(
    client: httpx.AsyncClient, who: Login, kind: str, target: str, workspace_id: int | None = None
) -> dict[str, Any]:
    body = {"name": f"{kind}-{abs(hash(target)) % 10_000}", "kind": kind, "target": target}
    where = f"/workspaces/{workspace_id}" if workspace_id is not None else ""
    r = await client.post(f"{API}{where}/alert-channels", json=body, headers=who.headers)
    assert r.status_code == 201, r.text
    result: dict[str, Any] = r.json()
    return result


async def _evaluate(app: FastAPI) -> alerts.EvaluationResult:
    async with app.state.ctx.db.write() as session:
        return await alerts.evaluate_rules(session)


async def _deliver(app: FastAPI) -> int:
    return await alerts.deliver_due(app.state.ctx.db, app.state.ctx.settings, owner="test")


async def _workspace(client: httpx.AsyncClient, who: Login) -> int:
    me = (await client.get(f"{API}/users/me", headers=who.headers)).json()
    return int(me["default_workspace_id"])


async def test_failed_job_alerts_by_webhook_and_email_once(
    app: FastAPI,
    client: httpx.AsyncClient,
    db: Database,
    configured: None,
    smtp: tuple[Inbox, int],
    webhook: WebhookReceiver,
) -> None:
    # Unique per run: the receivers are shared by the module's tests on both databases.
    path, inbox = f"/ok?t={uuid.uuid4().hex}", f"ops-{uuid.uuid4().hex[:8]}@example.com"
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    await _channel(client, admin, "webhook", f"{webhook.url}{path}")
    await _channel(client, admin, "email", inbox)
    job_id = await _failed_job(db, await _workspace(client, alice))

    result = await _evaluate(app)
    assert len(result.fired) == 1
    assert result.queued == 2
    assert await _deliver(app) == 2

    [hook] = webhook.bodies(path)
    assert hook["status"] == "firing"
    assert hook["rule"] == "job-failed"
    assert hook["labels"]["job"] == str(job_id)
    assert hook["labels"]["workspace"] == "alice"
    [mail] = smtp[0].to(inbox)
    assert "FIRING" in mail["Subject"]
    assert "job-failed" in mail.get_content()

    # Deduplicated: the same condition on the next evaluation neither fires nor notifies again.
    again = await _evaluate(app)
    assert (again.fired, again.queued) == ([], 0)
    # The owner sees the alert and its event; the admin too.
    r = await client.get(f"{API}/alerts", params={"state": "firing"}, headers=alice.headers)
    assert [a["rule"] for a in r.json()["items"]] == ["job-failed"]
    r = await client.get(f"{API}/events", params={"kind": "alert."}, headers=alice.headers)
    assert [e["kind"] for e in r.json()["items"]] == ["alert.firing"]
    assert r.json()["items"][0]["job_id"] == job_id

    # Resolved once the job is older than the window: a "resolved" notification follows.
    async with db.write() as session:
        await session.execute(update(Job).where(Job.id == job_id).values(finished_at=utcnow() - timedelta(hours=2)))
    resolved = await _evaluate(app)
    assert len(resolved.resolved) == 1
    await _deliver(app)
    assert [b["status"] for b in webhook.bodies(path)] == ["firing", "resolved"]


async def test_a_hanging_webhook_blocks_neither_evaluation_nor_other_channels(
    app: FastAPI,
    client: httpx.AsyncClient,
    db: Database,
    configured: None,
    smtp: tuple[Inbox, int],
    webhook: WebhookReceiver,
) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    webhook.reset_hang()
    inbox = f"hang-{uuid.uuid4().hex[:8]}@example.com"
    await _channel(client, admin, "webhook", f"{webhook.url}/hang")
    await _channel(client, admin, "email", inbox)
    await _failed_job(db, await _workspace(client, alice))
    await _evaluate(app)

    delivery = asyncio.create_task(_deliver(app))
    await asyncio.to_thread(webhook.hanging.wait, 30)
    # The webhook's request is open (it answers only on release): evaluation and the API carry on meanwhile.
    await _failed_job(db, await _workspace(client, alice), name="train-2")
    assert len((await _evaluate(app)).fired) == 1
    assert (await client.get(f"{API}/alerts", headers=admin.headers)).status_code == 200
    await delivery  # the 1 s timeout cuts the hanging request
    webhook.release()
    assert len(smtp[0].to(inbox)) == 1
    async with db.read() as session:
        rows = (await session.scalars(select(Notification).where(Notification.delivered_at.is_(None)))).all()
    hung = [n for n in rows if n.last_error]
    assert len(hung) == 1
    assert "did not answer within 1 s" in (hung[0].last_error or "")
    assert hung[0].attempts == 1
    assert hung[0].next_attempt_at is not None
    assert hung[0].next_attempt_at > utcnow()


async def test_a_failing_channel_records_the_error_and_retries(
    app: FastAPI, client: httpx.AsyncClient, db: Database, configured: None, webhook: WebhookReceiver
) -> None:
    admin = await admin_login(client)
    channel = await _channel(client, admin, "webhook", f"{webhook.url}/fail")
    alice = await make_user(db, client, "alice")
    await _failed_job(db, await _workspace(client, alice))
    await _evaluate(app)
    await _deliver(app)
    async with db.write() as session:
        [row] = (await session.scalars(select(Notification))).all()
        assert (row.attempts, row.last_error) == (1, "HTTP 500 from the webhook")
        assert row.delivered_at is None
        assert row.next_attempt_at is not None
        row.next_attempt_at = utcnow()  # due now rather than in 10 s
    assert await _deliver(app) == 1
    async with db.read() as session:
        [row] = (await session.scalars(select(Notification))).all()
    assert row.attempts == 2
    assert len(webhook.bodies("/fail")) >= 2
    r = await client.post(f"{API}/alert-channels/{channel['id']}/test", headers=admin.headers)
    assert r.json() == {"channel_id": channel["id"], "ok": False, "error": "HTTP 500 from the webhook"}


async def test_silence_suppresses_notifications_not_the_alert(
    app: FastAPI, client: httpx.AsyncClient, db: Database, configured: None, webhook: WebhookReceiver
) -> None:
    admin = await admin_login(client)
    path = f"/ok?t={uuid.uuid4().hex}"
    await _channel(client, admin, "webhook", f"{webhook.url}{path}")
    r = await client.post(
        f"{API}/silences",
        json={"matchers": {"rule": "job-failed"}, "duration_s": 600, "comment": "maintenance"},
        headers=admin.headers,
    )
    assert r.status_code == 201, r.text
    alice = await make_user(db, client, "alice")
    await _failed_job(db, await _workspace(client, alice))
    result = await _evaluate(app)
    assert (len(result.fired), result.queued, result.silenced) == (1, 0, 1)
    await _deliver(app)
    assert webhook.bodies(path) == []
    r = await client.get(f"{API}/silences", headers=alice.headers)
    assert [s["comment"] for s in r.json()] == ["maintenance"]
    r = await client.post(f"{API}/silences", json={"matchers": {}, "duration_s": 600}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "matchers"


async def test_bad_expression_is_a_400_with_its_position(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    r = await client.post(
        f"{API}/alert-rules",
        json={"name": "hot", "expression": "avg(node.cpu_utilization by (node) > 0.9"},
        headers=admin.headers,
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "invalid_expression"
    assert error["details"]["position"] == 25  # "by", where ")" was due
    assert "expected ')'" in error["message"]
    r = await client.get(f"{API}/alert-rules", headers=admin.headers)
    assert "hot" not in [rule["name"] for rule in r.json()]


async def test_workspaces_reach_only_their_own_rules_and_channels(
    client: httpx.AsyncClient, db: Database, app: FastAPI
) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")  # admin of her default workspace
    mallory = await make_user(db, client, "mallory")
    ws = await _workspace(client, alice)
    r = await client.post(
        f"{API}/workspaces/{ws}/alert-rules",
        json={"name": "slow-queue", "expression": "job.pending_seconds > 60"},
        headers=alice.headers,
    )
    assert r.status_code == 201, r.text
    rule_id = r.json()["id"]
    await _evaluate(app)  # seeds the built-in rules
    names = [rule["name"] for rule in (await client.get(f"{API}/alert-rules", headers=mallory.headers)).json()]
    assert "slow-queue" not in names
    assert "node-down" in names
    assert (await client.get(f"{API}/alert-rules/{rule_id}", headers=mallory.headers)).status_code == 404
    r = await client.patch(f"{API}/alert-rules/{rule_id}", json={"enabled": False}, headers=mallory.headers)
    assert r.status_code == 404
    # Platform rules: members read them, only platform admins change them.
    node_down = next(
        rule
        for rule in (await client.get(f"{API}/alert-rules", headers=alice.headers)).json()
        if rule["name"] == "node-down"
    )
    r = await client.patch(f"{API}/alert-rules/{node_down['id']}", json={"enabled": False}, headers=alice.headers)
    assert r.status_code == 403
    r = await client.patch(f"{API}/alert-rules/{node_down['id']}", json={"enabled": False}, headers=admin.headers)
    assert r.json()["enabled"] is False
    assert (await client.delete(f"{API}/alert-rules/{node_down['id']}", headers=admin.headers)).status_code == 409
    # Channels: mallory can neither add one to alice's workspace nor see hers.
    channel = await _channel(client, alice, "email", "alice@example.com", workspace_id=ws)
    r = await client.post(
        f"{API}/workspaces/{ws}/alert-channels",
        json={"name": "x", "kind": "email", "target": "m@example.com"},
        headers=mallory.headers,
    )
    assert r.status_code == 404
    assert (await client.get(f"{API}/alert-channels", headers=mallory.headers)).json() == []
    r = await client.post(f"{API}/alert-channels/{channel['id']}/test", headers=mallory.headers)
    assert r.status_code == 404
    r = await client.post(
        f"{API}/alert-channels", json={"name": "bad", "kind": "webhook", "target": "ftp://x"}, headers=admin.headers
    )
    assert (r.status_code, r.json()["error"]["details"]["field"]) == (422, "target")


async def test_events_show_node_changes_to_everyone_and_job_events_to_their_workspace(
    client: httpx.AsyncClient, db: Database
) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    mallory = await make_user(db, client, "mallory")
    async with db.write() as session:
        node = Node(name="n1", cpu_milli=4000, memory_bytes=2**30)
        session.add(node)
        await session.flush()
        node_id = node.id
    r = await client.post(f"{API}/nodes/{node_id}/cordon", headers=admin.headers)
    assert r.status_code == 200, r.text
    async with db.write() as session:
        alerts.record_event(session, "job.preempted", "job x preempted", workspace_id=await _workspace(client, alice))
    kinds = [e["kind"] for e in (await client.get(f"{API}/events", headers=mallory.headers)).json()["items"]]
    assert kinds == ["node.cordoned"]
    kinds = [e["kind"] for e in (await client.get(f"{API}/events", headers=alice.headers)).json()["items"]]
    assert kinds == ["job.preempted", "node.cordoned"]


async def test_rules_over_sampled_series_wait_for_their_duration(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    now = utcnow()
    samples = [
        monitoring.Sample(name, now, value, {"node": node})
        for node, used in (("n1", 95.0), ("n2", 10.0))
        for name, value in (("node.disk_used_bytes", used), ("node.disk_total_bytes", 100.0))
    ]
    async with db.write() as session:
        await monitoring.record_samples(session, samples)
    r = await client.post(
        f"{API}/alert-rules",
        json={"name": "disk-now", "expression": "node.disk_used_bytes / node.disk_total_bytes > 0.9"},
        headers=admin.headers,
    )
    assert r.status_code == 201, r.text
    async with db.write() as session:
        result = await alerts.evaluate_rules(session, series=read_series, now=now)
    assert len(result.fired) == 1
    states = {
        (a["rule"], a["labels"]["node"], a["state"])
        for a in (await client.get(f"{API}/alerts", headers=admin.headers)).json()["items"]
    }
    # The built-in rule holds its 5 minutes; the new one (for 0) fires at once; n2 is at 10%.
    assert states == {("disk-now", "n1", "firing"), ("disk-nearly-full", "n1", "pending")}
    async with db.write() as session:
        later = await alerts.evaluate_rules(session, series=read_series, now=now + timedelta(seconds=300))
    assert len(later.fired) == 1


async def test_node_down_fires_per_node_and_a_disabled_rule_resolves(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    admin = await admin_login(client)
    async with db.write() as session:
        session.add_all(
            [
                Node(name="up-1", cpu_milli=1000, memory_bytes=2**30, state="ready"),
                Node(name="gone-1", cpu_milli=1000, memory_bytes=2**30, state="not_ready"),
            ]
        )
    result = await _evaluate(app)
    assert len(result.fired) == 1
    [alert] = (await client.get(f"{API}/alerts", params={"state": "firing"}, headers=admin.headers)).json()["items"]
    assert (alert["rule"], alert["labels"], alert["severity"]) == ("node-down", {"node": "gone-1"}, "critical")
    [event] = (await client.get(f"{API}/events", params={"kind": "alert.firing"}, headers=admin.headers)).json()[
        "items"
    ]
    assert event["node_id"] is not None
    assert event["workspace_id"] is None  # cluster-wide: every member sees it

    r = await client.patch(f"{API}/alert-rules/{alert['rule_id']}", json={"enabled": False}, headers=admin.headers)
    assert r.status_code == 200
    assert len((await _evaluate(app)).resolved) == 1


async def test_members_see_their_workspaces_alerts_and_workspace_rules_only_their_jobs(
    app: FastAPI, client: httpx.AsyncClient, db: Database
) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    alice_ws, bob_ws = await _workspace(client, alice), await _workspace(client, bob)
    await _failed_job(db, alice_ws, "alice-train")
    await _failed_job(db, bob_ws, "bob-train")
    async with db.write() as session:
        session.add(Job(workspace_id=bob_ws, name="bob-waits", status="queued"))
    r = await client.post(
        f"{API}/workspaces/{alice_ws}/alert-rules",
        json={"name": "any-wait", "expression": "job.pending_seconds >= 0"},
        headers=alice.headers,
    )
    assert r.status_code == 201, r.text
    await _evaluate(app)
    seen = {
        (a["rule"], a["labels"]["job_name"])
        for a in (await client.get(f"{API}/alerts", headers=alice.headers)).json()["items"]
    }
    # Her workspace's rule never fires on bob's queued job; bob's failed job is not hers to see.
    assert seen == {("job-failed", "alice-train")}
    seen = {
        (a["rule"], a["labels"]["job_name"])
        for a in (await client.get(f"{API}/alerts", headers=bob.headers)).json()["items"]
    }
    assert seen == {("job-failed", "bob-train")}


async def test_node_loss_and_preemption_are_recorded_as_events(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    ws = await _workspace(client, alice)
    async with db.write() as session:
        session.add(
            Node(name="quiet-1", cpu_milli=1000, memory_bytes=2**30, last_heartbeat_at=utcnow() - timedelta(hours=1))
        )
        job = Job(workspace_id=ws, name="victim", status="running")
        session.add(job)
        await session.flush()
        job_id = job.id
    async with db.write() as session:
        assert await inventory.mark_lost_nodes(session, lost_after_s=60) == ["quiet-1"]
        assert await jobs.mark_preempted(session, job_id, "making room for job 99")
    events = (await client.get(f"{API}/events", headers=admin.headers)).json()["items"]
    by_kind = {e["kind"]: e for e in events}
    assert by_kind["node.lost"]["severity"] == "warning"
    assert "no heartbeat for 60 s" in by_kind["node.lost"]["message"]
    assert (by_kind["job.preempted"]["job_id"], by_kind["job.preempted"]["workspace_id"]) == (job_id, ws)
    assert "making room for job 99" in by_kind["job.preempted"]["message"]


async def test_idle_allocated_accelerator_names_its_job_and_skips_free_devices(
    client: httpx.AsyncClient, db: Database
) -> None:
    alice = await make_user(db, client, "alice")
    ws = await _workspace(client, alice)
    now = utcnow()
    async with db.write() as session:
        job = Job(workspace_id=ws, name="idle-train", status="running")
        session.add(job)
        await session.flush()
        session.add(Replica(job_id=job.id, task="worker", index=0, status="running", node_name="g1", devices=[0]))
        job_id = job.id
        samples = [
            monitoring.Sample("accelerator.utilization", now, value, {"node": "g1", "device": str(i), "type": "a100"})
            for i, value in ((0, 0.01), (1, 0.0))  # device 1 is idle too, but nobody holds it
        ]
        await monitoring.record_samples(session, samples)
    async with db.write() as session:
        await alerts.create_rule(session, ADMIN, name="idle-now", expression="accelerator.allocated_utilization < 0.05")
        result = await alerts.evaluate_rules(session, series=read_series, now=now)
    assert len(result.fired) == 1
    items = (await client.get(f"{API}/alerts", params={"state": "firing"}, headers=alice.headers)).json()["items"]
    assert [(a["rule"], a["labels"]) for a in items] == [
        ("idle-now", {"node": "g1", "device": "0", "type": "a100", "job": str(job_id)})
    ]
    assert items[0]["workspace_id"] == ws  # the job's workspace sees it (and its channels get it)
