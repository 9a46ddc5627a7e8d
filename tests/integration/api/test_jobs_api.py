"""The jobs REST API: submit (and bad input: 4xx naming the field, nothing created), list, detail, stop,
force-stop, resubmit, delete, templates, and logs (text and SSE) of a replica really launched through the local
executor, its handle stored on the replica row as the reconciler stores it."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from sqlalchemy import select

from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Replica
from aicenter.executors.base import ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from tests.factories import admin_login, login
from tests.integration.services.jobs_helpers import counts, job_world, move, spec

API = "/api/v1/jobs"
PASSWORD = "jobs-api-passw0rd"


async def _logins(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> tuple[Any, dict[str, dict[str, str]]]:
    from aicenter.services import auth

    w = await job_world(db, tmp_path)
    async with db.write() as session:
        from aicenter.db.models import User

        for actor in (w.p.alice, w.p.bob, w.p.carol):
            user = await session.get(User, actor.user_id)
            assert user is not None
            user.password_hash = auth.hash_password(PASSWORD)
    headers = {name: (await login(client, name, PASSWORD)).headers for name in ("alice", "bob", "carol")}
    headers["admin"] = (await admin_login(client)).headers
    return w, headers


async def test_submit_get_list_stop_resubmit_delete(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> None:
    w, h = await _logins(db, client, tmp_path)
    created = await client.post(API, json={"spec": spec(datasets=[w.dataset_ref])}, headers=h["alice"])
    assert created.status_code == 201, created.text
    job = created.json()
    assert (job["status"], job["workspace_name"], job["pool_name"], job["username"]) == (
        "queued",
        "alice",
        "default",
        "alice",
    )
    detail = (await client.get(f"{API}/{job['id']}", headers=h["bob"])).json()
    assert [r["index"] for r in detail["replicas"]] == [0, 1]
    assert [e["to_status"] for e in detail["events"]] == ["pending", "queued"]
    assert (await client.get(f"{API}/{job['id']}", headers=h["carol"])).status_code == 404
    events = (await client.get(f"{API}/{job['id']}/events", headers=h["alice"])).json()
    assert len(events) == 2
    replicas = (await client.get(f"{API}/{job['id']}/replicas", headers=h["alice"])).json()
    assert len(replicas) == 2

    listed = (await client.get(API, params={"status": "queued", "user": "alice"}, headers=h["alice"])).json()
    assert [j["id"] for j in listed["items"]] == [job["id"]]
    bad = await client.get(API, params={"status": "sleeping"}, headers=h["alice"])
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "status")

    assert (await client.delete(f"{API}/{job['id']}", headers=h["alice"])).status_code == 409
    assert (await client.post(f"{API}/{job['id']}/force-stop", headers=h["alice"])).status_code == 403
    stopped = await client.post(f"{API}/{job['id']}/stop", headers=h["alice"])
    assert (stopped.status_code, stopped.json()["status"]) == (200, "stopped")
    again = await client.post(f"{API}/{job['id']}/stop", headers=h["alice"])
    assert (again.status_code, again.json()["error"]["code"]) == (409, "invalid_transition")

    overrides = {"overrides": ["tasks[0].replicas=1"]}
    # References are resolved again as the resubmitter sees them: bob cannot see alice's private dataset.
    refused = await client.post(f"{API}/{job['id']}/resubmit", json=overrides, headers=h["bob"])
    assert (refused.status_code, refused.json()["error"]["details"]["field"]) == (404, "datasets[0]")
    resubmitted = await client.post(f"{API}/{job['id']}/resubmit", json=overrides, headers=h["alice"])
    assert resubmitted.status_code == 201, resubmitted.text
    assert resubmitted.json()["spec"]["tasks"][0]["replicas"] == 1
    forced = await client.post(f"{API}/{resubmitted.json()['id']}/force-stop", headers=h["admin"])
    assert (forced.json()["status"], forced.json()["failure_reason"]) == ("stopped", "stopped_by_admin")
    assert (await client.delete(f"{API}/{job['id']}", headers=h["alice"])).status_code == 204
    assert (await client.get(f"{API}/{job['id']}", headers=h["alice"])).status_code == 404


async def test_bad_input_is_a_4xx_naming_the_field_and_nothing_is_created(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    before = await counts(db)
    cases: list[tuple[dict[str, Any], int, str, str]] = [
        ({"spec": spec(datasets=["cifar:1", "mnist:9"])}, 404, "not_found", "datasets[1]"),
        ({"spec": spec(image="pytorch:1")}, 404, "not_found", "image"),
        (
            {"spec": spec(tasks=[{"resources": {"spec": "gpu-a"}, "command": "x"}])},
            422,
            "validation_failed",
            "tasks[0].resources.spec",
        ),
        (
            {"spec": spec(tasks=[{"resources": {"cpu": 64, "memory": "1Gi"}, "command": "x"}])},
            422,
            "validation_failed",
            "tasks[0].resources",
        ),
        (
            {"spec": spec(tasks=[{"resources": {"spec": "cpu-4"}, "command": ""}])},
            422,
            "validation_failed",
            "tasks[0].command",
        ),
        (
            {"spec": "name: x\ntasks: [{resources: {spec: cpu-4}, command: x, replica: 2}]"},
            422,
            "validation_failed",
            "tasks[0].replica",
        ),
        ({"spec": spec(), "overrides": ["tasks[3].replicas=1"]}, 422, "validation_failed", "--set tasks[3].replicas"),
        ({"spec": spec(), "workspace_id": w.p.carol_ws}, 404, "not_found", "workspace_id"),
    ]
    for body, code, error, field in cases:
        response = await client.post(API, json=body, headers=h["alice"])
        assert response.status_code == code, (body, response.text)
        payload = response.json()["error"]
        assert (payload["code"], payload["details"].get("field")) == (error, field), payload
        assert payload["message"]
    assert await counts(db) == before


async def test_templates(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> None:
    w, h = await _logins(db, client, tmp_path)
    made = await client.post(
        "/api/v1/job-templates", json={"name": "base", "spec": spec(), "description": "d"}, headers=h["alice"]
    )
    assert made.status_code == 201, made.text
    tid = made.json()["id"]
    assert made.json()["workspace_id"] == w.p.ws
    listed = (await client.get("/api/v1/job-templates", headers=h["bob"])).json()
    assert [t["id"] for t in listed["items"]] == [tid]
    assert (await client.get(f"/api/v1/job-templates/{tid}", headers=h["carol"])).status_code == 404
    patched = await client.patch(f"/api/v1/job-templates/{tid}", json={"description": "new"}, headers=h["alice"])
    assert patched.json()["description"] == "new"
    submitted = await client.post(
        f"/api/v1/job-templates/{tid}/submit", json={"overrides": ["tasks[0].replicas=3"]}, headers=h["bob"]
    )
    assert submitted.status_code == 201, submitted.text
    assert submitted.json()["spec"]["tasks"][0]["replicas"] == 3
    saved = await client.post(f"{API}/{submitted.json()['id']}/template", json={"name": "copy"}, headers=h["bob"])
    assert saved.status_code == 201, saved.text
    assert (await client.delete(f"/api/v1/job-templates/{tid}", headers=h["alice"])).status_code == 204


async def _launched_job(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> tuple[int, dict[str, Any]]:
    """A job whose replica 0 really ran through the local executor (echo three lines), handle on its row."""
    _, h = await _logins(db, client, tmp_path)
    created = await client.post(API, json={"spec": spec()}, headers=h["alice"])
    job_id = created.json()["id"]
    await move(db, job_id, JobStatus.SCHEDULED, JobStatus.STARTING)
    executor = LocalExecutor(root=tmp_path / "runs", node_name="n1")
    plan = ReplicaPlan(
        job_id=job_id,
        task="worker",
        replica=0,
        attempt=0,
        node="n1",
        command="echo one; echo two; printf three",
        env={},
        run_dir=tmp_path / "runs" / f"{job_id}-worker-0-0",
        workdir=tmp_path,
    )
    handle = await executor.launch(plan)
    deadline = time.monotonic() + 30
    while (await executor.status(handle)).state is ReplicaState.RUNNING:
        assert time.monotonic() < deadline, "the replica did not exit within 30 s"
        await asyncio.sleep(0.05)
    async with db.write() as session:
        replica = await session.scalar(select(Replica).where(Replica.job_id == job_id, Replica.index == 0))
        assert replica is not None
        replica.handle, replica.node_name, replica.status = handle.to_dict(), "n1", "succeeded"
    return job_id, h


async def test_logs_as_text_and_as_server_sent_events(db: Database, client: httpx.AsyncClient, tmp_path: Path) -> None:
    job_id, h = await _launched_job(db, client, tmp_path)
    text = await client.get(f"{API}/{job_id}/logs", params={"follow": "true"}, headers=h["bob"])
    assert text.status_code == 200, text.text
    assert text.headers["content-type"].startswith("text/plain")
    lines = text.text.splitlines()
    assert [line.split(" ", 1)[1] for line in lines] == ["one", "two", "three"]  # each with its UTC stamp
    assert (await client.get(f"{API}/{job_id}/logs", headers=h["carol"])).status_code == 404
    tail = await client.get(f"{API}/{job_id}/logs", params={"since": len(text.content) - 6}, headers=h["alice"])
    assert tail.text == "three\n"  # the launcher ends a last partial line

    sse = await client.get(f"{API}/{job_id}/logs/stream", headers=h["alice"])
    assert sse.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in sse.text.split("\n\n") if b]
    data = [b.split("data: ", 1)[1] for b in blocks if b.startswith("id: ")]
    assert [d.split(" ", 1)[1] for d in data] == ["one", "two", "three"]
    assert blocks[-1].startswith("event: end")
    resumed = await client.get(
        f"{API}/{job_id}/logs/stream", headers={**h["alice"], "Last-Event-ID": blocks[1].split("\n")[0][4:]}
    )
    assert [b.split("data: ", 1)[1].split(" ", 1)[1] for b in resumed.text.split("\n\n") if b.startswith("id: ")] == [
        "three"
    ]

    not_launched = await client.get(f"{API}/{job_id}/logs", params={"replica": 1}, headers=h["alice"])
    assert (not_launched.status_code, not_launched.json()["error"]["code"]) == (409, "conflict")
    unknown = await client.get(f"{API}/{job_id}/logs", params={"task": "ps"}, headers=h["alice"])
    assert (unknown.status_code, unknown.json()["error"]["details"]["field"]) == (404, "task")


async def test_platform_admins_read_job_logs_only_where_the_workspace_allows_it(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    job_id, h = await _launched_job(db, client, tmp_path)
    job = await client.get(f"{API}/{job_id}", headers=h["admin"])  # status, events, replicas: always
    assert job.status_code == 200, job.text
    workspace = job.json()["workspace_id"]
    assert (await client.get(f"{API}/{job_id}/events", headers=h["admin"])).status_code == 200
    assert (await client.get(f"{API}/{job_id}/replicas", headers=h["admin"])).status_code == 200

    for path in ("logs", "logs/stream"):
        refused = await client.get(f"{API}/{job_id}/{path}", headers=h["admin"])
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["code"] == "forbidden"
        assert "only when its admins allow it" in refused.json()["error"]["message"]
    # Only the workspace's own admins decide; a platform admin outside it cannot grant it to themselves.
    self_grant = await client.patch(
        f"/api/v1/workspaces/{workspace}", json={"admins_read_logs": True}, headers=h["admin"]
    )
    assert self_grant.status_code == 403, self_grant.text
    assert self_grant.json()["error"]["details"]["field"] == "admins_read_logs"

    granted = await client.patch(f"/api/v1/workspaces/{workspace}", json={"admins_read_logs": True}, headers=h["alice"])
    assert granted.status_code == 200, granted.text
    assert granted.json()["admins_read_logs"] is True
    allowed = await client.get(f"{API}/{job_id}/logs", headers=h["admin"])
    assert allowed.status_code == 200, allowed.text
    assert [line.split(" ", 1)[1] for line in allowed.text.splitlines()] == ["one", "two", "three"]

    audit = await client.get(
        f"/api/v1/workspaces/{workspace}/audit-events", params={"action": "workspace.update"}, headers=h["alice"]
    )
    assert audit.status_code == 200, audit.text
    [event] = audit.json()["items"]
    assert (event["actor_name"], event["details"]) == ("alice", {"admins_read_logs": {"from": False, "to": True}})

    denied = await client.patch(f"/api/v1/workspaces/{workspace}", json={"admins_read_logs": False}, headers=h["alice"])
    assert denied.json()["admins_read_logs"] is False
    assert (await client.get(f"{API}/{job_id}/logs", headers=h["admin"])).status_code == 403


async def test_a_platform_admin_who_joins_a_workspace_shows_in_its_audit_list(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    job_id, h = await _launched_job(db, client, tmp_path)
    workspace = (await client.get(f"{API}/{job_id}", headers=h["alice"])).json()["workspace_id"]
    me = (await client.get("/api/v1/users/me", headers=h["admin"])).json()
    joined = await client.post(
        f"/api/v1/workspaces/{workspace}/members",
        json={"user_id": me["id"], "role": "workspace_admin"},
        headers=h["admin"],
    )
    assert joined.status_code == 201, joined.text
    audit = await client.get(
        f"/api/v1/workspaces/{workspace}/audit-events", params={"action": "workspace.member."}, headers=h["alice"]
    )
    assert audit.status_code == 200, audit.text
    [event] = [e for e in audit.json()["items"] if e["target_id"] == str(me["id"])]
    assert (event["action"], event["actor_name"]) == ("workspace.member.add", me["username"])
    assert event["details"]["role"] == "workspace_admin"
    # A member reads what members read: the rule is about admins outside the workspace.
    assert (await client.get(f"{API}/{job_id}/logs", headers=h["admin"])).status_code == 200
    # A plain member cannot read the workspace's audit list.
    assert (await client.get(f"/api/v1/workspaces/{workspace}/audit-events", headers=h["bob"])).status_code == 403


@asynccontextmanager
async def _served(app: FastAPI) -> AsyncIterator[str]:
    """``app`` behind a real uvicorn on a free port of this loop: httpx's ASGI transport returns a response only
    once its body is complete, so a stream that never ends must come through a socket."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    server = uvicorn.Server(uvicorn.Config(app, lifespan="off", log_level="warning", access_log=False))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        assert not serving.done(), "the test server did not start"
        await asyncio.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await serving
        sock.close()


