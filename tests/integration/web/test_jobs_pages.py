"""Jobs in the console: the list with filters and pending reasons, a job's page (tasks, replicas, events, the
log view's stream address, stop), the submit form whose selects come from the catalog and inventory, a field
error that creates nothing, a valid submission, and the YAML tab."""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select

from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, ResourceSpec
from aicenter.services import jobs, tenancy
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.factories import ADMIN, Login, make_user
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.web.conftest import Browser, OpenBrowser

GiB = 2**30


@dataclass
class World:
    alice: Login
    actor: Actor
    workspace_id: int


@pytest.fixture
async def world(app: FastAPI, db: Database, client: httpx.AsyncClient, tmp_path: Path) -> World:
    """alice (password login) with a dataset and an algorithm version; one 4-CPU node; spec cpu-1."""
    alice = await make_user(db, client, "alice")
    async with db.write() as session:
        await ensure_default_pool(session)
        session.add(Node(name="n1", cpu_milli=4000, memory_bytes=16 * GiB, labels={}))
        session.add(
            ResourceSpec(name="cpu-1", cpu_milli=1000, memory_bytes=GiB, billing_weight=1.0, price_per_hour=Decimal(1))
        )
    me = (await client.get("/api/v1/users/me", headers=alice.headers)).json()
    actor = Actor(alice.user_id, "alice")
    store = make_store(tmp_path)
    dataset = await new_item(db, actor, "cifar")
    await new_version(db, actor, dataset.id, entries(store, {"a.txt": b"a"}))
    algorithm = await new_item(db, actor, "resnet", kind=ItemKind.ALGORITHM)
    await new_version(db, actor, algorithm.id, entries(store, {"train.py": b"print(1)"}), kind=ItemKind.ALGORITHM)
    return World(alice, actor, int(me["default_workspace_id"]))


async def _jobs(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(Job)) or 0)


def _spec(name: str = "train-1", **task: object) -> dict[str, object]:
    return {
        "name": name,
        "tasks": [{"name": "worker", "replicas": 1, "resources": {"spec": "cpu-1"}, "command": "echo hi", **task}],
    }


