"""The console's services list: members see their workspace's services with model, status, replicas ready/total;
strangers see none; platform admins see all; "Services" is in the navigation. A service's page: revisions,
replicas, its events, actions, keys, "try it". A workspace in arrears: the deploy, start and scale-up forms are
refused with 402 and a readable message, nothing written; a scale-down still goes through."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path
from typing import Any

import httpx
from fastapi import FastAPI
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.catalog import ItemKind
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, Service, ServiceRevision
from aicenter.services import billing
from tests.factories import ADMIN
from tests.integration.api.test_jobs_api import PASSWORD, _logins
from tests.integration.api.test_services_api import _replica_jobs, _serve
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.services.jobs_helpers import move
from tests.integration.web.conftest import ADMIN_PASSWORD, OpenBrowser
from tests.integration.web.test_billing_policy_pages import _count, _text


def _rows(text: str) -> list[tuple[str, str]]:
    return re.findall(r'data-testid="service-row" data-service-id="(\d+)" data-status="([a-z_]+)"', text)


async def test_services_list_for_member_stranger_admin(
    db: Database, client: httpx.AsyncClient, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, h = await _logins(db, client, tmp_path)
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    await new_version(db, w.p.alice, item.id, entries(store, {"model.onnx": b"v1"}), kind=ItemKind.MODEL)
    body = {
        "spec": {"name": "iris", "model": "iris:1", "description": "iris classifier", "resources": {"spec": "cpu-4"}}
    }
    created = await client.post("/api/v1/services", json=body, headers=h["alice"])
    assert created.status_code == 201, created.text
    sid = created.json()["id"]

    bob = await open_browser("bob", PASSWORD)
    page = await bob.get("/services")
    assert page.status_code == 200, page.text
    assert _rows(page.text) == [(str(sid), "deploying")]
    assert "iris classifier" in page.text
    assert "iris:1" in page.text
    assert 'data-testid="service-replicas">0/1<' in page.text
    assert 'data-testid="nav-services"' in page.text

    await _serve(db, await _replica_jobs(db, sid))
    page = await bob.get("/services")
    assert 'data-testid="service-replicas">1/1<' in page.text

    carol = await open_browser("carol", PASSWORD)
    assert _rows((await carol.get("/services")).text) == []
    admin = await open_browser("admin", ADMIN_PASSWORD)
    assert _rows((await admin.get("/services")).text) == [(str(sid), "deploying")]


async def test_service_page_shows_revisions_replicas_and_api(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, h = await _logins(db, client, tmp_path)
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    sig = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}], "outputs": []}
    files = entries(store, {"model.onnx": b"v1"})
    await new_version(db, w.p.alice, item.id, files, kind=ItemKind.MODEL, metadata={"signature": sig})
    body = {"spec": {"name": "iris", "model": "iris:1", "resources": {"spec": "cpu-4"}}}
    sid = (await client.post("/api/v1/services", json=body, headers=h["alice"])).json()["id"]
    (job_id,) = await _replica_jobs(db, sid)

    bob = await open_browser("bob", PASSWORD)
    page = await bob.get(f"/services/{sid}")
    assert page.status_code == 200, page.text
    assert re.findall(r'data-testid="revision-row" data-revision="(\d+)" data-state="(\w+)"', page.text) == [
        ("1", "starting")
    ]
    assert f'href="/jobs/{job_id}"' in page.text
    assert "/serve/alice/iris/v2/models/iris/infer" in page.text
    assert 'data-testid="snippet-triton"' in page.text
    # The stable revision carries the signature once it is ready; before that the document names no tensor.
    assert 'data-testid="signature-input"' not in page.text

    await _serve(db, [job_id])
    await ServingController(db, settings).run_once()
    page = await bob.get(f"/services/{sid}")
    assert re.findall(r'data-testid="signature-input"><td>input</td><td class="mono">(\w+)<', page.text) == ["features"]
    # Its events, newest first, without the service's name in each line.
    assert re.findall(r'data-testid="event-row" data-kind="([\w.]+)"', page.text) == [
        "service.traffic", "service.revision_ready", "service.deployed",
    ]  # fmt: skip
    assert "deployed by alice: revision 1, model iris:1 (onnx)" in html.unescape(page.text)
    assert "service iris: deployed" not in html.unescape(page.text)

    carol = await open_browser("carol", PASSWORD)
    assert (await carol.get(f"/services/{sid}")).status_code == 404


# --- the deploy form, actions, keys and "try it" ---------------------------------------------------------------


async def _iris(db: Database, tmp_path: Path, w: Any) -> int:
    """alice's model iris (version 1, ONNX, with a signature); returns the version's item id."""
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    sig = {"inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}], "outputs": []}
    files = entries(store, {"model.onnx": b"v1"})
    await new_version(db, w.p.alice, item.id, files, kind=ItemKind.MODEL, metadata={"signature": sig})
    return item.id


async def _service_count(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(Service)) or 0)


def _deploy_form(**changes: str) -> dict[str, str]:
    return {"name": "iris", "model": "iris:1", "spec": "cpu-4", "min_replicas": "0", "max_replicas": "2", **changes}


async def test_deploy_form_from_the_model_version_page(
    db: Database, client: httpx.AsyncClient, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, _ = await _logins(db, client, tmp_path)
    item_id = await _iris(db, tmp_path, w)
    alice = await open_browser("alice", PASSWORD)

    version_page = await alice.get(f"/models/{item_id}/versions/1")
    assert version_page.status_code == 200, version_page.text
    (link,) = re.findall(r'href="([^"]+)" data-testid="version-deploy"', version_page.text)
    assert link == f"/services/new?model=iris%3A1&amp;workspace_id={w.p.ws}"
    form = await alice.get(html.unescape(link))
    assert form.status_code == 200, form.text
    assert 'id="service-deploy-model" name="model" type="text" value="iris:1"' in form.text
    assert f'<option value="{w.p.ws}" selected>' in form.text
    assert '<option value="cpu-4">' in form.text

    # Refused whole, with the error next to its field and what was typed kept.
    cases = [
        (_deploy_form(min_replicas="3", max_replicas="2"), 422, "service-deploy-min-replicas-error"),
        (_deploy_form(model="nope:1"), 404, "service-deploy-model-error"),
        (_deploy_form(name="Bad Name"), 422, "service-deploy-name-error"),
        (_deploy_form(spec="gpu-a"), 422, "service-deploy-spec-error"),
        (_deploy_form(max_replicas="many"), 422, "service-deploy-max-replicas-error"),
        (_deploy_form(runtime="torchscript"), 422, "service-deploy-runtime-error"),
    ]
    for data, status, error in cases:
        answer = await alice.post("/services/new", data)
        assert answer.status_code == status, (data, answer.text)
        assert f'data-testid="{error}"' in answer.text, (data, answer.text)
        assert f'value="{data["model"]}"' in answer.text
    assert await _service_count(db) == 0
    assert (await alice.post("/services/new", _deploy_form(), csrf="wrong")).status_code == 403
    assert await _service_count(db) == 0

    done = await alice.post("/services/new", _deploy_form(description="iris classifier"))
    assert done.status_code == 303, done.text
    assert re.fullmatch(r"/services/\d+", done.headers["location"])
    page = await alice.get(done.headers["location"])
    assert "Service iris is deploying." in page.text
    assert "iris classifier" in page.text
    assert 'data-testid="service-stop"' in page.text
    again = await alice.post("/services/new", _deploy_form())
    assert (again.status_code, 'data-testid="service-deploy-name-error"' in again.text) == (409, True)
    assert await _service_count(db) == 1


async def test_actions_keys_and_permissions(
    db: Database,
    app: FastAPI,
    client: httpx.AsyncClient,
    settings: Settings,
    tmp_path: Path,
    open_browser: OpenBrowser,
) -> None:
    w, _ = await _logins(db, client, tmp_path)
    await _iris(db, tmp_path, w)
    alice = await open_browser("alice", PASSWORD)
    sid = int((await alice.post("/services/new", _deploy_form())).headers["location"].rsplit("/", 1)[1])
    url = f"/services/{sid}"

    # Scale: the bounds' rules name the field; nothing changes.
    bad = await alice.post(f"{url}/scale", {"min_replicas": "3", "max_replicas": "2"})
    assert (bad.status_code, 'data-testid="service-scale-min-replicas-error"' in bad.text) == (422, True), bad.text
    ok = await alice.post(f"{url}/scale", {"min_replicas": "1", "max_replicas": "4"})
    assert ok.status_code == 303, ok.text
    page = (await alice.get(url)).text
    assert 'id="service-scale-max-replicas" name="max_replicas" type="number" value="4"' in page

    # Traffic: only ready revisions take it, and it sums to 100.
    await _serve(db, await _replica_jobs(db, sid))
    await ServingController(db, settings).run_once()
    page = (await alice.get(url)).text
    assert 'name="traffic.1"' in page
    # The replicas-over-time chart's data: the one replica, started and ready, still serving.
    (spans,) = re.findall(r'data-testid="chart-replicas" data-spans="([^"]*)"', page)
    (span,) = json.loads(html.unescape(spans))
    assert span["revision"] == 1
    assert span["started"] is not None
    assert span["ready"] is not None
    assert (span["draining"], span["finished"]) == (None, None)
    wrong = await alice.post(f"{url}/traffic", {"traffic.1": "50"})
    assert (wrong.status_code, 'data-testid="service-traffic-error"' in wrong.text) == (422, True), wrong.text
    assert (await alice.post(f"{url}/traffic", {"traffic.1": "100"})).status_code == 303
    # No canary: promote and roll back say so above the revisions.
    nothing = await alice.post(f"{url}/promote")
    assert (nothing.status_code, 'data-testid="service-rollout-error"' in nothing.text) == (409, True)

    # Keys: the secret shows once, the list shows the prefix; a member who does not manage it cannot revoke.
    created = await alice.post(f"{url}/keys", {"name": "web-app"})
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    (secret,) = re.findall(r'data-testid="service-key-secret">(aics_[^<]+)<', created.text)
    page = (await alice.get(url)).text
    assert secret not in page
    assert secret[:10] in page
    dup = await alice.post(f"{url}/keys", {"name": "web-app"})
    assert (dup.status_code, 'data-testid="service-key-name-error"' in dup.text) == (409, True)
    (key_id,) = re.findall(r'data-testid="key-row" data-key-id="(\d+)"', page)

    bob = await open_browser("bob", PASSWORD)
    page = (await bob.get(url)).text
    assert 'data-testid="key-row"' in page
    assert 'data-testid="service-key-form"' not in page
    assert 'data-testid="service-stop"' not in page
    assert 'data-testid="service-try-form"' in page
    assert (await bob.post(f"{url}/keys/{key_id}/revoke")).status_code == 403
    assert (await bob.post(f"{url}/stop")).status_code == 403

    carol = await open_browser("carol", PASSWORD)
    for path in ("", "/stop", "/keys", "/try", "/scale"):
        answer = await (carol.get(url) if not path else carol.post(url + path, {"name": "x", "body": "{}"}))
        assert answer.status_code == 404, (path, answer.text)

    # A platform admin: status and a force stop; no keys, no "try it", and a try is refused before it is sent.
    admin = await open_browser("admin", ADMIN_PASSWORD)
    page = (await admin.get(url)).text
    assert 'data-testid="service-force-stop"' in page
    for hidden in ("service-keys", "service-try", "service-stop", "service-scale-form", "service-traffic-form"):
        assert f'data-testid="{hidden}"' not in page, hidden
    refused = await admin.post(f"{url}/try", {"body": "{}"})
    assert (refused.status_code, "not its requests" in refused.text) == (403, True)
    assert (await admin.post(f"{url}/keys", {"name": "mine"})).status_code == 403

    assert (await alice.post(f"{url}/keys/{key_id}/revoke")).status_code == 303
    assert 'data-testid="key-row"' not in (await alice.get(url)).text

    # Delete needs a stopped service; the admin's force stop stops it, its owner starts and deletes it.
    running = await alice.post(f"{url}/delete")
    assert (running.status_code, 'data-testid="service-state-error"' in running.text) == (409, True)
    assert (await admin.post(f"{url}/stop")).status_code == 303
    page = (await alice.get(url)).text
    assert "stopped by a platform admin" in page
    assert 'data-testid="service-start"' in page
    assert (await alice.post(f"{url}/start")).status_code == 303
    assert (await alice.post(f"{url}/stop")).status_code == 303
    await _stop_replicas(db, settings)
    gone = await alice.post(f"{url}/delete")
    assert (gone.status_code, gone.headers["location"]) == (303, "/services")
    assert await _service_count(db) == 0


async def _stop_replicas(db: Database, settings: Settings) -> None:
    """The controller drains every replica; the reconciler would stop them (their launchers got SIGTERM)."""
    await ServingController(db, settings).run_once()
    async with db.read() as session:
        live = (await session.scalars(select(Job.id).where(Job.kind == "service", Job.finished_at.is_(None)))).all()
    for job_id in live:
        await move(db, job_id, JobStatus.STOPPED)


async def test_try_it_goes_through_the_gateway_as_the_member(
    db: Database, app: FastAPI, client: httpx.AsyncClient, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, _ = await _logins(db, client, tmp_path)
    await _iris(db, tmp_path, w)
    alice = await open_browser("alice", PASSWORD)
    sid = int((await alice.post("/services/new", _deploy_form())).headers["location"].rsplit("/", 1)[1])
    bob = await open_browser("bob", PASSWORD)
    page = (await bob.get(f"/services/{sid}")).text
    # Prefilled from the model's signature: one FP32 [1, 4] tensor named features.
    (body,) = re.findall(r'id="service-try-body" name="body" rows="10">([^<]*)<', page)
    request = json.loads(html.unescape(body))
    assert request["inputs"][0]["name"] == "features"
    assert request["inputs"][0]["shape"] == [1, 4]

    # The gateway in this process, with the table as it is now (the deploy itself does not refresh it).
    gateway = app.state.serving_gateway
    gateway._swap(await gateway._load_routes())
    # bob's session passes the gateway (a member); the revision still starts, so it takes no traffic yet.
    tried = await bob.post(f"/services/{sid}/try", {"body": html.unescape(body)})
    assert tried.status_code == 200, tried.text
    assert re.findall(r'data-testid="service-try-status">(\d+)<', tried.text) == ["503"]
    assert "takes traffic" in tried.text
    not_json = await bob.post(f"/services/{sid}/try", {"body": "{nope"})
    assert (not_json.status_code, 'data-testid="service-try-body-error"' in not_json.text) == (422, True)


# --- a workspace in arrears ------------------------------------------------------------------------------------


async def _bounds(db: Database, service_id: int) -> list[tuple[int, int]]:
    """Each revision's (min_replicas, max_replicas)."""
    async with db.read() as session:
        specs = (
            await session.scalars(
                select(ServiceRevision.spec)
                .where(ServiceRevision.service_id == service_id)
                .order_by(ServiceRevision.id)
            )
        ).all()
    return [(int(s.get("min_replicas") or 0), int(s.get("max_replicas") or 0)) for s in specs]


