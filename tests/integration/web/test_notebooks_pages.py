"""Notebooks in the console: the list (idle column, open/start/stop), the create form (selects from the catalog and
inventory, a field error that creates nothing, a created notebook), a notebook's page for its owner (open buttons,
save, train from here, the idle banner and the culler's events), for another member (metadata only), for a
non-member (404), the actions (stop, start, delete, idle timeout), the prefilled job form, and the terminal page.

No controllers run here: a notebook is moved to running through the jobs service's one transition function
(the real run is tests/e2e/test_notebooks_browser.py).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi import FastAPI
from sqlalchemy import func, select

from aicenter.core.catalog import ItemKind
from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.core.jobs.notebooks import IdleDecision, IdleVerdict
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Notebook, ResourceSpec
from aicenter.services import jobs, members, notebooks
from aicenter.services.context import Actor
from aicenter.services.inventory import ensure_default_pool
from tests.factories import ADMIN, Login, make_user
from tests.integration.services.catalog_helpers import entries, make_store, new_item, new_version
from tests.integration.web.conftest import OpenBrowser

GiB = 2**30


@dataclass
class World:
    alice: Login  # owns the notebooks
    bob: Login  # a member of alice's workspace
    carol: Login  # in no workspace of alice's
    actor: Actor
    workspace_id: int


@pytest.fixture
async def world(app: FastAPI, db: Database, client: httpx.AsyncClient, tmp_path: Path) -> World:
    """alice with a dataset and an algorithm version; bob in her workspace; carol elsewhere; one node; cpu-1."""
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    carol = await make_user(db, client, "carol")
    me = (await client.get("/api/v1/users/me", headers=alice.headers)).json()
    workspace_id = int(me["default_workspace_id"])
    async with db.write() as session:
        await ensure_default_pool(session)
        session.add(Node(name="n1", cpu_milli=4000, memory_bytes=16 * GiB, labels={}))
        session.add(
            ResourceSpec(name="cpu-1", cpu_milli=1000, memory_bytes=GiB, billing_weight=1.0, price_per_hour=Decimal(1))
        )
        await members.add_member(session, ADMIN, workspace_id, user_id=bob.user_id)
    actor = Actor(alice.user_id, "alice")
    store = make_store(tmp_path)
    dataset = await new_item(db, actor, "cifar")
    await new_version(db, actor, dataset.id, entries(store, {"a.txt": b"a"}))
    algorithm = await new_item(db, actor, "resnet", kind=ItemKind.ALGORITHM)
    await new_version(db, actor, algorithm.id, entries(store, {"train.py": b"print(1)"}), kind=ItemKind.ALGORITHM)
    return World(alice, bob, carol, actor, workspace_id)


async def _create(db: Database, actor: Actor, name: str = "nb1", **spec: object) -> int:
    async with db.write() as session:
        return await notebooks.create_notebook(session, actor, {"name": name, "resources": {"spec": "cpu-1"}, **spec})


async def _run(db: Database, job_id: int) -> None:
    """queued -> scheduled -> starting -> running, through the one transition function."""
    async with db.write() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        for status in (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING):
            await jobs.transition(session, job, status, actor=None)


async def _count(db: Database) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(Notebook)) or 0)


def _rows(page: str) -> list[tuple[str, str]]:
    return re.findall(r'data-testid="notebook-row" data-notebook-id="(\d+)" data-status="(\w+)"', page)


async def test_list_shows_notebooks_with_idle_state_and_owner_buttons(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    running = await _create(db, world.actor, "running-one")
    await _run(db, running)
    queued = await _create(db, world.actor, "queued-one")
    async with db.write() as session:  # the culler saw it last used 12 minutes ago
        row = await session.scalar(select(Notebook).where(Notebook.job_id == running))
        assert row is not None
        row.idle_since = utcnow() - timedelta(minutes=12, seconds=5)

    alice = await open_browser("alice")
    page = await alice.get("/notebooks")
    assert page.status_code == 200, page.text
    assert _rows(page.text) == [(str(queued), "queued"), (str(running), "running")]  # newest first
    assert 'data-testid="nav-notebooks"' in page.text
    assert 'href="/notebooks/new"' in page.text
    assert 'data-testid="notebook-idle">idle 12 min<' in page.text
    assert f'href="/notebooks/{running}/lab" target="_blank"' in page.text  # Open: owner, running
    assert f'data-testid="notebook-open-{queued}"' not in page.text
    assert f'data-testid="notebook-stop-{running}"' in page.text
    assert ">cpu-1<" in page.text

    bob = await open_browser("bob")  # a member sees them, opens none, stops none
    seen = await bob.get("/notebooks")
    assert len(_rows(seen.text)) == 2
    assert "notebook-open-" not in seen.text
    assert "notebook-stop-" not in seen.text

    carol = await open_browser("carol")
    assert _rows((await carol.get("/notebooks")).text) == []


async def test_create_form_offers_the_catalog_and_shows_errors_at_their_field(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    alice = await open_browser("alice")
    form = await alice.get("/notebooks/new")
    assert form.status_code == 200, form.text
    text = form.text
    assert '<option value="host"' in text
    assert '<option value="alice/resnet:1"' in text or '<option value="resnet:1"' in text
    assert "cifar:1" in text
    assert '<option value="cpu-1">' in text

    bad = await alice.post(
        "/notebooks/new",
        {"name": "nb-x", "workspace_id": str(world.workspace_id), "cpu": "1", "memory": "1Gx", "idle_timeout": "10"},
    )
    assert bad.status_code == 422, bad.text
    assert 'data-testid="notebook-new-memory-error"' in bad.text
    assert 'value="nb-x"' in bad.text  # what was typed stays
    typed = {"name": "nb-x", "workspace_id": str(world.workspace_id), "spec": "cpu-1", "idle_timeout": "x"}
    minutes = await alice.post("/notebooks/new", typed)
    assert minutes.status_code == 422
    assert 'data-testid="notebook-new-idle-timeout-error"' in minutes.text
    no_spec = await alice.post("/notebooks/new", {**typed, "spec": "gpu-9000", "idle_timeout": ""})
    assert no_spec.status_code == 422
    assert re.search(r'data-testid="notebook-new-spec-error">spec &#34;gpu-9000&#34; not found', no_spec.text)
    no_data = await alice.post("/notebooks/new", {**typed, "datasets": "nope:1", "idle_timeout": ""})
    assert no_data.status_code == 404
    assert 'data-testid="notebook-new-datasets-error"' in no_data.text
    assert await _count(db) == 0

    created = await alice.post(
        "/notebooks/new",
        {
            "name": "explore",
            "workspace_id": str(world.workspace_id),
            "image": "host",
            "datasets": "cifar:1",
            "spec": "cpu-1",
            "idle_timeout": "30",
        },
    )
    assert created.status_code == 303, created.text
    target = created.headers["location"]
    assert re.fullmatch(r"/notebooks/\d+", target)
    async with db.read() as session:
        row = await session.scalar(select(Notebook))
        assert row is not None
        assert row.idle_timeout_s == 1800
    detail = await alice.get(target)
    assert detail.status_code == 200
    assert "Notebook explore was created" in detail.text
    assert 'data-testid="notebook-status" data-status="queued"' in detail.text
    assert f'data-refresh="{target}"' in detail.text  # the page follows it until it runs

    taken = await alice.post(
        "/notebooks/new", {"name": "explore", "workspace_id": str(world.workspace_id), "spec": "cpu-1"}
    )
    assert taken.status_code == 409
    assert 'data-testid="notebook-new-name-error"' in taken.text
    assert await _count(db) == 1


async def test_owner_page_has_open_buttons_save_train_and_the_idle_banner(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    job_id = await _create(db, world.actor, algorithm="resnet:1")
    await _run(db, job_id)
    now = utcnow()
    async with db.write() as session:
        running = await notebooks.load_running(session, "secret", 3600, Path("/nonexistent"))
        decision = IdleDecision(IdleVerdict.WARN, now - timedelta(minutes=55), now + timedelta(minutes=5))
        await notebooks.apply_idle(session, [(running[0], decision)], now=now)

    alice = await open_browser("alice")
    page = await alice.get(f"/notebooks/{job_id}")
    assert page.status_code == 200, page.text
    text = html.unescape(page.text)
    assert f'href="/notebooks/{job_id}/lab" target="_blank"' in text
    assert f'href="/notebook-terminal/{job_id}"' in text
    assert "aicenter notebook ssh-config nb1 >> ~/.ssh/config" in text
    assert f">notebook-{job_id}<" in text
    assert 'href="/profile#ssh-keys"' in text
    banner = re.search(r'data-testid="notebook-idle-banner">(.*?)</div>', text, re.S)
    assert banner is not None
    assert (
        f"Idle since {(now - timedelta(minutes=55)):%H:%M} UTC; it will be stopped at "
        f"{(now + timedelta(minutes=5)):%H:%M} UTC unless it is used" in " ".join(banner.group(1).split())
    )
    assert "notebook.idle_warning" in text  # the culler's event, with the status changes
    assert "queued → scheduled" in text
    assert 'data-testid="notebook-save-form"' in text
    assert f'href="/jobs/new?notebook={job_id}"' in text
    assert 'data-testid="notebook-stop"' in text
    assert 'data-testid="notebook-delete"' not in text  # running: stop it first
    assert f'data-stream="/api/v1/jobs/{job_id}/logs/stream"' in text
    assert "data-refresh" not in text  # running: settled

    # Train from here: the job form's YAML tab, prefilled from train_spec.
    train = await alice.get(f"/jobs/new?notebook={job_id}")
    assert train.status_code == 200, train.text
    textarea = re.search(r'<textarea id="job-yaml-yaml"[^>]*>(.*?)</textarea>', train.text, re.S)
    assert textarea is not None
    spec = yaml.safe_load(html.unescape(textarea.group(1)))
    assert spec["kind"] == "train"
    assert spec["name"] == "nb1-train"
    assert spec["tasks"][0]["resources"]["spec"] == "cpu-1"
    assert 'data-testid="job-yaml-note"' in train.text


async def test_a_member_sees_metadata_only_and_a_non_member_gets_404(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    job_id = await _create(db, world.actor)
    await _run(db, job_id)
    bob = await open_browser("bob")
    page = await bob.get(f"/notebooks/{job_id}")
    assert page.status_code == 200, page.text
    assert 'data-testid="notebook-owner-only"' in page.text
    for hidden in ("notebook-open-lab", "notebook-open-terminal", "notebook-save-form", "notebook-stop", "ssh-config"):
        assert hidden not in page.text, hidden
    assert (await bob.get(f"/notebook-terminal/{job_id}")).status_code == 403
    refused = await bob.post(f"/notebooks/{job_id}", {"action": "stop"})
    assert refused.status_code == 403
    assert (await bob.post(f"/notebooks/{job_id}", {"action": "save", "algorithm": "x"})).status_code == 403

    carol = await open_browser("carol")
    assert (await carol.get(f"/notebooks/{job_id}")).status_code == 404
    assert (await carol.get(f"/notebook-terminal/{job_id}")).status_code == 404
    assert (await carol.post(f"/notebooks/{job_id}", {"action": "stop"})).status_code == 404
    assert (await carol.get(f"/jobs/new?notebook={job_id}")).status_code == 404

    admin = await open_browser("admin", "admin-password-1")  # a platform admin outside the workspace
    seen = await admin.get(f"/notebooks/{job_id}")
    assert seen.status_code == 200
    assert 'data-testid="notebook-owner-only"' in seen.text
    assert "notebook-open-lab" not in seen.text
    assert 'data-testid="notebook-logs-hidden"' in seen.text  # the admin-data rule of the job page
    stopped = await admin.post(f"/notebooks/{job_id}", {"action": "stop"})  # a force-stop
    assert stopped.status_code == 303, stopped.text
    async with db.read() as session:
        job = await session.get(Job, job_id)
        assert job is not None
        assert job.stop_requested_at is not None


async def test_stop_start_idle_timeout_and_delete(world: World, db: Database, open_browser: OpenBrowser) -> None:
    job_id = await _create(db, world.actor)  # queued: a stop ends it at once
    alice = await open_browser("alice")
    stopped = await alice.post(f"/notebooks/{job_id}", {"action": "stop"})
    assert stopped.status_code == 303, stopped.text
    page = await alice.get(f"/notebooks/{job_id}")
    assert 'data-status="stopped"' in page.text
    assert 'data-testid="notebook-start"' in page.text
    assert 'data-testid="notebook-delete"' in page.text

    bad = await alice.post(f"/notebooks/{job_id}", {"action": "idle-timeout", "idle_timeout": "-5"})
    assert bad.status_code == 422
    assert 'data-testid="notebook-idle-timeout-idle-timeout-error"' in bad.text
    changed = await alice.post(f"/notebooks/{job_id}", {"action": "idle-timeout", "idle_timeout": "0"})
    assert changed.status_code == 303
    assert 'data-testid="notebook-idle-timeout">never' in (await alice.get(f"/notebooks/{job_id}")).text

    started = await alice.post(f"/notebooks/{job_id}", {"action": "start", "next": "/notebooks"})
    assert started.status_code == 303
    assert started.headers["location"] == "/notebooks"
    assert 'data-status="queued"' in (await alice.get(f"/notebooks/{job_id}")).text
    busy = await alice.post(f"/notebooks/{job_id}", {"action": "delete"})
    assert busy.status_code == 409  # still queued: stop it first
    assert 'data-testid="notebook-delete-error"' in busy.text

    await alice.post(f"/notebooks/{job_id}", {"action": "stop"})
    deleted = await alice.post(f"/notebooks/{job_id}", {"action": "delete"})
    assert deleted.status_code == 303
    assert deleted.headers["location"] == "/notebooks"
    assert await _count(db) == 0
    assert (await alice.get(f"/notebooks/{job_id}")).status_code == 404
    assert (await alice.post(f"/notebooks/{job_id}", {"action": "explode"})).status_code == 422


async def test_terminal_page_ships_xterm_and_its_own_policy(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    job_id = await _create(db, world.actor)
    alice = await open_browser("alice")
    waiting = await alice.get(f"/notebook-terminal/{job_id}")
    assert waiting.status_code == 200
    assert 'data-testid="notebook-not-running"' in waiting.text
    await _run(db, job_id)
    page = await alice.get(f"/notebook-terminal/{job_id}")
    assert page.status_code == 200, page.text
    assert f'data-base="/notebooks/{job_id}/"' in page.text
    assert "/static/vendor/xterm/xterm.js" in page.text
    assert "/static/terminal.js" in page.text
    policy = page.headers["content-security-policy"]
    assert "script-src" not in policy
    assert "default-src 'self'" in policy
    assert "style-src 'self' 'unsafe-inline'" in policy
    for asset in ("xterm.js", "xterm.css", "addon-fit.js", "LICENSE", "LICENSE.addon-fit"):
        assert (await alice.get(f"/static/vendor/xterm/{asset}")).status_code == 200, asset


async def test_the_proxy_under_a_console_session_answers_like_the_api_and_keeps_the_session(
    world: World, db: Database, open_browser: OpenBrowser
) -> None:
    """JupyterLab's frontend sends ``Authorization: token <its own token>`` with the session cookie: the cookie
    decides. A refused proxy request answers the API's JSON error and never signs the user out of the console."""
    job_id = await _create(db, world.actor)  # queued: the proxy explains it is not running
    alice = await open_browser("alice")
    lab_call = await alice.get(
        f"/notebooks/{job_id}/api/kernels", headers={"Authorization": "token 0123abcd", "Accept": "*/*"}
    )
    assert lab_call.status_code == 404, lab_call.text
    assert lab_call.json()["error"]["details"]["status"] == "queued"

    garbled = await alice.get(f"/notebooks/{job_id}/api/kernels", headers={"Authorization": "Basic Zm9vOmJhcg=="})
    assert garbled.status_code == 401
    assert garbled.json()["error"]["code"]
    assert "set-cookie" not in garbled.headers  # the session cookie stays
    still = await alice.get(f"/notebooks/{job_id}")
    assert still.status_code == 200  # still signed in
