"""Resource specs on SQLite and PostgreSQL: CRUD, prices and shares, bad input, and what members may list."""

from __future__ import annotations

from typing import Any

import httpx

from aicenter.db.engine import Database
from tests.factories import Login, admin_login, make_user

URL = "/api/v1/specs"


async def _spec(client: httpx.AsyncClient, admin: Login, name: str, **extra: Any) -> dict[str, Any]:
    body = {"name": name, "cpu": 4, "memory": "16Gi", "price_per_hour": "1.5", **extra}
    r = await client.post(URL, json=body, headers=admin.headers)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


async def _a100(client: httpx.AsyncClient, admin: Login) -> None:
    r = await client.post(
        "/api/v1/accelerator-types", json={"name": "nvidia-a100", "vendor": "nvidia"}, headers=admin.headers
    )
    assert r.status_code == 201


async def _pool_id(client: httpx.AsyncClient, admin: Login, name: str) -> int:
    r = await client.post("/api/v1/pools", json={"name": name}, headers=admin.headers)
    assert r.status_code == 201
    pool_id: int = r.json()["id"]
    return pool_id


async def test_crud(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _a100(client, admin)
    spec = await _spec(
        client,
        admin,
        "gpu-a100-1",
        cpu="8",
        memory="64Gi",
        accelerators=1,
        accelerator_type="nvidia-a100",
        price_per_hour="12.25",
        billing_weight=8,
        description="1 A100",
    )
    assert spec["cpu_milli"] == 8000
    assert spec["memory_bytes"] == 64 * 2**30
    assert (spec["accelerators"], spec["accelerator_share"], spec["accelerator_type"]) == (1, 0, "nvidia-a100")
    assert spec["price_per_hour"] == "12.2500"
    assert spec["billing_weight"] == 8.0
    assert spec["pool_id"] is None
    assert spec["enabled"] is True

    share = await _spec(
        client, admin, "gpu-a100-quarter", accelerator_share=250, accelerator_type="nvidia-a100", price_per_hour=3
    )
    assert (share["accelerators"], share["accelerator_share"], share["price_per_hour"]) == (0, 250, "3.0000")
    free = await _spec(client, admin, "cpu-free", price_per_hour=0, cpu="500m")
    assert (free["price_per_hour"], free["cpu_milli"]) == ("0.0000", 500)

    r = await client.patch(
        f"{URL}/{spec['id']}", json={"price_per_hour": "10", "accelerators": 2, "enabled": False}, headers=admin.headers
    )
    assert r.status_code == 200, r.text
    assert (r.json()["price_per_hour"], r.json()["accelerators"], r.json()["enabled"]) == ("10.0000", 2, False)
    assert (await client.get(f"{URL}/{spec['id']}", headers=admin.headers)).json() == r.json()

    names = [s["name"] for s in (await client.get(URL, headers=admin.headers)).json()["items"]]
    assert names == ["gpu-a100-1", "gpu-a100-quarter", "cpu-free"]
    typed = await client.get(f"{URL}?accelerator_type=nvidia-a100", headers=admin.headers)
    assert [s["name"] for s in typed.json()["items"]] == ["gpu-a100-1", "gpu-a100-quarter"]

    assert (await client.delete(f"{URL}/{spec['id']}", headers=admin.headers)).status_code == 204
    assert (await client.get(f"{URL}/{spec['id']}", headers=admin.headers)).status_code == 404


async def test_bad_input_changes_nothing(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _a100(client, admin)
    base: dict[str, Any] = {"name": "s", "cpu": 4, "memory": "16Gi", "price_per_hour": "1"}
    cases: list[tuple[dict[str, Any], str]] = [
        ({"memory": "16Gx"}, "memory"),
        ({"cpu": "four"}, "cpu"),
        ({"cpu": 0}, "cpu"),
        ({"name": "S 1"}, "name"),
        ({"price_per_hour": "-1"}, "price_per_hour"),
        ({"price_per_hour": "cheap"}, "price_per_hour"),
        ({"price_per_hour": "0.00001"}, "price_per_hour"),
        ({"price_per_hour": "0.001"}, "price_per_hour"),  # finer than the currency's 0.01
        ({"billing_weight": 0}, "billing_weight"),
        ({"billing_weight": -2}, "billing_weight"),
        ({"accelerators": -1}, "accelerators"),
        ({"accelerator_share": 1000, "accelerator_type": "nvidia-a100"}, "accelerator_share"),
        ({"accelerator_share": 500, "accelerators": 1}, "accelerator_share"),
        ({"accelerators": 1, "accelerator_type": "nvidia-h100"}, "accelerator_type"),
        ({"accelerator_type": "nvidia-a100"}, "accelerator_type"),
        ({"pool_id": 999999}, "pool_id"),
        ({"gpu": 1}, "gpu"),
    ]
    for extra, field in cases:
        r = await client.post(URL, json={**base, **extra}, headers=admin.headers)
        assert r.status_code == 422, (extra, r.text)
        assert r.json()["error"]["code"] == "validation_failed"
        assert r.json()["error"]["details"]["field"] == field, (extra, r.json())
    assert (await client.get(URL, headers=admin.headers)).json()["items"] == []

    spec = await _spec(client, admin, "s", accelerators=1, accelerator_type="nvidia-a100")
    dup = await client.post(URL, json=base, headers=admin.headers)
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "conflict"
    # The update is checked as a whole: a share beside whole devices fails and changes nothing.
    r = await client.patch(f"{URL}/{spec['id']}", json={"accelerator_share": 500}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "accelerator_share"
    r = await client.patch(f"{URL}/{spec['id']}", json={"cpu": None}, headers=admin.headers)
    assert r.status_code == 422
    assert (await client.get(f"{URL}/{spec['id']}", headers=admin.headers)).json() == spec


async def test_member_lists_only_specs_of_granted_pools(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    alice_ws = (await client.get("/api/v1/users/me", headers=alice.headers)).json()["default_workspace_id"]
    bob_ws = (await client.get("/api/v1/users/me", headers=bob.headers)).json()["default_workspace_id"]
    pools = (await client.get("/api/v1/pools", headers=admin.headers)).json()["items"]
    default_id = next(p["id"] for p in pools if p["is_default"])
    gpu_id = await _pool_id(client, admin, "gpu")

    await _spec(client, admin, "anywhere")
    await _spec(client, admin, "in-default", pool_id=default_id)
    gpu_spec = await _spec(client, admin, "in-gpu", pool_id=gpu_id)
    off = await _spec(client, admin, "disabled", enabled=False)

    async def names(user: Login, query: str = "") -> list[str]:
        r = await client.get(f"{URL}{query}", headers=user.headers)
        assert r.status_code == 200, r.text
        return [s["name"] for s in r.json()["items"]]

    assert await names(alice) == ["anywhere", "in-default"]
    assert (await client.get(f"{URL}/{gpu_spec['id']}", headers=alice.headers)).status_code == 404
    assert (await client.get(f"{URL}/{off['id']}", headers=alice.headers)).status_code == 404

    assert (await client.put(f"/api/v1/pools/{gpu_id}/workspaces/{alice_ws}", headers=admin.headers)).status_code == 204
    assert await names(alice) == ["anywhere", "in-default", "in-gpu"]
    assert (await client.get(f"{URL}/{gpu_spec['id']}", headers=alice.headers)).status_code == 200
    assert await names(alice, f"?workspace_id={alice_ws}") == ["anywhere", "in-default", "in-gpu"]
    assert await names(bob) == ["anywhere", "in-default"]
    assert await names(admin) == ["anywhere", "in-default", "in-gpu", "disabled"]
    assert await names(admin, f"?workspace_id={bob_ws}") == ["anywhere", "in-default"]

    # Not a member of that workspace: it reads as missing.
    r = await client.get(f"{URL}?workspace_id={bob_ws}", headers=alice.headers)
    assert r.status_code == 404
    assert r.json()["error"]["code"] == "not_found"

    # A workspace without any grant may use no spec, not even one usable in every pool.
    assert (await client.delete(f"/api/v1/pools/{default_id}/workspaces/{bob_ws}", headers=admin.headers)).is_success
    assert await names(bob) == []


async def test_members_cannot_manage(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    spec = await _spec(client, admin, "s")
    alice = await make_user(db, client, "alice")
    body = {"name": "t", "cpu": 1, "memory": "1Gi", "price_per_hour": 0}
    assert (await client.post(URL, json=body, headers=alice.headers)).status_code == 403
    assert (await client.patch(f"{URL}/{spec['id']}", json={"cpu": 2}, headers=alice.headers)).status_code == 403
    assert (await client.delete(f"{URL}/{spec['id']}", headers=alice.headers)).status_code == 403
    assert (await client.get(f"{URL}/{spec['id']}", headers=admin.headers)).json() == spec