async def _service_state(db: Database, service_id: int) -> tuple[str, bool]:
    async with db.read() as session:
        row = await session.get(Service, service_id)
        assert row is not None
        return row.status, row.stopped_at is not None


async def test_deploy_start_and_scale_up_refused_for_money(
    db: Database, client: httpx.AsyncClient, tmp_path: Path, open_browser: OpenBrowser
) -> None:
    w, _ = await _logins(db, client, tmp_path)
    await _iris(db, tmp_path, w)
    alice = await open_browser("alice", PASSWORD)
    deployed = await alice.post("/services/new", _deploy_form())  # no policy yet: admitted at a 0.00 balance
    assert deployed.status_code == 303, deployed.text
    url = deployed.headers["location"]
    sid = int(url.rsplit("/", 1)[1])
    assert (await alice.post(f"{url}/scale", {"min_replicas": "1", "max_replicas": "4"})).status_code == 303
    assert await _bounds(db, sid) == [(1, 4)]

    async with db.write() as session:  # strict now, and the balance (0.00) is not positive
        await billing.set_policy(session, ADMIN, w.p.ws, arrears="warn")
    refusal = "workspace alice's balance is 0.00 coins; ask a platform admin to recharge"
    services, revisions, jobs = await _count(db, Service), await _count(db, ServiceRevision), await _count(db, Job)
    refused = await alice.post("/services/new", _deploy_form(name="iris-two", description="a second one"))
    assert refused.status_code == 402, refused.text
    assert _text(refused.text, "service-deploy-error") == refusal
    assert 'id="service-deploy-name" name="name" type="text" value="iris-two"' in refused.text  # what was typed stays
    assert 'name="description" rows="2">a second one</textarea>' in refused.text
    assert (await _count(db, Service), await _count(db, ServiceRevision), await _count(db, Job)) == (
        services, revisions, jobs,
    )  # fmt: skip

    # Raising the floor starts replicas: refused, the bounds unchanged and the typed ones kept in the form.
    up = await alice.post(f"{url}/scale", {"min_replicas": "2", "max_replicas": "5"})
    assert up.status_code == 402, up.text
    assert _text(up.text, "service-scale-error") == refusal
    assert 'id="service-scale-min-replicas" name="min_replicas" type="number" value="2"' in up.text
    assert 'id="service-scale-max-replicas" name="max_replicas" type="number" value="5"' in up.text
    assert await _bounds(db, sid) == [(1, 4)]
    # Scaling down (to zero, too) frees machines: never refused.
    down = await alice.post(f"{url}/scale", {"min_replicas": "0", "max_replicas": "3"})
    assert down.status_code == 303, down.text
    assert await _bounds(db, sid) == [(0, 3)]

    # Stopping is never refused; starting it again is, and it stays stopped.
    assert (await alice.post(f"{url}/stop")).status_code == 303
    assert await _service_state(db, sid) == ("stopped", True)
    start = await alice.post(f"{url}/start")
    assert start.status_code == 402, start.text
    assert _text(start.text, "service-state-error") == refusal
    assert 'data-testid="service-start"' in start.text  # the page still offers the start button
    assert await _service_state(db, sid) == ("stopped", True)

    async with db.write() as session:  # recharged: admitted again
        await billing.recharge(session, ADMIN, w.p.ws, "10", reason="top-up")
    assert (await alice.post(f"{url}/start")).status_code == 303
    assert (await _service_state(db, sid))[1] is False
