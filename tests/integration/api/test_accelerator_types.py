"""Accelerator types on SQLite and PostgreSQL: CRUD, bad input, and refusing to delete one in use."""

from __future__ import annotations

import httpx

from aicenter.db.engine import Database
from tests.factories import admin_login, make_user

URL = "/api/v1/accelerator-types"


async def test_crud_and_members_read(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    r = await client.post(
        URL, json={"name": "ascend-910b", "vendor": "huawei", "memory": "64Gi"}, headers=admin.headers
    )
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["memory_bytes"] == 64 * 2**30
    assert created["vendor"] == "huawei"

    alice = await make_user(db, client, "alice")
    listed = await client.get(URL, headers=alice.headers)
    assert listed.status_code == 200
    assert [t["name"] for t in listed.json()["items"]] == ["ascend-910b"]
    assert (await client.get(f"{URL}?vendor=nvidia", headers=alice.headers)).json()["items"] == []
    assert (await client.get(f"{URL}/{created['id']}", headers=alice.headers)).status_code == 200

    r = await client.patch(
        f"{URL}/{created['id']}", json={"description": "Atlas 800T", "memory": None}, headers=admin.headers
    )
    assert r.status_code == 200, r.text
    assert r.json()["description"] == "Atlas 800T"
    assert r.json()["memory_bytes"] == 0

    assert (await client.delete(f"{URL}/{created['id']}", headers=admin.headers)).status_code == 204
    assert (await client.get(f"{URL}/{created['id']}", headers=admin.headers)).status_code == 404

    events = await client.get("/api/v1/audit-events?target_type=accelerator_type", headers=admin.headers)
    if events.status_code == 200:  # the audit endpoint belongs to the tenancy area
        actions = {e["action"] for e in events.json()["items"]}
        assert {"accelerator_type.create", "accelerator_type.update", "accelerator_type.delete"} <= actions


async def test_members_cannot_manage(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    r = await client.post(URL, json={"name": "nvidia-a100", "vendor": "nvidia"}, headers=alice.headers)
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "forbidden"
    created = await client.post(URL, json={"name": "nvidia-a100", "vendor": "nvidia"}, headers=admin.headers)
    type_id = created.json()["id"]
    assert (await client.patch(f"{URL}/{type_id}", json={"vendor": "x"}, headers=alice.headers)).status_code == 403
    assert (await client.delete(f"{URL}/{type_id}", headers=alice.headers)).status_code == 403
    assert (await client.get(URL)).status_code == 401


async def test_bad_input(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    cases = [
        ({"name": "Nvidia A100", "vendor": "nvidia"}, "name"),
        ({"name": "cpu", "vendor": "nvidia"}, "name"),
        ({"name": "nvidia-a100", "vendor": "NVIDIA!"}, "vendor"),
        ({"name": "nvidia-a100", "vendor": "nvidia", "memory": "80Gx"}, "memory"),
        ({"name": "nvidia-a100", "vendor": "nvidia", "colour": "green"}, "colour"),
    ]
    for body, field in cases:
        r = await client.post(URL, json=body, headers=admin.headers)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["code"] == "validation_failed"
        assert r.json()["error"]["details"]["field"] == field, (body, r.json())
    assert (await client.get(URL, headers=admin.headers)).json()["items"] == []

    first = await client.post(URL, json={"name": "nvidia-a100", "vendor": "nvidia"}, headers=admin.headers)
    assert first.status_code == 201
    type_id = first.json()["id"]
    dup = await client.post(URL, json={"name": "nvidia-a100", "vendor": "nvidia"}, headers=admin.headers)
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "conflict"
    r = await client.patch(f"{URL}/{type_id}", json={"vendor": None}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "vendor"
    assert (await client.get(f"{URL}/999999", headers=admin.headers)).status_code == 404


async def test_delete_or_rename_in_use_is_refused(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    created = await client.post(
        URL, json={"name": "nvidia-a100", "vendor": "nvidia", "memory": "80Gi"}, headers=admin.headers
    )
    type_id = created.json()["id"]
    node = await client.post(
        "/api/v1/nodes",
        json={"name": "gpu-01", "cpu": 64, "memory": "512Gi", "accelerators": [{"index": 0, "type": "nvidia-a100"}]},
        headers=admin.headers,
    )
    assert node.status_code == 201, node.text
    spec = await client.post(
        "/api/v1/specs",
        json={
            "name": "gpu-a100-1",
            "cpu": 8,
            "memory": "64Gi",
            "accelerators": 1,
            "accelerator_type": "nvidia-a100",
            "price_per_hour": "12.5",
        },
        headers=admin.headers,
    )
    assert spec.status_code == 201, spec.text

    r = await client.delete(f"{URL}/{type_id}", headers=admin.headers)
    assert r.status_code == 409
    error = r.json()["error"]
    assert error["code"] == "conflict"
    assert error["details"]["nodes"] == ["gpu-01"]
    assert error["details"]["specs"] == ["gpu-a100-1"]
    assert "gpu-01" in error["message"]
    assert "gpu-a100-1" in error["message"]
    r = await client.patch(f"{URL}/{type_id}", json={"name": "nvidia-a100-80g"}, headers=admin.headers)
    assert r.status_code == 409

    await client.delete(f"/api/v1/specs/{spec.json()['id']}", headers=admin.headers)
    await client.delete(f"/api/v1/nodes/{node.json()['id']}", headers=admin.headers)
    assert (await client.delete(f"{URL}/{type_id}", headers=admin.headers)).status_code == 204
