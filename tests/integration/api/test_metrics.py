"""GET /metrics on SQLite and PostgreSQL: the families, their types and labels, and who may read them."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample
from sqlalchemy import select

from aicenter import __version__
from aicenter.core.clock import utcnow
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Pool, Replica, Workspace
from aicenter.services.monitoring import Sample as Point
from aicenter.services.monitoring import record_samples
from tests.factories import admin_login, make_user

SCRAPER_TOKEN = "scrape-me-0123456789"


@pytest.fixture
def scraper_token(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(app.state.ctx.settings, "metrics_token", SCRAPER_TOKEN)
    return SCRAPER_TOKEN


async def _scrape(client: httpx.AsyncClient, app: FastAPI, token: str) -> dict[str, tuple[str, list[Sample]]]:
    app.state.metrics.platform.taken_at = float("-inf")  # the test's rows, not the last test's cached counts
    r = await client.get("/metrics", headers={"Authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(r.text)}


def _values(samples: list[Sample], name: str | None = None) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(s.labels.items())): s.value for s in samples if name is None or s.name == name}


async def _seed(db: Database) -> None:
    """Two nodes (one with two A100s), a pool, jobs in three statuses, a running replica holding one A100."""
    async with db.write() as session:
        ws = Workspace(name="vision")
        pool = Pool(name="gpu")
        gpu = Node(
            name="gpu-01",
            cpu_milli=16000,
            memory_bytes=2**36,
            accelerators=[
                {"index": i, "type": "nvidia-a100", "memory_bytes": 2**36, "nvlink_domain": None} for i in range(2)
            ],
        )
        cpu = Node(name="cpu-01", cpu_milli=8000, memory_bytes=2**34, executor="slurm", state="not_ready")
        session.add_all([ws, pool, gpu, cpu])
        await session.flush()
        old = utcnow() - timedelta(minutes=10)
        running = Job(workspace_id=ws.id, name="train", status="running", pool_id=pool.id)
        session.add_all(
            [
                running,
                Job(workspace_id=ws.id, name="q1", status="queued", pool_id=pool.id, submitted_at=old),
                Job(workspace_id=ws.id, name="q2", status="queued", pool_id=pool.id),
                Job(workspace_id=ws.id, name="q3", status="queued"),
                Job(workspace_id=ws.id, name="done", status="succeeded"),
            ]
        )
        await session.flush()
        session.add(
            Replica(
                job_id=running.id,
                task="worker",
                index=0,
                status="running",
                node_id=gpu.id,
                devices=[0],
                gpu=1,
                gpu_type="nvidia-a100",
                cpu_milli=4000,
            )
        )


async def test_families_types_and_labels(
    client: httpx.AsyncClient, app: FastAPI, db: Database, scraper_token: str
) -> None:
    await _seed(db)
    admin = await admin_login(client)
    assert (await client.get("/api/v1/nodes", headers=admin.headers)).status_code == 200
    families = await _scrape(client, app, scraper_token)

    jobs_type, jobs = families["aicenter_jobs"]
    assert jobs_type == "gauge"
    assert _values(jobs)[(("status", "queued"), ("workspace", "vision"))] == 3
    assert _values(jobs)[(("status", "running"), ("workspace", "vision"))] == 1
    assert _values(families["aicenter_queue_jobs"][1]) == {(("pool", "gpu"),): 2, (("pool", "none"),): 1}
    waits = _values(families["aicenter_queue_wait_seconds"][1])
    assert waits[(("pool", "gpu"),)] >= 600  # the oldest queued job of the pool, submitted 10 minutes ago
    assert _values(families["aicenter_nodes"][1]) == {
        (("executor", "local"), ("state", "ready")): 1,
        (("executor", "slurm"), ("state", "not_ready")): 1,
    }
    assert _values(families["aicenter_accelerators"][1]) == {
        (("state", "allocated"), ("type", "nvidia-a100")): 1,
        (("state", "free"), ("type", "nvidia-a100")): 1,
    }
    assert _values(families["aicenter_cpu_cores"][1]) == {(("state", "allocated"),): 4, (("state", "capacity"),): 24}
    assert families["aicenter_store_bytes"][0] == "gauge"
    assert families["aicenter_store_objects"][0] == "gauge"
    assert _values(families["aicenter_build_info"][1]) == {(("version", __version__),): 1}

    # The API's own traffic, under route templates, never raw paths.
    requests_type, requests = families["aicenter_http_requests"]
    assert requests_type == "counter"
    counted = _values(requests, "aicenter_http_requests_total")
    assert counted[(("method", "GET"), ("route", "/api/v1/nodes"), ("status", "200"))] >= 1
    await client.get(f"/api/v1/nodes/{10**6}", headers=admin.headers)
    await client.get("/no/such/page/42")
    families = await _scrape(client, app, scraper_token)
    routes = {dict(k)["route"] for k in _values(families["aicenter_http_requests"][1], "aicenter_http_requests_total")}
    assert "/api/v1/nodes/{node_id}" in routes
    assert "unmatched" in routes
    assert not any(str(10**6) in route or "42" in route for route in routes)
    duration_type, duration = families["aicenter_http_request_duration_seconds"]
    assert duration_type == "histogram"
    assert {s.name for s in duration} >= {
        "aicenter_http_request_duration_seconds_bucket",
        "aicenter_http_request_duration_seconds_count",
        "aicenter_http_request_duration_seconds_sum",
    }


async def test_nodes_workspaces_leases_and_process_families(
    client: httpx.AsyncClient, app: FastAPI, db: Database, scraper_token: str
) -> None:
    await _seed(db)
    assert await leases.acquire(db, "scheduler", "host-a:42", ttl_s=60) is not None
    gone = await leases.acquire(db, "store-gc", "host-b:7", ttl_s=60)
    assert gone is not None
    await leases.release(db, gone)
    app.state.ctx.telemetry.observe_cycle(0.003, {("gpu", "started"): 2, ("gpu", "preempted"): 1})
    families = await _scrape(client, app, scraper_token)

    assert _values(families["aicenter_node_info"][1]) == {
        (("executor", "local"), ("node", "gpu-01"), ("state", "ready")): 1,
        (("executor", "slurm"), ("node", "cpu-01"), ("state", "not_ready")): 1,
    }
    # The default pool (empty selector) holds every node; "gpu" has an empty selector too in this seed.
    pools = {tuple(v for _, v in k) for k in _values(families["aicenter_node_pool_info"][1])}
    assert {("gpu-01", "gpu"), ("cpu-01", "gpu")} <= pools
    assert _values(families["aicenter_node_cpu_cores"][1]) == {(("node", "gpu-01"),): 16, (("node", "cpu-01"),): 8}
    assert _values(families["aicenter_node_cpu_cores_allocated"][1]) == {
        (("node", "gpu-01"),): 4,
        (("node", "cpu-01"),): 0,
    }
    assert _values(families["aicenter_node_memory_bytes"][1])[(("node", "cpu-01"),)] == 2**34
    assert _values(families["aicenter_node_accelerators"][1]) == {(("node", "gpu-01"), ("type", "nvidia-a100")): 2}
    assert _values(families["aicenter_node_accelerators_allocated"][1]) == {
        (("node", "gpu-01"), ("type", "nvidia-a100")): 1
    }
    assert _values(families["aicenter_workspace_cpu_cores_allocated"][1]) == {(("workspace", "vision"),): 4}
    assert _values(families["aicenter_workspace_accelerators_allocated"][1]) == {
        (("type", "nvidia-a100"), ("workspace", "vision")): 1
    }
    held = _values(families["aicenter_controller_lease_held"][1])
    assert held == {(("lease", "scheduler"),): 1, (("lease", "store-gc"),): 0}
    assert _values(families["aicenter_controller_lease_holder"][1]) == {
        (("holder", "host-a:42"), ("lease", "scheduler")): 1
    }

    cycles_type, cycles = families["aicenter_scheduler_cycle_duration_seconds"]
    assert cycles_type == "histogram"
    assert _values(cycles, "aicenter_scheduler_cycle_duration_seconds_count") == {(): 1}
    decisions_type, decisions = families["aicenter_scheduler_decisions"]
    assert decisions_type == "counter"
    assert _values(decisions, "aicenter_scheduler_decisions_total") == {
        (("kind", "started"), ("pool", "gpu")): 2,
        (("kind", "preempted"), ("pool", "gpu")): 1,
    }
    # Serving's families are declared (dashboards and alerts can name them) and empty until services run.
    assert families["aicenter_service_requests"] == ("counter", [])
    assert families["aicenter_service_request_duration_seconds"] == ("histogram", [])
    assert families["aicenter_service_replicas"] == ("gauge", [])
    # No sampler has written: the "used" families are declared, without samples.
    assert families["aicenter_node_cpu_utilization_ratio"] == ("gauge", [])
    assert families["aicenter_accelerator_utilization_ratio"] == ("gauge", [])


async def test_used_families_from_the_samplers_latest_values(
    client: httpx.AsyncClient, app: FastAPI, db: Database, scraper_token: str
) -> None:
    await _seed(db)
    async with db.read() as session:
        ws = (await session.execute(select(Workspace.id).where(Workspace.name == "vision"))).scalar_one()
        job = (await session.execute(select(Job.id).where(Job.status == "running"))).scalar_one()
        node = (await session.execute(select(Node.id).where(Node.name == "gpu-01"))).scalar_one()
    now = utcnow()
    gpu = {"node": "gpu-01", "device": "0", "type": "nvidia-a100"}
    replica = {"workspace_id": ws, "job_id": job, "node_id": node}
    samples = [
        Point("node.cpu_utilization", now - timedelta(seconds=30), 0.2, {"node": "gpu-01"}, node_id=node),
        Point("node.cpu_utilization", now, 0.25, {"node": "gpu-01"}, node_id=node),  # the newest counts
        Point("node.memory_used_bytes", now, 2.0**33, {"node": "gpu-01"}, node_id=node),
        # cpu-01 stopped reporting an hour ago: not "used" any more.
        Point("node.cpu_utilization", now - timedelta(hours=1), 0.9, {"node": "cpu-01"}),
        Point("accelerator.utilization", now, 0.75, gpu, node_id=node),
        Point("accelerator.temperature_celsius", now, 61.0, gpu, node_id=node),
        Point("replica.cpu_cores", now, 1.5, {"task": "worker", "replica": "0"}, **replica),
        Point("replica.cpu_cores", now, 0.5, {"task": "worker", "replica": "1"}, **replica),
        Point("report.loss", now, 0.1, {"task": "worker", "replica": "0"}, **replica),  # not for Prometheus
    ]
    async with db.write() as session:
        await record_samples(session, samples)
    families = await _scrape(client, app, scraper_token)
    assert _values(families["aicenter_node_cpu_utilization_ratio"][1]) == {(("node", "gpu-01"),): 0.25}
    assert _values(families["aicenter_node_memory_used_bytes"][1]) == {(("node", "gpu-01"),): 2.0**33}
    labels = (("device", "0"), ("node", "gpu-01"), ("type", "nvidia-a100"))
    assert _values(families["aicenter_accelerator_utilization_ratio"][1]) == {labels: 0.75}
    assert _values(families["aicenter_accelerator_temperature_celsius"][1]) == {labels: 61}
    # Replica series are summed per workspace: a label per job or replica would be unbounded.
    assert _values(families["aicenter_workspace_cpu_cores_used"][1]) == {(("workspace", "vision"),): 2.0}
    assert not any("loss" in name for name in families)


async def test_access(client: httpx.AsyncClient, app: FastAPI, db: Database, scraper_token: str) -> None:
    assert (await client.get("/metrics")).status_code == 401  # anonymous, even from 127.0.0.1
    assert (await client.get("/metrics", headers={"Authorization": "Bearer wrong"})).status_code == 401
    admin = await admin_login(client)
    assert (await client.get("/metrics", headers=admin.headers)).status_code == 200
    bob = await make_user(db, client, "bob")
    r = await client.get("/metrics", headers=bob.headers)
    assert r.status_code == 403, r.text
    assert (await client.get("/metrics", headers={"Authorization": f"Bearer {scraper_token}"})).status_code == 200
    assert "/metrics" not in app.openapi()["paths"]


async def test_no_scraper_token_admins_only(client: httpx.AsyncClient, app: FastAPI) -> None:
    assert app.state.ctx.settings.metrics_token == ""
    assert (await client.get("/metrics", headers={"Authorization": "Bearer "})).status_code == 401
    assert (await client.get("/metrics")).status_code == 401
    admin = await admin_login(client)
    assert (await client.get("/metrics", headers=admin.headers)).status_code == 200


async def test_scrapes_are_served_from_memory_and_refreshed_while_scraped(
    client: httpx.AsyncClient, app: FastAPI, db: Database, scraper_token: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After the first scrape no scrape reads the database: a refresher re-reads every metrics_cache_s while
    scrapes come, so a new job shows within that time, and it ends with the app."""
    platform = app.state.metrics.platform
    monkeypatch.setattr(app.state.ctx.settings, "metrics_cache_s", 0.2)
    before = _values((await _scrape(client, app, scraper_token))["aicenter_jobs"][1])
    async with db.write() as session:
        ws = Workspace(name="late")
        session.add(ws)
        await session.flush()
        session.add(Job(workspace_id=ws.id, name="late", status="queued"))
    reads = platform.taken_at
    for _ in range(100):  # the refresher's next read, 0.2 s on
        r = await client.get("/metrics", headers={"Authorization": f"Bearer {scraper_token}"})
        if 'aicenter_jobs{status="queued",workspace="late"} 1.0' in r.text:
            break
        await asyncio.sleep(0.05)
    else:
        pytest.fail(f"the new job never showed; before: {before}")
    assert platform.taken_at > reads
    assert platform.refresher is not None
    assert not platform.refresher.done()
    await platform.close()
    assert platform.refresher.done()
