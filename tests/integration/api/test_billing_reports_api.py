"""Billing reports through the REST API on SQLite and PostgreSQL: JSON and CSV of the day rollups, bad ranges
422 naming the field, isolation between workspaces, statistics for platform admins only (rollups synthesized:
the meter's writing of them is tested in services/test_billing_reports.py)."""

from __future__ import annotations

from datetime import date

import httpx
import pytest
from sqlalchemy import insert, select

from aicenter.db.engine import Database
from aicenter.db.models import BillingRollup, User
from tests.factories import admin_login, make_user


async def _user(db: Database, username: str) -> tuple[int, int]:
    async with db.read() as session:
        row = (await session.execute(select(User.id, User.default_workspace_id).where(User.username == username))).one()
    return row[0], row[1]


async def _rollup(db: Database, day: date, ws: int, user: int, kind: str, cents: int, gpu: str = "") -> None:
    async with db.write() as session:
        await session.execute(
            insert(BillingRollup).values(
                day=day,
                workspace_id=ws,
                user_id=user,
                kind=kind,
                spec_name="cpu-4",
                gpu_type=gpu,
                microhours=cents * 10_000,  # 1 coin per machine-hour
                cents=cents,
                entries=1,
            )
        )


async def test_report_json_csv_isolation_and_stats(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    alice_id, alice_ws = await _user(db, "alice")
    bob_id, bob_ws = await _user(db, "bob")
    await _rollup(db, date(2026, 1, 31), alice_ws, alice_id, "train", 150)
    await _rollup(db, date(2026, 2, 1), alice_ws, alice_id, "notebook", 25, gpu="a100")
    await _rollup(db, date(2026, 2, 1), bob_ws, bob_id, "train", 999)
    params = {"period": "month", "group_by": "kind", "from": "2026-01-01", "to": "2026-03-01"}

    r = await client.get("/api/v1/billing/report", params=params, headers=alice.headers)
    assert r.status_code == 200, r.text
    body = r.json()
    assert [(x["bucket"], x["group"], x["amount"], x["machine_hours"]) for x in body["rows"]] == [
        ("2026-01-01", "train", "1.50", "1.500000"),
        ("2026-02-01", "notebook", "0.25", "0.250000"),
    ]
    assert (body["amount"], body["buckets"], body["groups"]) == (
        "1.75",
        ["2026-01-01", "2026-02-01"],
        ["notebook", "train"],
    )

    r = await client.get("/api/v1/billing/report", params={**params, "format": "csv"}, headers=alice.headers)
    assert r.headers["content-type"].startswith("text/csv")
    assert r.headers["content-disposition"] == 'attachment; filename="billing-month-kind-2026-01-01.csv"'
    assert r.text.splitlines() == [
        "period_start,kind,machine_hours,amount,entries",
        "2026-01-01,train,1.500000,1.50,1",
        "2026-02-01,notebook,0.250000,0.25,1",
    ]
    r = await client.get("/api/v1/billing/report", params={**params, "workspace_id": bob_ws}, headers=alice.headers)
    assert r.status_code == 404
    r = await client.get("/api/v1/billing/report", params={**params, "group_by": "workspace"}, headers=admin.headers)
    assert [(x["group"], x["amount"]) for x in r.json()["rows"]] == [
        ("alice", "1.50"),
        ("alice", "0.25"),
        ("bob", "9.99"),
    ]

    r = await client.get("/api/v1/billing/stats", params=params, headers=bob.headers)
    assert r.status_code == 403
    r = await client.get("/api/v1/billing/stats", params=params, headers=admin.headers)
    assert r.status_code == 200, r.text
    stats = r.json()
    assert (stats["active_workspaces"], stats["amount"]) == (2, "11.74")
    assert stats["hours_by_gpu_type"] == {"": ["1.500000", "9.990000"], "a100": ["0.000000", "0.250000"]}


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"from": "2026-01-01"}, "to"),
        ({"to": "2026-01-01"}, "from"),
        ({"from": "2026-03-01", "to": "2026-01-01"}, "to"),
        ({"from": "2019-01-01", "to": "2026-01-01"}, "to"),
        ({"from": "2026-13-01", "to": "2027-01-01"}, "from"),
    ],
)
async def test_bad_ranges_are_422(client: httpx.AsyncClient, db: Database, params: dict[str, str], field: str) -> None:
    alice = await make_user(db, client, "alice")
    r = await client.get("/api/v1/billing/report", params=params, headers=alice.headers)
    assert r.status_code == 422, r.text
    assert r.json()["error"]["code"] == "validation_failed"
    assert r.json()["error"]["details"]["field"] == field
