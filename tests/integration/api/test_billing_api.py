"""Billing through the REST API on SQLite and PostgreSQL: admin entries with stable errors and nothing written
for bad input, a member's balance and ledger, the reconciliation."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from aicenter.db.engine import Database
from aicenter.db.models import User
from tests.factories import admin_login, make_user


async def _workspace(db: Database, username: str) -> int:
    async with db.read() as session:
        ws = await session.scalar(select(User.default_workspace_id).where(User.username == username))
    assert ws is not None
    return ws


async def test_recharge_then_a_member_reads_balance_and_ledger(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    ws = await _workspace(db, "alice")
    body = {"kind": "recharge", "amount": "100.50", "reason": "first top-up", "idempotency_key": "t1"}
    r = await client.post(f"/api/v1/workspaces/{ws}/ledger", json=body, headers=admin.headers)
    assert r.status_code == 201, r.text
    assert r.json()["amount"] == "100.50"
    again = await client.post(f"/api/v1/workspaces/{ws}/ledger", json=body, headers=admin.headers)
    assert again.json()["id"] == r.json()["id"]
    r = await client.post(
        f"/api/v1/workspaces/{ws}/ledger",
        json={"kind": "adjustment", "amount": "-0.50", "reason": "correction"},
        headers=admin.headers,
    )
    assert r.status_code == 201, r.text

    r = await client.get(f"/api/v1/workspaces/{ws}/balance", headers=alice.headers)
    assert r.json() == {"workspace_id": ws, "workspace": "alice", "balance": "100.00"}
    r = await client.get(f"/api/v1/workspaces/{ws}/ledger", params={"kind": "recharge"}, headers=alice.headers)
    assert [e["reason"] for e in r.json()["items"]] == ["first top-up"]
    r = await client.get("/api/v1/billing/verify", headers=admin.headers)
    assert r.json() == {"ok": True, "mismatches": []}


@pytest.mark.parametrize(
    ("body", "status", "code", "field"),
    [
        ({"kind": "recharge", "amount": "-5", "reason": "x"}, 422, "validation_failed", "amount"),
        ({"kind": "recharge", "amount": "ten", "reason": "x"}, 422, "validation_failed", "amount"),
        ({"kind": "recharge", "amount": "1.005", "reason": "x"}, 422, "validation_failed", "amount"),
        ({"kind": "adjustment", "amount": "0", "reason": "x"}, 422, "validation_failed", "amount"),
        ({"kind": "recharge", "amount": "5", "reason": ""}, 422, "validation_failed", "reason"),
    ],
)
async def test_bad_entries_are_refused_and_write_nothing(
    client: httpx.AsyncClient, db: Database, body: dict[str, Any], status: int, code: str, field: str
) -> None:
    admin = await admin_login(client)
    await make_user(db, client, "alice")
    ws = await _workspace(db, "alice")
    r = await client.post(f"/api/v1/workspaces/{ws}/ledger", json=body, headers=admin.headers)
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code
    assert r.json()["error"]["details"]["field"] == field
    r = await client.get(f"/api/v1/workspaces/{ws}/ledger", headers=admin.headers)
    assert r.json()["items"] == []


async def test_unknown_workspace_and_members_are_refused(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    ws = await _workspace(db, "alice")
    body = {"kind": "recharge", "amount": "5", "reason": "x"}
    r = await client.post("/api/v1/workspaces/999999/ledger", json=body, headers=admin.headers)
    assert r.status_code == 404
    r = await client.post(f"/api/v1/workspaces/{ws}/ledger", json=body, headers=alice.headers)
    assert r.status_code == 403
    assert (await client.get("/api/v1/billing/verify", headers=alice.headers)).status_code == 403
