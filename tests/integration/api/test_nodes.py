"""Nodes on SQLite and PostgreSQL: registration by hand, labels, topology, cordon/drain, filters, bad input."""

from __future__ import annotations

from typing import Any

import httpx

from aicenter.db.engine import Database
from tests.factories import Login, admin_login, make_user

URL = "/api/v1/nodes"


async def _a100(client: httpx.AsyncClient, admin: Login) -> None:
    r = await client.post(
        "/api/v1/accelerator-types",
        json={"name": "nvidia-a100", "vendor": "nvidia", "memory": "80Gi"},
        headers=admin.headers,
    )
    assert r.status_code == 201, r.text


async def _node(client: httpx.AsyncClient, admin: Login, name: str, **extra: Any) -> dict[str, Any]:
    r = await client.post(URL, json={"name": name, "cpu": 8, "memory": "32Gi", **extra}, headers=admin.headers)
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_register_by_hand_and_read(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _a100(client, admin)
    node = await _node(
        client,
        admin,
        "gpu-01",
        cpu="96",
        memory="1Ti",
        address="10.0.0.11",
        accelerators=[
            {"index": 1, "type": "nvidia-a100", "nvlink_domain": "nvl-1"},
            {"index": 0, "type": "nvidia-a100", "memory": "40Gi"},
        ],
        labels={"zone": "a", "example.com/gpu": "a100"},
        rack="r01",
        leaf="leaf-1",
        spine="spine-1",
        nvlink_domain="nvl-1",
    )
    assert node["cpu_milli"] == 96000
    assert node["memory_bytes"] == 2**40
    assert node["executor"] == "manual"
    assert node["schedule"] == "schedulable"
    assert node["state"] == "ready"
    assert node["last_heartbeat_at"] is None
    assert node["accelerators"] == [
        {"index": 0, "type": "nvidia-a100", "model": None, "memory_bytes": 40 * 2**30, "nvlink_domain": None},
        {"index": 1, "type": "nvidia-a100", "model": None, "memory_bytes": 80 * 2**30, "nvlink_domain": "nvl-1"},
    ]
    assert node["labels"] == {"zone": "a", "example.com/gpu": "a100"}
    assert (node["rack"], node["leaf"], node["spine"], node["nvlink_domain"]) == ("r01", "leaf-1", "spine-1", "nvl-1")
    assert node["pools"] == ["default"]

    got = await client.get(f"{URL}/{node['id']}", headers=admin.headers)
    assert got.json() == node


async def test_cpu_quantities(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    assert (await _node(client, admin, "a", cpu="500m"))["cpu_milli"] == 500
    assert (await _node(client, admin, "b", cpu=2.5))["cpu_milli"] == 2500
    assert (await _node(client, admin, "c", memory=1024))["memory_bytes"] == 1024


async def test_patch_cordon_drain_uncordon_delete(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    node = await _node(client, admin, "cpu-01", rack="r01")
    url = f"{URL}/{node['id']}"
    r = await client.patch(url, json={"labels": {"zone": "b"}, "rack": None, "leaf": "l2"}, headers=admin.headers)
    assert r.status_code == 200, r.text
    assert r.json()["labels"] == {"zone": "b"}
    assert r.json()["rack"] is None
    assert r.json()["leaf"] == "l2"

    for action, expected in (("cordon", "cordoned"), ("drain", "draining"), ("uncordon", "schedulable")):
        r = await client.post(f"{url}/{action}", headers=admin.headers)
        assert r.status_code == 200, r.text
        assert r.json()["schedule"] == expected

    listed = await client.get(f"{URL}?schedule=schedulable", headers=admin.headers)
    assert [n["name"] for n in listed.json()["items"]] == ["cpu-01"]
    await client.post(f"{url}/cordon", headers=admin.headers)
    assert (await client.get(f"{URL}?schedule=schedulable", headers=admin.headers)).json()["items"] == []
    assert len((await client.get(f"{URL}?schedule=cordoned", headers=admin.headers)).json()["items"]) == 1

    assert (await client.delete(url, headers=admin.headers)).status_code == 204
    assert (await client.get(url, headers=admin.headers)).status_code == 404
    assert (await client.post(f"{url}/cordon", headers=admin.headers)).status_code == 404


async def test_filters_by_label_state_and_pool(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _node(client, admin, "n1", labels={"zone": "a", "aicenter.io/hostname": "n1"})
    await _node(client, admin, "n2", labels={"zone": "b"})
    await _node(client, admin, "n3", labels={"zone": "a", "gpu": "yes"})
    pool = await client.post("/api/v1/pools", json={"name": "zone-a", "selector": {"zone": "a"}}, headers=admin.headers)
    assert pool.status_code == 201

    async def names(query: str) -> list[str]:
        r = await client.get(f"{URL}?{query}", headers=admin.headers)
        assert r.status_code == 200, r.text
        return [n["name"] for n in r.json()["items"]]

    assert await names("label=zone=a") == ["n1", "n3"]
    assert await names("label=zone=a&label=gpu=yes") == ["n3"]
    assert await names("label=aicenter.io/hostname=n1") == ["n1"]
    assert await names("pool=zone-a") == ["n1", "n3"]
    assert await names("pool=zone-a&label=zone=b") == []
    assert await names("pool=default") == ["n1", "n2", "n3"]
    assert await names("state=ready") == ["n1", "n2", "n3"]
    assert await names("state=not_ready") == []
    assert await names("limit=2") == ["n1", "n2"]
    page = (await client.get(f"{URL}?limit=2", headers=admin.headers)).json()
    rest = await client.get(f"{URL}?limit=2&cursor={page['next_cursor']}", headers=admin.headers)
    assert [n["name"] for n in rest.json()["items"]] == ["n3"]

    got = await client.get(f"{URL}?label=zone=a", headers=admin.headers)
    assert got.json()["items"][0]["pools"] == ["default", "zone-a"]

    for query, field in (("state=sleeping", "state"), ("label=zone", "label"), ("pool=nope", "pool")):
        r = await client.get(f"{URL}?{query}", headers=admin.headers)
        assert r.status_code == 422, query
        assert r.json()["error"]["details"]["field"] == field


async def test_bad_input_changes_nothing(client: httpx.AsyncClient) -> None:
    admin = await admin_login(client)
    await _a100(client, admin)
    cases: list[tuple[dict[str, Any], str]] = [
        ({"name": "n", "cpu": 8, "memory": "16Gx"}, "memory"),
        ({"name": "n", "cpu": "8 cores", "memory": "16Gi"}, "cpu"),
        ({"name": "n", "cpu": 0, "memory": "16Gi"}, "cpu"),
        ({"name": "n", "cpu": -1, "memory": "16Gi"}, "cpu"),
        ({"name": "n", "cpu": True, "memory": "16Gi"}, "cpu"),
        ({"name": "n", "cpu": 8, "memory": "99999999Pi"}, "memory"),
        ({"name": "Bad Name", "cpu": 8, "memory": "16Gi"}, "name"),
        ({"name": "n", "cpu": 8, "memory": "16Gi", "gpus": 2}, "gpus"),
        ({"name": "n", "cpu": 8, "memory": "16Gi", "labels": {"bad key!": "x"}}, "labels.bad key!"),
        ({"name": "n", "cpu": 8, "memory": "16Gi", "labels": {"zone": "a b"}}, "labels.zone"),
        ({"name": "n", "cpu": 8, "memory": "16Gi", "labels": {"zone": 5}}, "labels.zone"),
        ({"name": "n", "cpu": 8, "memory": "16Gi", "rack": "rack 1"}, "rack"),
        (
            {"name": "n", "cpu": 8, "memory": "16Gi", "accelerators": [{"index": 0, "type": "nvidia-h100"}]},
            "accelerators[0].type",
        ),
        (
            {
                "name": "n",
                "cpu": 8,
                "memory": "16Gi",
                "accelerators": [{"index": 0, "type": "nvidia-a100"}, {"index": 1, "type": "ascend-910b"}],
            },
            "accelerators[1].type",
        ),
        (
            {
                "name": "n",
                "cpu": 8,
                "memory": "16Gi",
                "accelerators": [{"index": 0, "type": "nvidia-a100"}, {"index": 0, "type": "nvidia-a100"}],
            },
            "accelerators[1].index",
        ),
        (
            {"name": "n", "cpu": 8, "memory": "16Gi", "accelerators": [{"index": -1, "type": "nvidia-a100"}]},
            "accelerators[0].index",
        ),
        (
            {
                "name": "n",
                "cpu": 8,
                "memory": "16Gi",
                "accelerators": [{"index": 0, "type": "nvidia-a100", "memory": "x"}],
            },
            "accelerators[0].memory",
        ),
    ]
    for body, field in cases:
        r = await client.post(URL, json=body, headers=admin.headers)
        assert r.status_code == 422, (body, r.text)
        error = r.json()["error"]
        assert error["code"] == "validation_failed"
        assert error["details"]["field"] == field, (body, error)
        assert error["message"]
    assert (await client.get(URL, headers=admin.headers)).json()["items"] == []

    node = await _node(client, admin, "n")
    dup = await client.post(URL, json={"name": "n", "cpu": 1, "memory": "1Gi"}, headers=admin.headers)
    assert dup.status_code == 409
    assert dup.json()["error"]["code"] == "conflict"
    r = await client.patch(f"{URL}/{node['id']}", json={"labels": None}, headers=admin.headers)
    assert r.status_code == 422
    assert r.json()["error"]["details"]["field"] == "labels"
    r = await client.patch(f"{URL}/{node['id']}", json={"cpu": 4}, headers=admin.headers)
    assert r.status_code == 422
    assert (await client.get(f"{URL}/{node['id']}", headers=admin.headers)).json() == node


async def test_members_get_403(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    node = await _node(client, admin, "n1")
    alice = await make_user(db, client, "alice")
    url = f"{URL}/{node['id']}"
    calls = [
        client.get(URL, headers=alice.headers),
        client.post(URL, json={"name": "n2", "cpu": 1, "memory": "1Gi"}, headers=alice.headers),
        client.get(url, headers=alice.headers),
        client.patch(url, json={"labels": {}}, headers=alice.headers),
        client.post(f"{url}/cordon", headers=alice.headers),
        client.post(f"{url}/drain", headers=alice.headers),
        client.post(f"{url}/uncordon", headers=alice.headers),
        client.delete(url, headers=alice.headers),
    ]
    for call in calls:
        r = await call
        assert r.status_code == 403, r.request.url
        assert r.json()["error"]["code"] == "forbidden"
    assert (await client.get(URL)).status_code == 401
    assert (await client.get(url, headers=admin.headers)).json() == node
