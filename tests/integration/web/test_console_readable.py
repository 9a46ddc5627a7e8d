"""What the console says about a finished job and a model version: when a failed job started, a status said once,
and a model's lineage as links to the job and the versions it read."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from aicenter.core.catalog import ItemKind
from aicenter.core.jobs import FailureReason, JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import Node, Replica, ResourceSpec
from aicenter.services import catalog, jobs, tenancy
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.factories import Login, make_user
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.services.jobs_helpers import move
from tests.integration.web.conftest import Browser, OpenBrowser

GiB = 2**30
SPEC = {"name": "quick-fail", "tasks": [{"name": "worker", "resources": {"spec": "cpu-1"}, "command": "exit 3"}]}


@pytest.fixture
async def alice(app: FastAPI, db: Database, client: httpx.AsyncClient) -> Login:
    login = await make_user(db, client, "alice")
    async with db.write() as session:
        await ensure_default_pool(session)
        session.add(Node(name="n1", cpu_milli=4000, memory_bytes=16 * GiB, labels={}))
        session.add(
            ResourceSpec(name="cpu-1", cpu_milli=1000, memory_bytes=GiB, billing_weight=1.0, price_per_hour=Decimal(1))
        )
    return login


async def test_a_job_that_failed_while_starting_shows_when_it_started(
    alice: Login, db: Database, open_browser: OpenBrowser
) -> None:
    actor = Actor(alice.user_id, "alice")
    async with db.write() as session:
        job_id = (await jobs.submit_job(session, actor, SPEC)).job.id
    launched = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    await move(db, job_id, JobStatus.SCHEDULED, JobStatus.STARTING)
    async with db.write() as session:
        replica = await session.scalar(select(Replica).where(Replica.job_id == job_id))
        assert replica is not None
        replica.started_at = launched
        replica.finished_at = launched + timedelta(seconds=1)
    await move(db, job_id, JobStatus.FAILED, failure_reason=FailureReason.ERROR)
    page = (await (await open_browser("alice")).get(f"/jobs/{job_id}")).text
    assert 'data-status="failed"' in page
    assert 'data-testid="job-started">2026-01-02 03:04 UTC<' in page


async def test_a_stopped_job_says_stopped_once(alice: Login, db: Database, open_browser: OpenBrowser) -> None:
    actor = Actor(alice.user_id, "alice")
    async with db.write() as session:
        job_id = (await jobs.submit_job(session, actor, SPEC)).job.id
        await jobs.stop_job(session, actor, job_id)
    browser = await open_browser("alice")
    detail = (await browser.get(f"/jobs/{job_id}")).text
    assert 'data-status="stopped"' in detail
    assert 'data-testid="job-failure-reason"' not in detail
    listed = (await browser.get("/jobs")).text
    assert 'data-status="stopped"' in listed
    assert '<span class="muted small">stopped</span>' not in listed  # the badge says it; no "stopped stopped"


async def test_a_models_lineage_links_to_the_job_and_the_versions_it_read(
    alice: Login, db: Database, open_browser: OpenBrowser, tmp_path: Path
) -> None:
    actor = Actor(alice.user_id, "alice")
    store = make_store(tmp_path)
    data = await new_item(db, actor, "linreg-data")
    data_v = await new_version(db, actor, data.id, entries(store, {"a.csv": b"x,y\n"}))
    code = await new_item(db, actor, "linreg", kind=ItemKind.ALGORITHM)
    code_v = await new_version(db, actor, code.id, entries(store, {"train.py": b"print(1)"}), kind=ItemKind.ALGORITHM)
    model = await new_item(db, actor, "linreg-model", kind=ItemKind.MODEL)
    lineage = {"job_id": 42, "algorithm_version_id": code_v.id, "dataset_version_ids": [data_v.id]}
    version = await new_version(
        db, actor, model.id, entries(store, {"w.bin": b"w"}), kind=ItemKind.MODEL, metadata={"lineage": lineage}
    )
    page = (await (await open_browser("alice")).get(f"/models/{model.id}/versions/{version.number}")).text
    facts = page.split('data-testid="version-lineage"', 1)[1].split("</dd>", 1)[0]
    assert 'href="/jobs/42"' in facts
    assert f'href="/algorithms/{code.id}/versions/1" data-testid="lineage-algorithm">linreg:1<' in facts
    assert f'href="/datasets/{data.id}/versions/1" data-testid="lineage-dataset">linreg-data:1<' in facts
    assert "algorithm_version_id" not in page  # no raw JSON


async def test_a_copy_names_its_source_as_a_reference(
    alice: Login, db: Database, open_browser: OpenBrowser, tmp_path: Path
) -> None:
    actor = Actor(alice.user_id, "alice")
    store = make_store(tmp_path)
    source = await new_item(db, actor, "source-data")
    await new_version(db, actor, source.id, entries(store, {"a.csv": b"a\n"}))
    async with db.write() as session:
        copy = await catalog.copy_version(session, actor, ItemKind.DATASET, source.id, 1, name="copied-data")
    page = (await (await open_browser("alice")).get(f"/datasets/{copy.item_id}/versions/{copy.number}")).text
    fact = page.split('data-testid="version-copied-from">', 1)[1].split("</dd>", 1)[0]
    assert fact == f'<a href="/datasets/{source.id}/versions/1">source-data:1</a>'


async def test_a_jobs_page_links_its_saved_model_by_reference(
    alice: Login, db: Database, open_browser: OpenBrowser, tmp_path: Path
) -> None:
    actor = Actor(alice.user_id, "alice")
    store = make_store(tmp_path)
    model = await new_item(db, actor, "linreg-model", kind=ItemKind.MODEL)
    await new_version(db, actor, model.id, entries(store, {"w.bin": b"1"}), kind=ItemKind.MODEL)
    saved = await new_version(db, actor, model.id, entries(store, {"w.bin": b"2"}), kind=ItemKind.MODEL)
    async with db.write() as session:
        view = await jobs.submit_job(session, actor, {**SPEC, "output_model": "linreg-model"})
        view.job.output_model_version_id = saved.id  # what the reconciler records when the job succeeds
    page = (await (await open_browser("alice")).get(f"/jobs/{view.job.id}")).text
    assert f'href="/models/{model.id}/versions/2" data-testid="job-saved-model">linreg-model:2<' in page


async def test_a_platform_admin_sees_a_job_but_not_its_logs_until_the_workspace_allows_it(
    alice: Login, admin: Browser, db: Database, open_browser: OpenBrowser
) -> None:
    actor = Actor(alice.user_id, "alice")
    async with db.write() as session:
        submitted = await jobs.submit_job(session, actor, SPEC)
    job_id, workspace_id = submitted.job.id, submitted.job.workspace_id
    page = (await admin.get(f"/jobs/{job_id}")).text
    assert 'data-testid="job-facts"' in page  # the job itself is shown
    assert 'data-testid="job-logs-hidden"' in page
    assert 'data-testid="log-view"' not in page
    assert 'data-testid="log-view"' in (await (await open_browser("alice")).get(f"/jobs/{job_id}")).text
    async with db.write() as session:
        await tenancy.update_workspace(session, actor, workspace_id, admins_read_logs=True)
    page = (await admin.get(f"/jobs/{job_id}")).text
    assert 'data-testid="job-logs-hidden"' not in page
    assert 'data-testid="log-view"' in page