async def test_list_shows_statuses_newest_first_and_filters(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    async with db.write() as session:
        first = (await jobs.submit_job(session, world.actor, _spec("first"))).job
        first.pending_reason = "no node has 8 free CPUs"
        await jobs.submit_job(session, world.actor, _spec("second"))
        await jobs.stop_job(session, world.actor, first.id)
    second_only = await open_browser("alice")
    page = await second_only.get("/jobs")
    assert page.status_code == 200, page.text
    rows = re.findall(r'data-testid="job-row" data-job-id="(\d+)" data-status="(\w+)"', page.text)
    assert [status for _, status in rows] == ["queued", "stopped"]  # newest first
    assert 'href="/jobs/new"' in page.text
    assert 'data-testid="nav-jobs"' in page.text

    queued = await second_only.get("/jobs", params={"status": "queued"})
    assert [s for _, s in re.findall(r'data-job-id="(\d+)" data-status="(\w+)"', queued.text)] == ["queued"]


async def test_pending_reason_is_shown(world: World, db: Database, open_browser: OpenBrowser) -> None:
    async with db.write() as session:
        view = await jobs.submit_job(session, world.actor, _spec())
        view.job.pending_reason = "no node has 8 free CPUs"
    browser = await open_browser("alice")
    listed = await browser.get("/jobs")
    assert "no node has 8 free CPUs" in listed.text
    detail = await browser.get(f"/jobs/{view.job.id}")
    assert detail.status_code == 200
    assert 'data-testid="job-pending-reason">no node has 8 free CPUs<' in detail.text


async def test_detail_shows_tasks_replicas_events_and_the_log_stream(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    async with db.write() as session:
        view = await jobs.submit_job(session, world.actor, _spec(replicas=2))
    job_id = view.job.id
    browser = await open_browser("alice")
    page = await browser.get(f"/jobs/{job_id}")
    assert page.status_code == 200, page.text
    text = page.text
    assert 'data-testid="job-status" data-status="queued"' in text
    assert re.findall(r'data-testid="replica-row" data-replica="([\w-]+)"', text) == ["worker-0", "worker-1"]
    assert 'data-testid="event-row"' in text
    assert f'data-stream="/api/v1/jobs/{job_id}/logs/stream"' in text
    assert f'data-refresh="/jobs/{job_id}"' in text  # live status while it is unfinished
    assert '<option value="worker" data-replicas="2">' in text
    assert 'data-testid="job-stop"' in text

    stopped = await browser.post(f"/jobs/{job_id}/stop")
    assert stopped.status_code == 303
    after = await browser.get(f"/jobs/{job_id}")
    assert 'data-status="stopped"' in after.text
    assert 'data-testid="job-stop"' not in after.text
    assert "data-refresh=" not in after.text  # finished: nothing left to refresh

    again = await browser.post(f"/jobs/{job_id}/stop")  # a stopped job cannot be stopped again
    assert again.status_code == 409
    assert 'data-testid="job-stop-error"' in again.text


async def test_someone_elses_job_is_not_found(world: World, db: Database, open_browser: OpenBrowser) -> None:
    async with db.write() as session:
        view = await jobs.submit_job(session, world.actor, _spec())
    async with db.write() as session:
        await tenancy.create_user(session, ADMIN, username="mallory", password="user-password-1")
    mallory = await open_browser("mallory")
    assert (await mallory.get(f"/jobs/{view.job.id}")).status_code == 404
    assert f'data-job-id="{view.job.id}"' not in (await mallory.get("/jobs")).text


async def test_submit_form_offers_the_catalog_and_specs(world: World, open_browser: OpenBrowser) -> None:
    browser = await open_browser("alice")
    page = await browser.get("/jobs/new")
    assert page.status_code == 200, page.text
    text = page.text
    assert '<option value="host"' in text
    assert '<option value="resnet:1"' in text  # algorithm select
    assert '<option value="cifar:1"' in text  # datasets select
    assert '<option value="cpu-1"' in text  # resource specs
    assert 'data-testid="tab-yaml"' in text


async def test_a_field_error_is_shown_at_its_field_and_creates_nothing(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    browser = await open_browser("alice")
    form = {
        "mode": "form",
        "name": "bad-memory",
        "workspace_id": str(world.workspace_id),
        "image": "host",
        "framework": "none",
        "task_name": "worker",
        "replicas": "1",
        "spec": "",
        "cpu": "1",
        "memory": "8Gx",
        "command": "echo hi",
        "priority": "normal",
    }
    response = await browser.post("/jobs/new", form)
    assert response.status_code == 422
    error = re.search(r'data-testid="job-submit-memory-error">([^<]+)<', response.text)
    assert error is not None, response.text
    assert html.unescape(error.group(1)) == '"8Gx" is not a quantity (examples: 512Mi, 16Gi, 1T)'
    assert 'value="bad-memory"' in response.text  # what was typed is kept
    assert await _jobs(db) == 0

    unknown = await browser.post("/jobs/new", {**form, "memory": "1Gi", "datasets": "nothing:9"})
    assert unknown.status_code == 404
    assert 'data-testid="job-submit-datasets-error"' in unknown.text
    assert await _jobs(db) == 0


async def test_a_valid_submission_goes_to_the_jobs_page(world: World, db: Database, open_browser: OpenBrowser) -> None:
    browser = await open_browser("alice")
    response = await browser.client.post(
        "/jobs/new",
        data={
            "csrf_token": browser.csrf,
            "mode": "form",
            "name": "from-form",
            "workspace_id": str(world.workspace_id),
            "image": "host",
            "algorithm": "resnet:1",
            "datasets": ["cifar:1"],
            "framework": "pytorch",
            "task_name": "worker",
            "replicas": "2",
            "spec": "cpu-1",
            "command": "python train.py",
            "priority": "high",
            "env": "LR=0.1",
        },
    )
    assert response.status_code == 303, response.text
    job_id = int(response.headers["location"].rsplit("/", 1)[1])
    async with db.read() as session:
        job = await session.get(Job, job_id)
    assert job is not None
    assert (job.name, job.status, job.priority) == ("from-form", "queued", 30)
    assert job.spec["datasets"] == ["cifar:1"]
    assert job.spec["algorithm"] == "resnet:1"
    assert job.spec["env"] == {"LR": "0.1"}
    assert job.spec["tasks"][0]["replicas"] == 2
    page = await browser.get(f"/jobs/{job_id}")
    assert "Job from-form was submitted." in page.text


async def test_yaml_tab_submits_and_reports_errors(world: World, db: Database, open_browser: OpenBrowser) -> None:
    browser = await open_browser("alice")
    page = await browser.get("/jobs/new?tab=yaml")
    assert 'data-testid="job-yaml-form"' in page.text
    bad = "name: y\ntasks:\n  - replica: 2\n    resources: {spec: cpu-1}\n    command: echo hi\n"
    refused = await browser.post("/jobs/new", {"mode": "yaml", "yaml": bad, "workspace_id": str(world.workspace_id)})
    assert refused.status_code == 422
    assert "tasks[0].replica: unknown field" in html.unescape(refused.text)
    assert await _jobs(db) == 0

    good = "name: y\ntasks:\n  - resources: {spec: cpu-1}\n    command: echo hi\n"
    accepted = await browser.post("/jobs/new", {"mode": "yaml", "yaml": good, "workspace_id": str(world.workspace_id)})
    assert accepted.status_code == 303
    assert await _jobs(db) == 1


async def test_signed_out_visitors_go_to_login(app: FastAPI, open_browser: OpenBrowser) -> None:
    anonymous: Browser = await open_browser()
    response = await anonymous.get("/jobs")
    assert response.status_code in (302, 303, 307)
    assert "/login" in response.headers["location"]
