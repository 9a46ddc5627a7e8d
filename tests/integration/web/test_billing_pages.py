"""Billing in the console with real data: "my balance", pay and recharge records (a recharge posted through the
service, charges written by the meter over real replica rows), who sees what, the admins' recharge form (field
errors and CSRF write nothing, a double submit credits once), verification, spec prices, and a job's cost on its
page (estimated while it runs, final once it ended)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, update

from aicenter.core.catalog import ItemKind
from aicenter.core.clock import utcnow
from aicenter.core.roles import WorkspaceRole
from aicenter.db.engine import Database
from aicenter.db.models import LedgerEntry, Node, Replica, ResourceSpec, Workspace
from aicenter.services import billing, jobs, members
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.factories import ADMIN, Login, make_user
from tests.integration.api.test_jobs_api import PASSWORD, _logins
from tests.integration.api.test_services_api import _replica_jobs
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.web.conftest import Browser, OpenBrowser

GiB = 2**30


@dataclass
class World:
    alice: Login  # admin of her personal workspace ``ws``, where the job runs
    bob: Login  # a member of ``ws``
    carol: Login  # in no shared workspace
    ws: int
    job_id: int
    replica_ids: list[int]


async def _entries(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(LedgerEntry)) or 0)


async def _balance(db: Database, workspace_id: int) -> Decimal:
    async with db.read() as session:
        return Decimal(await session.scalar(select(Workspace.balance).where(Workspace.id == workspace_id)))


@pytest.fixture
async def world(app: FastAPI, db: Database, client: httpx.AsyncClient, tmp_path: Path) -> World:
    """alice's 2-replica job on spec cpu-4 (weight 2, 1.50 coins per machine-hour), both copies started an hour
    ago and charged by the meter (2 x 2 machine-hours x 1.50 = 6.00); ws recharged 100.00 ("Q3 budget")."""
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    carol = await make_user(db, client, "carol")
    me = (await client.get("/api/v1/users/me", headers=alice.headers)).json()
    ws = int(me["default_workspace_id"])
    async with db.write() as session:
        await ensure_default_pool(session)
        session.add(Node(name="n1", cpu_milli=16_000, memory_bytes=64 * GiB, labels={}))
        session.add(
            ResourceSpec(
                name="cpu-4", cpu_milli=4000, memory_bytes=8 * GiB, billing_weight=2.0, price_per_hour=Decimal("1.5")
            )
        )
        await members.add_member(session, ADMIN, ws, user_id=bob.user_id, role=WorkspaceRole.MEMBER)
    source = {
        "name": "train-1",
        "tasks": [{"name": "worker", "replicas": 2, "resources": {"spec": "cpu-4"}, "command": "echo hi"}],
    }
    async with db.write() as session:
        view = await jobs.submit_job(session, Actor(alice.user_id, "alice"), source, workspace_id=ws)
    now = utcnow()
    async with db.write() as session:
        await session.execute(
            update(Replica).where(Replica.job_id == view.job.id).values(started_at=now - timedelta(hours=1))
        )
        replica_ids = list((await session.scalars(select(Replica.id).where(Replica.job_id == view.job.id))).all())
    async with db.write() as session:
        await billing.recharge(session, ADMIN, ws, "100", reason="Q3 budget")
    async with db.write() as session:
        result = await billing.meter(session, now, min_period=timedelta(seconds=60))
    assert (result.entries, result.cents) == (2, 600)
    return World(alice, bob, carol, ws, view.job.id, replica_ids)


def _rows(page: str, testid: str) -> list[str]:
    return re.findall(rf'<tr data-testid="{testid}"(.*?)</tr>', page, flags=re.S)


async def test_my_balance_pay_records_and_recharge_records(world: World, open_browser: OpenBrowser) -> None:
    alice = await open_browser("alice")
    index = await alice.get("/billing")
    assert index.status_code == 200, index.text
    assert 'data-testid="nav-billing"' in index.text
    assert 'href="/billing/reports"' in index.text  # the reports page's slot
    mine = [r for r in _rows(index.text, "billing-account") if f'data-workspace-id="{world.ws}"' in r]
    assert len(mine) == 1
    assert re.search(r'data-testid="billing-balance">94\.00<', mine[0])
    assert re.search(r'data-testid="billing-month-spend">6\.00<', mine[0])

    charges = await alice.get(f"/billing/workspaces/{world.ws}?view=charges")
    assert charges.status_code == 200, charges.text
    rows = _rows(charges.text, "billing-entry")
    assert len(rows) == 2
    assert all('data-kind="charge"' in r for r in rows)
    assert all(f'href="/jobs/{world.job_id}"' in r for r in rows)
    assert all(">2.000000<" in r and ">-3.00<" in r for r in rows)  # 2 x 1 h machine-hours, x 1.50
    assert {f"copy {i}" for i in world.replica_ids} <= {m for r in rows for m in re.findall(r"copy \d+", r)}

    credits = await alice.get(f"/billing/workspaces/{world.ws}?view=credits")
    rows = _rows(credits.text, "billing-entry")
    assert len(rows) == 1
    assert 'data-kind="recharge"' in rows[0]
    assert "Q3 budget" in rows[0]
    assert ">100.00<" in rows[0]
    assert "test-admin" in rows[0]

    ledger = await alice.get(f"/billing/workspaces/{world.ws}?view=ledger")  # she administers ws
    assert ledger.status_code == 200
    assert len(_rows(ledger.text, "billing-entry")) == 3
    assert 'id="billing-entry-form"' not in ledger.text  # recharging is for platform admins


async def test_who_sees_what(world: World, db: Database, open_browser: OpenBrowser) -> None:
    bob = await open_browser("bob")  # a member: his workspaces' records, not the whole ledger
    assert (await bob.get(f"/billing/workspaces/{world.ws}?view=charges")).status_code == 200
    credits = await bob.get(f"/billing/workspaces/{world.ws}?view=credits")
    assert credits.status_code == 200
    assert 'data-testid="tab-ledger"' not in credits.text
    assert (await bob.get(f"/billing/workspaces/{world.ws}?view=ledger")).status_code == 403
    assert (await bob.get("/billing/admin")).status_code == 403
    assert (await bob.get("/billing/verify")).status_code == 403

    carol = await open_browser("carol")  # no member: the workspace does not exist for her
    assert (await carol.get(f"/billing/workspaces/{world.ws}")).status_code == 404
    assert (await carol.get(f"/billing/workspaces/{world.ws}?view=credits")).status_code == 404
    index = await carol.get("/billing")
    assert f'data-workspace-id="{world.ws}"' not in index.text
    assert 'href="/billing/admin"' not in index.text
    assert (await carol.get(f"/jobs/{world.job_id}")).status_code == 404  # nor does its job's cost

    before = await _entries(db)
    refused = await bob.post(
        f"/billing/workspaces/{world.ws}/entries", {"kind": "recharge", "amount": "5", "reason": "mine"}
    )
    assert refused.status_code == 403
    # A kind that is none of the three: still 403 first (not a hint about the form), as through the API.
    odd = await bob.post(f"/billing/workspaces/{world.ws}/entries", {"kind": "charge", "amount": "5", "reason": "x"})
    assert odd.status_code == 403
    assert await _entries(db) == before


async def test_admin_recharge_form(world: World, db: Database, admin: Browser) -> None:
    page = await admin.get(f"/billing/workspaces/{world.ws}")
    assert page.status_code == 200
    assert 'id="billing-entry-form"' in page.text
    key = re.search(r'name="idempotency_key" value="([0-9a-f]{32})"', page.text)
    assert key is not None
    path = f"/billing/workspaces/{world.ws}/entries"
    before = await _entries(db)

    bad = await admin.post(path, {"kind": "recharge", "amount": "-5", "reason": "x", "idempotency_key": key[1]})
    assert bad.status_code == 422
    assert 'data-testid="billing-entry-amount-error"' in bad.text
    assert "more than 0" in bad.text
    assert 'value="-5"' in bad.text
    assert f'value="{key[1]}"' in bad.text
    for fields, field_name in [
        ({"amount": "1.001", "reason": "x"}, "amount"),
        ({"amount": "abc", "reason": "x"}, "amount"),
        ({"amount": "10", "reason": "  "}, "reason"),
    ]:
        response = await admin.post(path, {"kind": "refund", **fields})
        assert response.status_code == 422, fields
        assert f'data-testid="billing-entry-{field_name}-error"' in response.text
    assert (await admin.post(path, {"kind": "charge", "amount": "1", "reason": "x"})).status_code == 422
    no_csrf = await admin.post(path, {"kind": "recharge", "amount": "5", "reason": "x"}, csrf="")
    assert no_csrf.status_code == 403
    assert await _entries(db) == before
    assert await _balance(db, world.ws) == Decimal("94.00")

    form = {"kind": "recharge", "amount": "50.25", "reason": "top-up", "idempotency_key": key[1]}
    first = await admin.post(path, form)
    second = await admin.post(path, form)  # a double click: the same rendered form again
    assert (first.status_code, second.status_code) == (303, 303)
    assert await _entries(db) == before + 1
    assert await _balance(db, world.ws) == Decimal("144.25")
    landed = await admin.get(first.headers["location"])
    assert "Recharge of 50.25 coins recorded." in landed.text

    other = await admin.post(path, {**form, "amount": "7"})  # the spent key for another amount
    assert other.status_code == 409
    assert f'value="{key[1]}"' not in other.text  # the corrected form gets a fresh key
    adjusted = await admin.post(
        path, {"kind": "adjustment", "amount": "-0.25", "reason": "rounding", "idempotency_key": uuid.uuid4().hex}
    )
    assert adjusted.status_code == 303
    assert await _balance(db, world.ws) == Decimal("144.00")

    listing = await admin.get("/billing/admin")
    assert listing.status_code == 200
    row = next(r for r in _rows(listing.text, "billing-account") if f'data-workspace-id="{world.ws}"' in r)
    assert re.search(r'data-testid="billing-balance">144\.00<', row)
    verified = await admin.get("/billing/verify")
    assert verified.status_code == 200
    assert 'data-testid="billing-verify-ok"' in verified.text
    assert await _entries(db) == before + 2


async def test_verify_shows_a_mismatch(world: World, db: Database, admin: Browser) -> None:
    async with db.write() as session:  # a balance changed behind the ledger's back
        await session.execute(update(Workspace).where(Workspace.id == world.ws).values(balance=Decimal("1")))
    page = await admin.get("/billing/verify")
    assert page.status_code == 200
    assert len(_rows(page.text, "billing-mismatch")) == 1
    assert f'?view=ledger">{world.ws}<' in page.text


async def test_job_page_shows_its_cost(world: World, db: Database, open_browser: OpenBrowser) -> None:
    alice = await open_browser("alice")
    running = await alice.get(f"/jobs/{world.job_id}")
    assert running.status_code == 200, running.text
    assert 'data-testid="cost-amount" data-estimated="yes"' in running.text
    assert "6.00 charged" in running.text  # what the meter charged so far, beside the estimate

    async with db.write() as session:  # both copies ended an hour after they started
        started = await session.scalar(select(Replica.started_at).where(Replica.id == world.replica_ids[0]))
        assert started is not None
        await session.execute(
            update(Replica).where(Replica.job_id == world.job_id).values(finished_at=started + timedelta(hours=1))
        )
    final = await alice.get(f"/jobs/{world.job_id}")
    assert re.search(r'data-testid="cost-hours">4\.000000<', final.text)
    assert re.search(r'data-testid="cost-amount" data-estimated="no">6\.00 coins', final.text)
    async with db.read() as session:
        cost = await billing.job_cost(session, world.job_id, utcnow())
    assert (cost.machine_hours, cost.amount, cost.charged, cost.estimated) == (
        Decimal("4.000000"),
        Decimal("6.00"),
        Decimal("6.00"),
        False,
    )


async def test_spec_price_finer_than_a_cent_is_refused(db: Database, admin: Browser) -> None:
    form = {"name": "cpu-2", "cpu": "2", "memory": "4Gi", "price_per_hour": "0.125", "billing_weight": "1"}
    refused = await admin.post("/specs", form)
    assert refused.status_code == 422
    assert 'data-testid="spec-create-price-per-hour-error"' in refused.text
    assert "2 decimal places" in refused.text
    assert (await admin.post("/specs", {**form, "price_per_hour": "-1"})).status_code == 422
    created = await admin.post("/specs", {**form, "price_per_hour": "0.13"})
    assert created.status_code == 303
    async with db.read() as session:
        price = await session.scalar(select(ResourceSpec.price_per_hour).where(ResourceSpec.name == "cpu-2"))
    assert price == Decimal("0.13")


async def test_service_page_shows_its_replicas_cost(
    db: Database, client: httpx.AsyncClient, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, h = await _logins(db, client, tmp_path)  # spec cpu-4: weight 2, 1 coin per machine-hour
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    await new_version(db, w.p.alice, item.id, entries(store, {"model.onnx": b"v1"}), kind=ItemKind.MODEL)
    body = {"spec": {"name": "iris", "model": "iris:1", "resources": {"spec": "cpu-4"}}}
    sid = (await client.post("/api/v1/services", json=body, headers=h["alice"])).json()["id"]
    (job_id,) = await _replica_jobs(db, sid)
    start = utcnow() - timedelta(minutes=90)
    async with db.write() as session:
        await session.execute(update(Replica).where(Replica.job_id == job_id).values(started_at=start))

    bob = await open_browser("bob", PASSWORD)
    page = await bob.get(f"/services/{sid}")
    assert page.status_code == 200, page.text
    assert 'data-testid="service-cost"' in page.text
    assert 'data-estimated="yes"' in page.text

    async with db.write() as session:
        await session.execute(
            update(Replica).where(Replica.job_id == job_id).values(finished_at=start + timedelta(minutes=90))
        )
    page = await bob.get(f"/services/{sid}")
    assert re.search(r'data-testid="cost-hours">3\.000000<', page.text)  # 2 x 1.5 h
    assert re.search(r'data-testid="cost-amount" data-estimated="no">3\.00<', page.text)
    r = await client.get(f"/api/v1/services/{sid}/cost", headers=h["alice"])
    assert (r.json()["machine_hours"], r.json()["amount"], r.json()["estimated"]) == ("3.000000", "3.00", False)
    assert (await client.get(f"/api/v1/services/{sid}/cost", headers=h["carol"])).status_code == 404
