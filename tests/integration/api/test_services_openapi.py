"""``GET /api/v1/services/{id}/openapi.json``: the service's generated API document, from its stable revision's
signature (the model version's metadata) at the server's public URL; members only."""

from __future__ import annotations

from pathlib import Path

import httpx

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from tests.integration.api.test_jobs_api import _logins
from tests.integration.api.test_services_api import _replica_jobs, _serve
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version

SIG = {
    "inputs": [{"name": "features", "datatype": "FP32", "shape": [-1, 4]}],
    "outputs": [{"name": "label", "datatype": "INT64", "shape": [-1]}],
}


async def test_openapi_document_names_the_signature(
    db: Database, client: httpx.AsyncClient, settings: Settings, tmp_path: Path
) -> None:
    w, h = await _logins(db, client, tmp_path)
    store = make_store(tmp_path)
    item = await new_item(db, w.p.alice, "iris", kind=ItemKind.MODEL)
    files = entries(store, {"model.onnx": b"v1"})
    await new_version(db, w.p.alice, item.id, files, kind=ItemKind.MODEL, metadata={"signature": SIG})
    body = {"spec": {"name": "iris", "model": "iris:1", "resources": {"spec": "cpu-4"}}}
    created = await client.post("/api/v1/services", json=body, headers=h["alice"])
    assert created.status_code == 201, created.text
    sid = created.json()["id"]
    await _serve(db, await _replica_jobs(db, sid))
    await ServingController(db, settings).run_once()

    got = await client.get(f"/api/v1/services/{sid}/openapi.json", headers=h["bob"])
    assert got.status_code == 200, got.text
    doc = got.json()
    assert doc["openapi"] == "3.1.0"
    assert doc["servers"] == [{"url": f"{settings.api_url}/serve/alice/iris"}]
    assert "/v2/models/iris/infer" in doc["paths"]
    variants = doc["components"]["schemas"]["InferenceRequest"]["properties"]["inputs"]["items"]["oneOf"]
    assert [v["properties"]["name"]["const"] for v in variants] == ["features"]
    assert doc["info"]["version"] == "1"
    stranger = await client.get(f"/api/v1/services/{sid}/openapi.json", headers=h["carol"])
    assert stranger.status_code == 404