async def test_a_quiet_log_stream_gets_keep_alive_pings(
    app: FastAPI, db: Database, client: httpx.AsyncClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that prints nothing still sends a comment every sse_ping_s, so a proxy keeps the stream open."""
    ping_s = 0.2
    monkeypatch.setattr(app.state.ctx.settings, "sse_ping_s", ping_s)
    _, h = await _logins(db, client, tmp_path)
    job_id = (await client.post(API, json={"spec": spec()}, headers=h["alice"])).json()["id"]
    await move(db, job_id, JobStatus.SCHEDULED, JobStatus.STARTING)
    executor = LocalExecutor(root=tmp_path / "runs", node_name="n1")
    plan = ReplicaPlan(
        job_id=job_id,
        task="worker",
        replica=0,
        attempt=0,
        node="n1",
        command="sleep 60",
        env={},
        run_dir=tmp_path / "runs" / f"{job_id}-worker-0-0",
        workdir=tmp_path,
    )
    handle = await executor.launch(plan)
    try:
        async with db.write() as session:
            replica = await session.scalar(select(Replica).where(Replica.job_id == job_id, Replica.index == 0))
            assert replica is not None
            replica.handle, replica.node_name, replica.status = handle.to_dict(), "n1", "running"
        async with _served(app) as url, httpx.AsyncClient(base_url=url, headers=h["alice"]) as http:
            started = time.monotonic()
            async with http.stream("GET", f"{API}/{job_id}/logs/stream") as response:
                assert response.status_code == 200
                assert response.headers["content-type"].startswith("text/event-stream")
                received = ""
                async with asyncio.timeout(10):  # without pings nothing comes until the replica ends (60 s)
                    async for text in response.aiter_text():
                        received += text
                        if "\n\n" in received:
                            break
                waited = time.monotonic() - started
        first = received.split("\n\n", 1)[0]
        assert first.startswith(": ping"), first  # a comment: EventSource ignores it, proxies see traffic
        assert waited < ping_s + 5  # the first ping follows the interval, not the default 15 s
    finally:
        await executor.stop(handle, grace_s=0)
