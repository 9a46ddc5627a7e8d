"""The services REST API and the serving controller without running a replica: deploy (and bad input: 4xx naming
the field, nothing created), access, keys and the route table, and a whole rollout driven by the controller with
replica readiness recorded as the gateway records it: ready, canary at 10 %, promote, the old revision drained and
stopped; a second canary rolled back; stop, force stop, delete. Real replicas serving requests are in
tests/e2e/test_serving_journey.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.catalog import ItemKind
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, Replica, Service, ServiceReplica
from aicenter.services import jobs, serving
from tests.integration.api.test_jobs_api import _logins
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.services.jobs_helpers import move

API = "/api/v1/services"


async def _models(db: Database, tmp_path: Path, w: Any) -> None:
    """alice's ONNX model (two versions) and a model whose files no runtime serves."""
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    for data in (b"v1", b"v2"):
        await new_version(db, w.p.alice, item.id, entries(store, {"model.onnx": data}), kind=ItemKind.MODEL)
    odd = await new_item(db, w.p.alice, "odd", kind=ItemKind.MODEL)
    await new_version(db, w.p.alice, odd.id, entries(store, {"weights.bin": b"?"}), kind=ItemKind.MODEL)


def _deploy(**changes: Any) -> dict[str, Any]:
    return {"spec": {"name": "iris", "model": "iris:1", "resources": {"spec": "cpu-4"}, **changes}}


async def _counts(db: Database) -> tuple[int, int]:
    async with db.read() as session:
        services = await session.scalar(select(func.count()).select_from(Service))
        jobs = await session.scalar(select(func.count()).select_from(Job))
    return int(services or 0), int(jobs or 0)


async def _replica_jobs(db: Database, service_id: int, revision: int | None = None) -> list[int]:
    from aicenter.db.models import ServiceRevision

    async with db.read() as session:
        stmt = select(ServiceReplica.job_id).join(ServiceRevision, ServiceRevision.id == ServiceReplica.revision_id)
        stmt = stmt.where(ServiceReplica.service_id == service_id)
        if revision is not None:
            stmt = stmt.where(ServiceRevision.number == revision)
        return sorted((await session.scalars(stmt)).all())


async def _serve(db: Database, job_ids: list[int]) -> None:
    """The replicas run and answer their readiness probe (what the gateway reports when it saw them ready)."""
    for job_id in job_ids:
        await move(db, job_id, JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING)
    async with db.write() as session:
        await serving.mark_ready(session, job_ids)


