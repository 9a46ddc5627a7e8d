"""The notebooks REST API without running anything: create (and bad input: 4xx naming the field, nothing
created), list, detail, idle timeout, stop/start/save edges, delete, train-spec, the refusals of the proxy before
any notebook runs, and the jobs API refusing kind notebook. Running notebooks (JupyterLab, SSH, culling) are in
tests/e2e/test_notebooks_journey.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from aicenter.db.engine import Database
from aicenter.db.models import Job, Notebook
from tests.integration.api.test_jobs_api import _logins

API = "/api/v1/notebooks"


def _nb(**changes: Any) -> dict[str, Any]:
    return {"spec": {"name": "explore", "resources": {"spec": "cpu-4"}, **changes}}


async def _count(db: Database) -> tuple[int, int]:
    async with db.read() as session:
        jobs = await session.scalar(select(func.count()).select_from(Job))
        notebooks = await session.scalar(select(func.count()).select_from(Notebook))
    return int(jobs or 0), int(notebooks or 0)


async def test_create_list_get_update_stop_start_delete(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    created = await client.post(API, json=_nb(datasets=[w.dataset_ref], algorithm=w.algorithm_ref), headers=h["alice"])
    assert created.status_code == 201, created.text
    nb = created.json()
    assert (nb["status"], nb["is_owner"], nb["lab_url"], nb["ssh_host"]) == (
        "queued", True, f"/notebooks/{nb['id']}/lab", f"notebook-{nb['id']}",
    )  # fmt: skip
    assert (nb["idle_timeout_s"], nb["own_idle_timeout_s"], nb["warned"]) == (3600, None, False)
    assert [e["to_status"] for e in nb["events"]] == ["pending", "queued"]

    seen_by_bob = (await client.get(f"{API}/{nb['id']}", headers=h["bob"])).json()
    assert (seen_by_bob["is_owner"], seen_by_bob["username"]) == (False, "alice")
    assert (await client.get(f"{API}/{nb['id']}", headers=h["carol"])).status_code == 404
    assert [n["id"] for n in (await client.get(API, headers=h["bob"])).json()["items"]] == [nb["id"]]
    assert (await client.get(API, headers=h["carol"])).json()["items"] == []
    jobs_listed = (await client.get("/api/v1/jobs", params={"kind": "notebook"}, headers=h["alice"])).json()
    assert [j["id"] for j in jobs_listed["items"]] == [nb["id"]]  # a notebook is a job

    changed = await client.patch(f"{API}/{nb['id']}", json={"idle_timeout_s": 600}, headers=h["alice"])
    assert (changed.status_code, changed.json()["idle_timeout_s"]) == (200, 600)
    bad = await client.patch(f"{API}/{nb['id']}", json={"idle_timeout_s": 5}, headers=h["alice"])
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "idle_timeout_s")
    assert (await client.patch(f"{API}/{nb['id']}", json={"idle_timeout_s": 0}, headers=h["bob"])).status_code == 403

    spec = (await client.get(f"{API}/{nb['id']}/train-spec", headers=h["alice"])).json()["spec"]
    assert (spec["kind"], spec["algorithm"], spec["datasets"]) == ("train", w.algorithm_ref, [w.dataset_ref])
    assert spec["tasks"][0]["resources"] == {"spec": "cpu-4", "gpu": 0}

    # Not running: no second start, no save, no SSH host key yet; the proxy says so to the owner only.
    for path, body in (("start", None), ("save", {})):
        refused = await client.post(f"{API}/{nb['id']}/{path}", json=body, headers=h["alice"])
        assert (refused.status_code, refused.json()["error"]["code"]) == (409, "invalid_transition"), path
    assert (await client.post(f"{API}/{nb['id']}/start", headers=h["bob"])).status_code == 403
    lab = await client.get(f"/notebooks/{nb['id']}/api/status", headers=h["alice"])
    assert (lab.status_code, "queued" in lab.json()["error"]["message"]) == (404, True)
    assert (await client.get(f"/notebooks/{nb['id']}/api/status", headers=h["bob"])).status_code == 403
    assert (await client.get(f"/notebooks/{nb['id']}/api/status", headers=h["carol"])).status_code == 404
    assert (await client.get(f"/notebooks/{nb['id']}/api/status")).status_code == 401

    assert (await client.delete(f"{API}/{nb['id']}", headers=h["alice"])).status_code == 409
    stopped = await client.post(f"{API}/{nb['id']}/stop", headers=h["alice"])
    assert (stopped.status_code, stopped.json()["status"]) == (200, "stopped")
    started = await client.post(f"{API}/{nb['id']}/start", headers=h["alice"])
    assert (started.status_code, started.json()["status"], started.json()["restart_count"]) == (200, "queued", 1)
    assert [r["attempt"] for r in started.json()["replicas"]] == [0, 1]
    await client.post(f"{API}/{nb['id']}/stop", headers=h["alice"])
    assert (await client.delete(f"{API}/{nb['id']}", headers=h["alice"])).status_code == 204
    assert await _count(db) == (0, 0)
    # Ids are never reused, on SQLite too: the id names the work dir, the JupyterLab token, the SSH alias and key.
    again = await client.post(API, json=_nb(), headers=h["alice"])
    assert again.json()["id"] > nb["id"]


async def test_bad_requests_name_the_field_and_create_nothing(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    cases = [
        (_nb(image="nope:1"), 404, "image"),
        (_nb(datasets=["cifar:9"]), 404, "datasets[0]"),
        (_nb(resources={"spec": "gpu-a"}), 422, "resources.spec"),  # a spec outside the workspace's pools
        (_nb(resources={"cpu": 64, "memory": "1Gi"}), 422, "resources"),  # larger than any node
        (_nb(resources={"cpu": 1}), 422, "resources.memory"),
        (_nb(idle_timeout_s=-1), 422, "idle_timeout_s"),
        ({"spec": "name: [unclosed"}, 422, None),
    ]
    for body, status, field in cases:
        answer = await client.post(API, json=body, headers=h["alice"])
        assert answer.status_code == status, (body, answer.text)
        if field is not None:
            assert answer.json()["error"]["details"].get("field") == field, (body, answer.text)
    assert await _count(db) == (0, 0)

    assert (await client.post(API, json=_nb(), headers=h["alice"])).status_code == 201
    twice = await client.post(API, json=_nb(), headers=h["alice"])
    assert (twice.status_code, twice.json()["error"]["code"]) == (409, "conflict")
    assert (await client.post(API, json=_nb(), headers=h["bob"])).status_code == 201  # names are per owner
    assert await _count(db) == (2, 2)

    as_job = {"spec": {"kind": "notebook", "name": "sneaky", "tasks": [
        {"name": "notebook", "resources": {"spec": "cpu-4"}, "command": "aicenter-notebook"}]}}  # fmt: skip
    refused = await client.post("/api/v1/jobs", json=as_job, headers=h["alice"])
    assert (refused.status_code, refused.json()["error"]["details"]["field"]) == (422, "kind")
    assert await _count(db) == (2, 2)
    del w
