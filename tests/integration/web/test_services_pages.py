"""The console's services list: members see their workspace's services with model, status, replicas ready/total;
strangers see none; platform admins see all; "Services" is in the navigation."""

from __future__ import annotations

import re
from pathlib import Path

import httpx

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