async def test_bad_deploys_name_the_field_and_create_nothing(
    db: Database, client: httpx.AsyncClient, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    cases = [
        (_deploy(model="nope:1"), 404, "model"),
        (_deploy(model="odd:1"), 422, "runtime"),  # no runtime serves weights.bin
        (_deploy(runtime="torchscript"), 422, "runtime"),  # no .pt file
        (_deploy(resources={"spec": "gpu-a"}), 422, "resources.spec"),  # a pool the workspace may not use
        (_deploy(resources={"cpu": 64, "memory": "1Gi"}), 422, "resources"),  # larger than any node
        (_deploy(min_replicas=3, max_replicas=2), 422, "min_replicas"),
        (_deploy(runtime="command"), 422, "command"),
        (_deploy(runtime="python"), 422, "entry"),
        (_deploy(name="Bad Name"), 422, "name"),
        (_deploy(bogus=1), 422, "bogus"),
        ({"spec": "name: [unclosed"}, 422, None),
    ]
    for body, status, field in cases:
        answer = await client.post(API, json=body, headers=h["alice"])
        assert answer.status_code == status, (body, answer.text)
        assert "error" in answer.json()
        if field is not None:
            assert answer.json()["error"]["details"].get("field") == field, (body, answer.text)
    assert await _counts(db) == (0, 0)
    # carol cannot see alice's model: not found, as if it did not exist.
    refused = await client.post(API, json=_deploy(), headers=h["carol"])
    assert (refused.status_code, refused.json()["error"]["details"]["field"]) == (404, "model")

    assert (await client.post(API, json=_deploy(), headers=h["alice"])).status_code == 201
    twice = await client.post(API, json=_deploy(), headers=h["alice"])
    assert (twice.status_code, twice.json()["error"]["code"]) == (409, "conflict")
    assert await _counts(db) == (1, 1)

    task = {"name": "server", "resources": {"spec": "cpu-4"}, "command": "aicenter-serve"}
    part = {"service": "x", "revision": 1, "runtime": "onnx"}
    as_job = {"spec": {"kind": "service", "name": "sneaky", "model": "iris:1", "serving": part, "tasks": [task]}}
    refused = await client.post("/api/v1/jobs", json=as_job, headers=h["alice"])
    assert (refused.status_code, refused.json()["error"]["details"]["field"]) == (422, "kind")
    assert await _counts(db) == (1, 1)


async def test_deploy_canary_promote_rollback_stop_delete(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    created = await client.post(API, json=_deploy(description="iris classifier"), headers=h["alice"])
    assert created.status_code == 201, created.text
    svc = created.json()
    sid = svc["id"]
    assert (svc["status"], svc["model"], svc["runtime"], svc["url"]) == (
        "deploying",
        "iris:1",
        "onnx",
        "/serve/alice/iris",
    )
    assert [(r["number"], r["state"], r["traffic"], r["target_traffic"]) for r in svc["revisions"]] == [
        (1, "starting", 0, 100)
    ]
    assert svc["replicas_total"] == 1
    replica_jobs = (await client.get("/api/v1/jobs", params={"kind": "service"}, headers=h["alice"])).json()["items"]
    assert [(j["name"], j["status"]) for j in replica_jobs] == [("iris-r1", "queued")]

    # Members see it; only its owner and the workspace's admins change it; strangers do not know it.
    assert (await client.get(f"{API}/{sid}", headers=h["bob"])).json()["name"] == "iris"
    assert (await client.get(f"{API}/{sid}", headers=h["carol"])).status_code == 404
    assert (await client.post(f"{API}/{sid}/scale", json={"max_replicas": 5}, headers=h["bob"])).status_code == 403
    assert (await client.get(API, headers=h["carol"])).json()["items"] == []
    assert [s["id"] for s in (await client.get(API, headers=h["admin"])).json()["items"]] == [sid]

    controller = ServingController(db, settings)
    first = await _replica_jobs(db, sid)
    await _serve(db, first)
    await controller.run_once()
    svc = (await client.get(f"{API}/{sid}", headers=h["alice"])).json()
    assert (svc["status"], [(r["state"], r["traffic"]) for r in svc["revisions"]]) == ("ready", [("ready", 100)])

    # A canary of version 2 at 10 %: it starts, becomes ready, takes 10 %.
    canary = {"spec": {"model": "iris:2", "rollout": {"strategy": "canary", "canary_percent": 10}}}
    updated = await client.patch(f"{API}/{sid}", json=canary, headers=h["alice"])
    assert updated.status_code == 200, updated.text
    assert [(r["number"], r["state"], r["model"]) for r in updated.json()["revisions"]][1] == (2, "starting", "iris:2")
    busy = await client.patch(f"{API}/{sid}", json=canary, headers=h["alice"])
    assert (busy.status_code, busy.json()["error"]["code"]) == (409, "conflict")  # one rollout at a time
    await _serve(db, await _replica_jobs(db, sid, revision=2))
    await controller.run_once()
    svc = (await client.get(f"{API}/{sid}", headers=h["alice"])).json()
    assert [(r["state"], r["traffic"]) for r in svc["revisions"]] == [("ready", 90), ("ready", 10)]
    assert svc["status"] == "ready"

    bad = await client.put(f"{API}/{sid}/traffic", json={"traffic": {"1": 50, "2": 40}}, headers=h["alice"])
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "traffic")
    bad = await client.put(f"{API}/{sid}/traffic", json={"traffic": {"1": 50, "7": 50}}, headers=h["alice"])
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "traffic.7")

    promoted = await client.post(f"{API}/{sid}/promote", headers=h["alice"])
    assert promoted.status_code == 200, promoted.text
    await controller.run_once()
    svc = (await client.get(f"{API}/{sid}", headers=h["alice"])).json()
    assert [(r["state"], r["traffic"]) for r in svc["revisions"]] == [("retired", 0), ("ready", 100)]
    assert svc["model"] == "iris:2"
    # Revision 1's replica drains first (the gateways stop choosing it), then its job is asked to stop.
    drained = [r for r in svc["replicas"] if r["revision"] == 1]
    assert [r["draining"] for r in drained] == [True]
    async with db.write() as session:
        for link in (await session.scalars(select(ServiceReplica).where(ServiceReplica.job_id.in_(first)))).all():
            assert link.draining_since is not None
            link.draining_since = link.draining_since.replace(year=2000)  # long drained
    await controller.run_once()
    async with db.read() as session:
        job = await session.get(Job, first[0])
        assert job is not None
        assert job.stop_requested_at is not None

    # A third revision as a canary, rolled back: all traffic returns to revision 2 at once.
    await client.patch(f"{API}/{sid}", json={"spec": {"rollout": {"strategy": "canary"}}}, headers=h["alice"])
    await _serve(db, await _replica_jobs(db, sid, revision=3))
    await controller.run_once()
    rolled = await client.post(f"{API}/{sid}/rollback", headers=h["alice"])
    assert rolled.status_code == 200, rolled.text
    assert [(r["number"], r["state"], r["traffic"]) for r in rolled.json()["revisions"]][1:] == [
        (2, "ready", 100),
        (3, "retired", 0),
    ]
    again = await client.post(f"{API}/{sid}/rollback", headers=h["alice"])
    assert (again.status_code, again.json()["error"]["code"]) == (409, "conflict")

    # Keys: shown once, listed by prefix, in the route table while live.
    made = await client.post(f"{API}/{sid}/keys", json={"name": "app"}, headers=h["alice"])
    assert made.status_code == 201, made.text
    key = made.json()["key"]
    assert (key[:5], made.json()["prefix"]) == ("aics_", key[:10])
    assert (await client.post(f"{API}/{sid}/keys", json={"name": "x"}, headers=h["bob"])).status_code == 403
    listed = (await client.get(f"{API}/{sid}/keys", headers=h["bob"])).json()
    assert [(k["name"], "key" in k) for k in listed] == [("app", False)]
    (serving_job,) = await _replica_jobs(db, sid, revision=2)
    async with db.write() as session:  # its replica's port, as placement records it
        row = await session.scalar(select(Replica).where(Replica.job_id == serving_job, Replica.attempt == 0))
        assert row is not None
        row.ports = [41234]
    async with db.read() as session:
        table = await serving.load_route_table(session, secret_key=settings.resolve_secret_key())
    route = table.get("alice", "iris")
    assert route is not None
    assert route.key_hashes == {serving.key_hash(key)}
    assert [(r.number, r.traffic) for r in route.revisions] == [(2, 100)]
    # The endpoint carries the token its replica was planned with: the same key, job and attempt.
    (endpoint,) = route.revisions[0].endpoints
    assert (endpoint.replica_job_id, endpoint.port) == (serving_job, 41234)
    assert endpoint.token == jobs.serve_token(settings.resolve_secret_key(), serving_job, 0)
    assert endpoint.token != jobs.serve_token(settings.resolve_secret_key(), serving_job, 1)
    assert (await client.delete(f"{API}/{sid}/keys/{made.json()['id']}", headers=h["alice"])).status_code == 204
    async with db.read() as session:
        route = (await serving.load_route_table(session, secret_key=settings.resolve_secret_key())).get("alice", "iris")
    assert route is not None
    assert route.key_hashes == frozenset()

    # A platform admin force-stops it (audited as such); its owner deletes it once its replicas stopped.
    assert (await client.delete(f"{API}/{sid}", headers=h["alice"])).status_code == 409
    forced = await client.post(f"{API}/{sid}/stop", headers=h["admin"])
    assert (forced.status_code, forced.json()["status"], forced.json()["message"]) == (
        200, "stopped", "stopped by a platform admin",
    )  # fmt: skip
    await controller.run_once()  # every replica drains
    async with db.read() as session:
        live = (await session.scalars(select(Job.id).where(Job.kind == "service", Job.finished_at.is_(None)))).all()
    for job_id in live:  # the reconciler would stop them: their launchers got SIGTERM
        await move(db, job_id, JobStatus.STOPPED)
    assert (await client.delete(f"{API}/{sid}", headers=h["alice"])).status_code == 204
    assert (await client.get(f"{API}/{sid}", headers=h["alice"])).status_code == 404
    assert await _counts(db) == (0, 3)  # the replica jobs stay, with their machine time


