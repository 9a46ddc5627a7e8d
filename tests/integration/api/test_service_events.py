"""A service's events (``GET /api/v1/services/{id}/events``): what its users and the serving controller changed,
each recorded once, in the change's transaction: deployed, revisions ready and failed, traffic moves (promote and
rollback named), the autoscaler's new targets with its reason, stopped by a platform admin, started, deleted.
Repeated controller ticks that change nothing record nothing; other workspaces see none of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select, update

from aicenter.config import Settings
from aicenter.controllers.serving import ServingController
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import ServiceRevision
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
    assert (deployed["kind"], deployed["service_id"], deployed["workspace_id"]) == ("service.deployed", sid, created.json()["workspace_id"])
    assert "deployed by alice: revision 1, model iris:1 (onnx)" in deployed["message"]

    # Ready: its first revision takes all traffic. More ticks change nothing and say nothing.
    controller = ServingController(db, settings)
    await _serve(db, await _replica_jobs(db, sid))
    await _ticks(controller)
    events = await _events(client, sid, h["alice"])
    print([(e["kind"], e["message"]) for e in events])
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
    print([(e["kind"], e["message"]) for e in events])
    assert _kinds(events) == ["updated", "revision_ready", "traffic", "traffic", "traffic"]
    assert "revision 2 deployed by alice: model iris:2 (onnx), rollout canary 10 %" in events[0]["message"]
    assert events[2]["message"].endswith("traffic now revision 1 90 %, revision 2 10 %")
    assert (events[3]["details"]["action"], events[3]["message"]) == (
        "promote", "service iris: revision 2 promoted by alice: all traffic moves to it",
    )  # fmt: skip
    assert events[4]["message"].endswith("traffic now revision 2 100 %; revision 1 retired")
