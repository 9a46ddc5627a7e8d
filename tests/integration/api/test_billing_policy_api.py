"""The billing policy on SQLite and PostgreSQL: admission refuses a job, a notebook and a service (deploy, start,
scale-up) of a workspace in arrears with its balance in the message and writes nothing, and admits them again
after a recharge; the billing controller warns, stops running notebooks and jobs and scales services to zero
after the grace, with one event per transition; the monthly spending limit; bad policies write nothing."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, update

from aicenter.config import Settings
from aicenter.controllers.billing import BillingController
from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import BillingPolicy, ClusterEvent, Job, Replica, Service
from aicenter.services import billing
from aicenter.services.context import Actor
from tests.integration.api.test_jobs_api import _logins
from tests.integration.api.test_services_api import _deploy, _models, _replica_jobs, _serve
from tests.integration.services.jobs_helpers import move, spec

ADMIN = Actor.system("test")


def _policy_url(ws: int) -> str:
    return f"/api/v1/workspaces/{ws}/billing-policy"


def _notebook(name: str = "nb") -> dict[str, Any]:
    return {"spec": {"name": name, "resources": {"spec": "cpu-4"}}}


async def _count(db: Database, model: Any) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


async def _events(db: Database, ws: int) -> list[str]:
    async with db.read() as session:
        rows = await session.scalars(
            select(ClusterEvent.kind)
            .where(ClusterEvent.workspace_id == ws, ClusterEvent.kind.like("billing.%"))
            .order_by(ClusterEvent.id)
        )
        return list(rows.all())


async def _recharge(db: Database, ws: int, amount: str) -> None:
    async with db.write() as session:
        await billing.adjust(session, ADMIN, ws, amount, reason="test")


async def test_admission_refuses_in_arrears_and_admits_after_a_recharge(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    ws = w.p.ws
    # A fresh install: no policy, balance 0: everything is admitted.
    assert (await client.post("/api/v1/jobs", json={"spec": spec()}, headers=h["alice"])).status_code == 201
    nb = await client.post("/api/v1/notebooks", json=_notebook(), headers=h["alice"])
    assert nb.status_code == 201, nb.text
    assert (await client.post(f"/api/v1/notebooks/{nb.json()['id']}/stop", headers=h["alice"])).status_code < 300
    svc = await client.post("/api/v1/services", json=_deploy(), headers=h["alice"])
    assert svc.status_code == 201, svc.text
    sid = svc.json()["id"]
    assert (await client.post(f"/api/v1/services/{sid}/stop", headers=h["alice"])).status_code < 300

    r = await client.put(_policy_url(ws), json={"arrears": "warn"}, headers=h["admin"])
    assert r.status_code == 200, r.text
    assert (r.json()["arrears"], r.json()["phase"], r.json()["balance"]) == ("warn", "ok", "0.00")
    at_zero = await client.post("/api/v1/jobs", json={"spec": spec(name="t0")}, headers=h["alice"])
    assert (at_zero.status_code, at_zero.json()["error"]["details"]["balance"]) == (402, "0.00")
    assert "balance is 0.00 coins" in at_zero.json()["error"]["message"]
    await _recharge(db, ws, "-3.20")

    before = (await _count(db, Job), await _count(db, Service))
    message = "workspace alice's balance is -3.20 coins; ask a platform admin to recharge"
    refused = [
        await client.post("/api/v1/jobs", json={"spec": spec(name="train-2")}, headers=h["alice"]),
        await client.post("/api/v1/notebooks", json=_notebook("nb2"), headers=h["alice"]),
        await client.post(f"/api/v1/notebooks/{nb.json()['id']}/start", headers=h["alice"]),
        await client.post("/api/v1/services", json=_deploy(name="iris2"), headers=h["alice"]),
        await client.post(f"/api/v1/services/{sid}/start", headers=h["alice"]),
        await client.post(f"/api/v1/services/{sid}/scale", json={"min_replicas": 1}, headers=h["alice"]),
    ]
    for r in refused:
        assert r.status_code == 402, r.text
        error = r.json()["error"]
        assert (error["code"], error["message"], error["details"]["balance"]) == (
            "insufficient_balance",
            message,
            "-3.20",
        )
    assert (await _count(db, Job), await _count(db, Service)) == before
    # Lowering the ceiling starts nothing: allowed in arrears.
    assert (await client.post(f"/api/v1/services/{sid}/scale", json={"max_replicas": 2}, headers=h["alice"])).is_success

    await _recharge(db, ws, "10")
    admitted = [
        await client.post("/api/v1/jobs", json={"spec": spec(name="train-2")}, headers=h["alice"]),
        await client.post("/api/v1/notebooks", json=_notebook("nb2"), headers=h["alice"]),
        await client.post(f"/api/v1/notebooks/{nb.json()['id']}/start", headers=h["alice"]),
        await client.post("/api/v1/services", json=_deploy(name="iris2"), headers=h["alice"]),
        await client.post(f"/api/v1/services/{sid}/start", headers=h["alice"]),
        await client.post(f"/api/v1/services/{sid}/scale", json={"min_replicas": 1}, headers=h["alice"]),
    ]
    assert [r.status_code < 300 for r in admitted] == [True] * 6, [r.text for r in admitted]
    # Another workspace without a policy is never refused (carol's, balance 0).
    carol_job = {"spec": spec(name="c")}
    assert (await client.post("/api/v1/jobs", json=carol_job, headers=h["carol"])).status_code == 201


async def test_monthly_spending_limit_refuses_with_spend_and_limit(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    ws = w.p.ws
    await _recharge(db, ws, "100")
    job = (await client.post("/api/v1/jobs", json={"spec": spec()}, headers=h["alice"])).json()
    now = utcnow()
    async with db.write() as session:  # two copies of weight 2 at 1 coin/h, an hour each: 4.00 charged
        await session.execute(
            update(Replica).where(Replica.job_id == job["id"]).values(started_at=now - timedelta(hours=1))
        )
    async with db.write() as session:
        await billing.meter(session, now, min_period=timedelta(seconds=60))
    r = await client.put(_policy_url(ws), json={"arrears": "off", "monthly_limit": "3"}, headers=h["admin"])
    assert (r.status_code, r.json()["month_spend"], r.json()["monthly_limit"]) == (200, "4.00", "3.00"), r.text
    refused = await client.post("/api/v1/jobs", json={"spec": spec(name="t2")}, headers=h["alice"])
    assert refused.status_code == 402, refused.text
    error = refused.json()["error"]
    assert error["code"] == "spending_limit_reached"
    assert "spent 4.00 coins this month" in error["message"]
    assert "monthly limit is 3.00" in error["message"]
    assert (error["details"]["month_spend"], error["details"]["monthly_limit"]) == ("4.00", "3.00")

    r = await client.put(_policy_url(ws), json={"arrears": "off", "monthly_limit": "10.00"}, headers=h["admin"])
    assert r.status_code == 200
    assert (await client.post("/api/v1/jobs", json={"spec": spec(name="t2")}, headers=h["alice"])).status_code == 201
    r = await client.put(_policy_url(ws), json={"arrears": "off", "monthly_limit": None}, headers=h["admin"])
    assert r.json()["monthly_limit"] is None


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"arrears": "sometimes"}, "arrears"),
        ({"arrears": "stop", "grace_minutes": -1}, "grace_minutes"),
        ({"arrears": "stop", "grace_minutes": 10**9}, "grace_minutes"),
        ({"arrears": "stop", "grace_minutes": "soon"}, "grace_minutes"),
        ({"arrears": "warn", "monthly_limit": "-5"}, "monthly_limit"),
        ({"arrears": "warn", "monthly_limit": "0"}, "monthly_limit"),
        ({"arrears": "warn", "monthly_limit": "1.005"}, "monthly_limit"),
        ({"arrears": "warn", "monthly_limit": "lots"}, "monthly_limit"),
    ],
)
async def test_bad_policies_name_the_field_and_write_nothing(
    db: Database, client: httpx.AsyncClient, tmp_path: Path, body: dict[str, Any], field: str
) -> None:
    w, h = await _logins(db, client, tmp_path)
    r = await client.put(_policy_url(w.p.ws), json=body, headers=h["admin"])
    assert r.status_code == 422, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["details"]["field"]) == ("validation_failed", field)
    assert await _count(db, BillingPolicy) == 0


async def test_policy_access(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> None:
    w, h = await _logins(db, client, tmp_path)
    url = _policy_url(w.p.ws)
    assert (await client.put(url, json={"arrears": "off"}, headers=h["alice"])).status_code == 403
    assert (await client.put(_policy_url(999_999), json={"arrears": "off"}, headers=h["admin"])).status_code == 404
    assert await _count(db, BillingPolicy) == 0
    shown = (await client.get(url, headers=h["bob"])).json()  # a member reads it: no policy is "off"
    assert (shown["arrears"], shown["grace_minutes"], shown["monthly_limit"], shown["phase"]) == ("off", 0, None, "ok")
    assert (await client.get(url, headers=h["carol"])).status_code == 404  # not hers: as if it did not exist


async def _job_status(db: Database, job_id: int) -> tuple[str, str | None, bool]:
    async with db.read() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        return job.status, job.failure_reason, job.stop_requested_at is not None


async def test_arrears_stop_after_grace_once_per_transition_and_recovery(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    ws = w.p.ws
    await _recharge(db, ws, "1")
    job = (await client.post("/api/v1/jobs", json={"spec": spec()}, headers=h["alice"])).json()["id"]
    nb = (await client.post("/api/v1/notebooks", json=_notebook(), headers=h["alice"])).json()["id"]
    queued = (await client.post("/api/v1/jobs", json={"spec": spec(name="waits")}, headers=h["alice"])).json()["id"]
    for job_id in (job, nb):
        await move(db, job_id, JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    sid = (await client.post("/api/v1/services", json=_deploy(), headers=h["alice"])).json()["id"]
    await _serve(db, await _replica_jobs(db, sid))
    r = await client.put(_policy_url(ws), json={"arrears": "stop", "grace_minutes": 30}, headers=h["admin"])
    assert r.status_code == 200, r.text

    controller = BillingController(db, settings, owner="test")
    await controller.tick()
    assert await _events(db, ws) == []  # in credit: nothing happens
    await _recharge(db, ws, "-5")
    await controller.tick()
    await controller.tick()
    assert await _events(db, ws) == ["billing.arrears"]  # once, not per tick
    policy = (await client.get(_policy_url(ws), headers=h["alice"])).json()
    assert (policy["phase"], policy["cause"], policy["balance"]) == ("warned", "balance", "-4.00")
    assert await _job_status(db, job) == ("running", None, False)  # the grace runs

    async with db.write() as session:  # the grace passes
        await session.execute(
            update(BillingPolicy)
            .where(BillingPolicy.workspace_id == ws)
            .values(arrears_since=utcnow() - timedelta(minutes=31))
        )
    await controller.tick()
    await controller.tick()
    assert await _events(db, ws) == ["billing.arrears", "billing.stopped"]
    # Running work is asked to stop with reason arrears (the reconciler ends it); queued work ends at once.
    assert await _job_status(db, job) == ("running", "arrears", True)
    assert await _job_status(db, nb) == ("running", "arrears", True)
    assert await _job_status(db, queued) == ("stopped", "arrears", True)
    shown = (await client.get(f"/api/v1/services/{sid}", headers=h["alice"])).json()
    assert shown["status"] == "stopped"
    assert "arrears" in shown["message"]
    assert (await client.get(_policy_url(ws), headers=h["alice"])).json()["phase"] == "stopped"

    await _recharge(db, ws, "100")
    await controller.tick()
    await controller.tick()
    assert await _events(db, ws) == ["billing.arrears", "billing.stopped", "billing.recovered"]
    # Stopped work stays stopped; new work is admitted again.
    assert (await client.get(f"/api/v1/services/{sid}", headers=h["alice"])).json()["status"] == "stopped"
    assert await _job_status(db, queued) == ("stopped", "arrears", True)
    assert (await client.post("/api/v1/jobs", json={"spec": spec(name="again")}, headers=h["alice"])).status_code == 201


async def test_spending_limit_reached_stops_like_arrears(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    ws = w.p.ws
    await _recharge(db, ws, "100")
    job = (await client.post("/api/v1/jobs", json={"spec": spec()}, headers=h["alice"])).json()["id"]
    await move(db, job, JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    async with db.write() as session:
        await session.execute(
            update(Replica).where(Replica.job_id == job).values(started_at=utcnow() - timedelta(hours=1))
        )
    body = {"arrears": "stop", "grace_minutes": 0, "monthly_limit": "3.00"}
    assert (await client.put(_policy_url(ws), json=body, headers=h["admin"])).status_code == 200
    controller = BillingController(db, settings, owner="test")
    await controller.tick()  # meters 4.00 for the hour, then finds the limit reached: warn and stop at once
    assert await _events(db, ws) == ["billing.arrears", "billing.stopped"]
    assert await _job_status(db, job) == ("running", "arrears", True)
    policy = (await client.get(_policy_url(ws), headers=h["alice"])).json()
    assert (policy["phase"], policy["cause"], policy["month_spend"]) == ("stopped", "limit", "4.00")


async def test_balance_ratio_feeds_the_balance_low_alert_rule(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    from aicenter.services import alerts

    w, h = await _logins(db, client, tmp_path)
    await _recharge(db, w.p.ws, "0.50")
    await _recharge(db, w.p.carol_ws, "-1")
    facts = {"billing.balance_ratio"}
    async with db.read() as session:  # no policy anywhere: no values (a fresh install warns about nothing)
        assert (await alerts.gather_facts(session, facts, utcnow(), None))["billing.balance_ratio"] == []
    await client.put(_policy_url(w.p.ws), json={"arrears": "warn", "monthly_limit": "10"}, headers=h["admin"])
    await client.put(_policy_url(w.p.carol_ws), json={"arrears": "stop"}, headers=h["admin"])
    async with db.read() as session:
        elements = (await alerts.gather_facts(session, facts, utcnow(), None))["billing.balance_ratio"]
    got = sorted((e.labels["workspace"], e.workspace_id, e.value) for e in elements)
    assert got == [("alice", w.p.ws, 0.05), ("carol", w.p.carol_ws, -1.0)]