async def test_steps_move_on_while_requests_flow(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    """The steps rollout's clock is when the traffic last moved: the gateways' load reports (every second while
    requests flow) and the controller's other writes to the revision must not restart it, or a rollout under load
    would never take its next step."""
    from datetime import timedelta

    from aicenter.core.serving.reconcile import RevisionChange, ServiceDecision
    from aicenter.core.serving.routing import RevisionLoad
    from aicenter.db.models import ServiceRevision

    w, h = await _logins(db, client, tmp_path)
    await _models(db, tmp_path, w)
    sid = (await client.post(API, json=_deploy(), headers=h["alice"])).json()["id"]
    controller = ServingController(db, settings)
    await _serve(db, await _replica_jobs(db, sid))
    await controller.run_once()
    steps = {"spec": {"model": "iris:2", "rollout": {"strategy": "steps", "step_percent": 50, "step_interval_s": 5}}}
    assert (await client.patch(f"{API}/{sid}", json=steps, headers=h["alice"])).status_code == 200
    await _serve(db, await _replica_jobs(db, sid, revision=2))
    await controller.run_once()

    async def revisions() -> list[ServiceRevision]:
        async with db.read() as session:
            stmt = select(ServiceRevision).where(ServiceRevision.service_id == sid).order_by(ServiceRevision.number)
            return list((await session.scalars(stmt)).all())

    assert [r.traffic for r in await revisions()] == [50, 50]
    async with db.write() as session:  # the step was taken a while ago (longer than its interval)
        for rev in (await session.scalars(select(ServiceRevision).where(ServiceRevision.service_id == sid))).all():
            rev.updated_at = rev.updated_at - timedelta(seconds=60)
    before = [r.updated_at for r in await revisions()]
    for _ in range(2):  # requests flow: a gateway reports every second
        load = {r.id: RevisionLoad(r.id, 1.0, 1.0, 1, 5, 0, 0) for r in await revisions()}
        async with db.write() as session:
            await serving.record_load(session, "gateway-1", load)
        assert [r.updated_at for r in await revisions()] == before
        assert all(r.last_request_at is not None for r in await revisions())
    # The controller writes other things than traffic (replicas wanted, a message): the clock stays too.
    second = (await revisions())[1]
    wants = ServiceDecision(revisions={second.id: RevisionChange(desired=2, message="scaling up")})
    async with db.write() as session:
        await serving.apply_decision(session, sid, wants, now=second.updated_at + timedelta(seconds=60))
    assert [(r.desired_replicas, r.message) for r in await revisions()][1] == (2, "scaling up")
    assert [r.updated_at for r in await revisions()] == before
    # Also on a tick whose later steps query (and so flush the changed revision before the end).
    wants = ServiceDecision(revisions={second.id: RevisionChange(desired=3)}, drain=[second.id * 1000], forget=[0])
    async with db.write() as session:
        await serving.apply_decision(session, sid, wants, now=second.updated_at + timedelta(seconds=61))
    assert [r.desired_replicas for r in await revisions()][1] == 3
    assert [r.updated_at for r in await revisions()] == before
    # Nor does a scale (the bounds of every live revision) restart it.
    scaled = await client.post(f"{API}/{sid}/scale", json={"max_replicas": 4}, headers=h["alice"])
    assert scaled.status_code < 300, scaled.text
    assert [r.updated_at for r in await revisions()] == before
    await controller.run_once()
    assert [(r.state, r.traffic) for r in await revisions()] == [("retired", 0), ("ready", 100)]
