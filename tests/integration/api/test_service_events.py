"""A service's events (``GET /api/v1/services/{id}/events``): what its users and the serving controller changed,
each recorded once, in the change's transaction: deployed, revisions ready and failed, traffic moves (promote and
rollback named), the autoscaler's new targets with its reason, stopped by a platform admin, started, deleted.
Repeated controller ticks that change nothing record nothing; other workspaces see none of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, ServiceLoad, ServiceRevision
from tests.integration.api.test_jobs_api import _logins
from tests.integration.api.test_services_api import _deploy, _models, _replica_jobs, _serve
from tests.integration.services.jobs_helpers import move

API = "/api/v1/services"


async def _events(client: httpx.AsyncClient, sid: int, headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every event of the service, oldest first (the API pages newest first)."""
    got: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = {"limit": 5, **({"cursor": cursor} if cursor else {})}
        page = await client.get(f"{API}/{sid}/events", params=params, headers=headers)
        assert page.status_code == 200, page.text
        got += page.json()["items"]
        cursor = page.json()["next_cursor"]
        if not cursor:
            return list(reversed(got))


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["kind"].removeprefix("service.") for e in events]


async def _ticks(controller: ServingController, n: int = 3) -> None:
    for _ in range(n):
        await controller.run_once()


async def test_a_services_history_without_spam(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    created = await client.post(API, json=_deploy(), headers=h["alice"])
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    (deployed,) = await _events(client, sid, h["bob"])
    workspace = created.json()["workspace_id"]
    assert (deployed["kind"], deployed["service_id"], deployed["workspace_id"]) == ("service.deployed", sid, workspace)
    assert "deployed by alice: revision 1, model iris:1 (onnx)" in deployed["message"]

    # Ready: its first revision takes all traffic. More ticks change nothing and say nothing.
    controller = ServingController(db, settings)
    await _serve(db, await _replica_jobs(db, sid))
    await _ticks(controller)
    events = await _events(client, sid, h["alice"])
    assert _kinds(events) == ["deployed", "revision_ready", "traffic"]
    assert "revision 1 is ready (model iris:1)" in events[1]["message"]
    assert events[2]["message"].endswith("traffic now revision 1 100 %")

    # A canary at 10 %, promoted: the update, its readiness, the split, the promotion, the final move.
    canary = {"spec": {"model": "iris:2", "rollout": {"strategy": "canary", "canary_percent": 10}}}
    assert (await client.patch(f"{API}/{sid}", json=canary, headers=h["alice"])).status_code == 200
    await _serve(db, await _replica_jobs(db, sid, revision=2))
    await _ticks(controller)
    assert (await client.post(f"{API}/{sid}/promote", headers=h["alice"])).status_code == 200
    await _ticks(controller)
    events = (await _events(client, sid, h["alice"]))[3:]
    assert _kinds(events) == ["updated", "revision_ready", "traffic", "traffic", "traffic"]
    assert "revision 2 deployed by alice: model iris:2 (onnx), rollout canary 10 %" in events[0]["message"]
    assert events[2]["message"].endswith("traffic now revision 1 90 %, revision 2 10 %")
    assert (events[3]["details"]["action"], events[3]["message"]) == (
        "promote", "service iris: revision 2 promoted by alice: all traffic moves to it",
    )  # fmt: skip
    assert events[4]["message"].endswith("traffic now revision 2 100 %; revision 1 retired")

    # The autoscaler: a new target is one event with its reason, however many ticks keep it.
    scaled = await client.post(f"{API}/{sid}/scale", json={"min_replicas": 2}, headers=h["alice"])
    assert scaled.status_code == 200, scaled.text
    await _ticks(controller)
    (event,) = (await _events(client, sid, h["alice"]))[8:]
    assert (event["kind"], event["details"]) == (
        "service.scaled", {"service": "iris", "revision": 2, "from": 1, "to": 2, "reason": "min"},
    )  # fmt: skip
    assert event["message"].endswith("revision 2 scaled from 1 to 2 replicas: held at min_replicas (2)")
    await client.post(f"{API}/{sid}/scale", json={"min_replicas": 0}, headers=h["alice"])
    async with db.write() as session:  # idle since long ago; a controller that just took over knows no better
        long_ago = datetime(2000, 1, 1, tzinfo=UTC)
        await session.execute(
            update(ServiceRevision)
            .where(ServiceRevision.service_id == sid)
            .values(ready_at=long_ago, last_request_at=long_ago)
        )
    await _ticks(ServingController(db, settings))
    (event,) = (await _events(client, sid, h["alice"]))[9:]
    assert (event["kind"], event["details"]["to"], event["details"]["reason"]) == ("service.scaled", 0, "to-zero")
    assert "scaled from 2 to 0 replicas: scale to zero after 300 s without requests" in event["message"]

    # A revision whose replica ended before it was ready fails, with the reason, as a warning.
    assert (await client.patch(f"{API}/{sid}", json={"spec": {}}, headers=h["alice"])).status_code == 200
    (third,) = await _replica_jobs(db, sid, revision=3)
    await move(db, third, JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    await move(db, third, JobStatus.FAILED, message="exit code 3: no such file model.onnx")
    await _ticks(controller)
    events = (await _events(client, sid, h["alice"]))[10:]
    assert _kinds(events) == ["updated", "revision_failed"]
    assert events[1]["severity"] == "warning"
    assert "revision 3 failed: its replica ended before it was ready" in events[1]["message"]
    assert "no such file model.onnx" in events[1]["details"]["reason"]

    # Stopped by a platform admin (a warning), started by its owner; the ticks between say nothing more.
    assert (await client.post(f"{API}/{sid}/stop", headers=h["admin"])).status_code == 200
    await _ticks(controller)
    assert (await client.post(f"{API}/{sid}/start", headers=h["alice"])).status_code == 200
    events = (await _events(client, sid, h["alice"]))[12:]
    assert [(e["kind"], e["severity"]) for e in events] == [
        ("service.force_stopped", "warning"), ("service.started", "info"),
    ]  # fmt: skip
    assert "stopped by platform admin admin" in events[0]["message"]

    # Only its workspace's members and platform admins see them, here and in the cluster event log.
    assert (await client.get(f"{API}/{sid}/events", headers=h["carol"])).status_code == 404
    assert (await client.get(f"{API}/{sid}/events", headers=h["admin"])).status_code == 200
    mine = (await client.get("/api/v1/events", params={"kind": "service."}, headers=h["bob"])).json()["items"]
    assert len(mine) == 14
    assert {e["service_id"] for e in mine} == {sid}
    theirs = (await client.get("/api/v1/events", params={"service_id": sid}, headers=h["carol"])).json()["items"]
    assert theirs == []
    filtered = (await client.get("/api/v1/events", params={"service_id": sid}, headers=h["admin"])).json()["items"]
    assert [e["id"] for e in filtered] == [e["id"] for e in mine]
    assert (await client.get(f"{API}/999999/events", headers=h["admin"])).status_code == 404


async def test_a_panic_scale_up_and_a_failed_replica_are_said_once(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    body = _deploy(min_replicas=1, max_replicas=10, stable_window_s=600)
    created = await client.post(API, json=body, headers=h["alice"])
    sid = created.json()["id"]
    controller = ServingController(db, settings)
    (first,) = await _replica_jobs(db, sid)
    await _serve(db, [first])
    await _ticks(controller)
    # A burst: 20 requests in flight for the last minute (the panic window, a tenth of the stable one, however
    # slowly this runs) against one replica meant for 8 at 70 %: a panic scale-up to 4.
    async with db.write() as session:
        revision = await session.scalar(select(ServiceRevision.id).where(ServiceRevision.service_id == sid))
        assert revision is not None
        at = datetime.now(UTC) - timedelta(seconds=59)
        session.add(ServiceLoad(revision_id=revision, source="test", at=at, interval_s=1.0, concurrency=20.0))
    await _ticks(controller)
    (event,) = (await _events(client, sid, h["alice"]))[3:]
    assert (event["kind"], event["details"]["from"], event["details"]["to"]) == ("service.scaled", 1, 4)
    assert event["message"].endswith("revision 1 scaled from 1 to 4 replicas: panic scale-up: a burst of requests")
    assert len(await _replica_jobs(db, sid)) == 4

    # Its ready replica fails: one warning naming the job, and a new replica in its place.
    await move(db, first, JobStatus.FAILED, message="killed: out of memory")
    await _ticks(controller)
    events = (await _events(client, sid, h["alice"]))[4:]
    assert [(e["kind"], e["severity"]) for e in events] == [("service.replica_failed", "warning")]
    assert f"a replica of revision 1 failed (job {first}): killed: out of memory" in events[0]["message"]
    assert first not in await _replica_jobs(db, sid)

    # Deleted: its events stay in the workspace's event log (the service's own list is gone with it).
    await client.post(f"{API}/{sid}/stop", headers=h["alice"])
    await _ticks(controller)
    async with db.read() as session:
        live = (await session.scalars(select(Job.id).where(Job.kind == "service", Job.finished_at.is_(None)))).all()
    for job_id in live:
        await move(db, job_id, JobStatus.STOPPED)
    assert (await client.delete(f"{API}/{sid}", headers=h["alice"])).status_code == 204
    assert (await client.get(f"{API}/{sid}/events", headers=h["alice"])).status_code == 404
    logged = (await client.get("/api/v1/events", params={"kind": "service."}, headers=h["bob"])).json()["items"]
    assert [e["kind"] for e in logged[:2]] == ["service.deleted", "service.stopped"]
