"""The console's services list: members see their workspace's services with model, status, replicas ready/total;
strangers see none; platform admins see all; "Services" is in the navigation."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from tests.integration.api.test_jobs_api import PASSWORD, _logins
from tests.integration.api.test_services_api import _replica_jobs, _serve
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.web.conftest import ADMIN_PASSWORD, OpenBrowser


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

    carol = await open_browser("carol", PASSWORD)
    assert (await carol.get(f"/services/{sid}")).status_code == 404
