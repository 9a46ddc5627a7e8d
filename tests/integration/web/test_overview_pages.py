"""The overview dashboard (home page): a platform admin sees the whole center, a member their workspaces' jobs and
the totals of the pools granted to them; every number is checked against the rows the factories wrote."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta

import httpx
import pytest
from fastapi import FastAPI
from sqlalchemy import select

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Pool, PoolGrant, Replica
from aicenter.services import monitoring
from aicenter.services.context import Actor
from aicenter.web.routes.jobs import covering_range
from tests.factories import ADMIN, make_user
from tests.integration.web.conftest import Browser, OpenBrowser

GiB = 2**30


@dataclass
class Center:
    alice: Actor
    bob: Actor
    alice_ws: int
    bob_ws: int


async def _workspace(client: httpx.AsyncClient, token: str) -> int:
    me = (await client.get("/api/v1/users/me", headers={"Authorization": f"Bearer {token}"})).json()
    return int(me["default_workspace_id"])


def _job(workspace_id: int, name: str, status: str, pool_id: int | None, **fields: object) -> Job:
    return Job(workspace_id=workspace_id, name=name, spec={}, status=status, pool_id=pool_id, **fields)


@pytest.fixture
async def center(app: FastAPI, db: Database, client: httpx.AsyncClient) -> Center:
    """n1: 8 CPUs and 2 a100 (pools default and gpu); n2: 4 CPUs, down. alice: one running job holding 2 CPUs
    and an a100, one queued for 10 minutes, one failed an hour ago. bob: one running job holding 4 CPUs and an
    a100 (pool gpu, granted to bob only), one failed two days ago (out of the 24 h window)."""
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    alice_ws, bob_ws = await _workspace(client, alice.token), await _workspace(client, bob.token)
    now = utcnow()
    async with db.write() as session:
        default = await session.scalar(select(Pool).where(Pool.is_default.is_(True)))
        assert default is not None
        gpu = Pool(name="gpu", selector={"gpu": "yes"})
        session.add(gpu)
        a100 = [{"index": i, "type": "a100"} for i in range(2)]
        n1 = Node(name="n1", cpu_milli=8000, memory_bytes=64 * GiB, labels={"gpu": "yes"}, accelerators=a100)
        n2 = Node(name="n2", cpu_milli=4000, memory_bytes=16 * GiB, labels={}, state="down")
        session.add_all([n1, n2])
        await session.flush()
        session.add(PoolGrant(pool_id=gpu.id, workspace_id=bob_ws))
        a_run = _job(alice_ws, "a-run", "running", default.id, submitted_at=now - timedelta(minutes=30))
        a_run.started_at = now - timedelta(minutes=20)  # waited 10 minutes
        b_run = _job(bob_ws, "b-run", "running", gpu.id, submitted_at=now - timedelta(minutes=5))
        b_run.started_at = now - timedelta(minutes=4)  # waited 1 minute
        session.add_all(
            [
                a_run,
                b_run,
                _job(alice_ws, "a-wait", "queued", default.id, submitted_at=now - timedelta(minutes=10)),
                _job(alice_ws, "a-fail", "failed", default.id, finished_at=now - timedelta(hours=1)),
                _job(bob_ws, "b-old-fail", "failed", gpu.id, finished_at=now - timedelta(days=2)),
            ]
        )
        await session.flush()
        for job, cpu, node in ((a_run, 2000, n1), (b_run, 4000, n1)):
            session.add(
                Replica(
                    job_id=job.id,
                    task="worker",
                    index=0,
                    status="running",
                    node_id=node.id,
                    node_name=node.name,
                    cpu_milli=cpu,
                    memory_bytes=GiB,
                    gpu=1,
                    gpu_type="a100",
                )
            )
    return Center(Actor(alice.user_id, "alice"), Actor(bob.user_id, "bob"), alice_ws, bob_ws)


def _rows(o: monitoring.Overview) -> dict[tuple[str | None, str], tuple[float, float, float]]:
    return {(r.pool, r.resource): (r.capacity, r.allocated, r.mine) for r in o.resources}


async def test_an_admin_sees_the_whole_center(center: Center, db: Database) -> None:
    async with db.read() as session:
        o = await monitoring.overview(session, ADMIN)
    assert o.whole_center
    assert o.jobs == {"running": 2, "queued": 1, "failed": 1}
    assert _rows(o) == {
        ("default", "cpu"): (12, 2, 2),
        ("default", "a100"): (2, 1, 1),
        ("gpu", "cpu"): (8, 4, 4),
        ("gpu", "a100"): (2, 1, 1),
        (None, "cpu"): (12, 6, 6),
        (None, "a100"): (2, 2, 2),
    }
    assert all(r.used is None for r in o.resources)  # no sampler wrote anything: "no telemetry"
    assert [(w.name, w.running_jobs, w.cpu_cores, w.accelerators) for w in o.top_workspaces] == [
        ("bob", 1, 4.0, 1),
        ("alice", 1, 2.0, 1),
    ]
    assert (o.nodes_total, o.nodes_down_count, [n.name for n in o.nodes_down]) == (2, 1, ["n2"])
    queue = {q.pool: q for q in o.queue}
    assert queue["default"].queued == 1
    assert 590 <= queue["default"].oldest_wait_s <= 3600  # ten minutes, plus however long the test took
    assert queue["default"].median_wait_s == pytest.approx(600, abs=1)
    assert queue["gpu"].queued == 0
    assert queue["gpu"].median_wait_s == pytest.approx(60, abs=1)


async def test_used_comes_from_the_latest_fresh_samples(center: Center, db: Database) -> None:
    now = utcnow()
    async with db.write() as session:
        n1 = await session.scalar(select(Node).where(Node.name == "n1"))
        n2 = await session.scalar(select(Node).where(Node.name == "n2"))
        assert n1 is not None
        assert n2 is not None
        at1, at2 = {"node": "n1"}, {"node": "n2"}
        await monitoring.record_samples(
            session,
            [
                monitoring.Sample("node.cpu_utilization", now - timedelta(minutes=5), 0.9, at1, node_id=n1.id),
                monitoring.Sample("node.cpu_utilization", now - timedelta(seconds=10), 0.25, at1, node_id=n1.id),
                # n2's newest sample is stale (10 minutes): its use is unknown, not its last word.
                monitoring.Sample("node.cpu_utilization", now - timedelta(minutes=10), 1.0, at2, node_id=n2.id),
                *(
                    monitoring.Sample(
                        "accelerator.utilization",
                        now - timedelta(seconds=5),
                        value,
                        {"node": "n1", "device": str(i), "type": "a100"},
                        node_id=n1.id,
                    )
                    for i, value in enumerate((0.5, 0.3))
                ),
            ],
        )
    async with db.read() as session:
        o = await monitoring.overview(session, ADMIN)
    used = {(r.pool, r.resource): r.used for r in o.resources}
    assert used[(None, "cpu")] == pytest.approx(2.0)  # 25% of n1's 8 cores
    assert used[(None, "a100")] == pytest.approx(0.8)  # two devices at 50% and 30%
    assert used[("gpu", "cpu")] == pytest.approx(2.0)
    assert o.telemetry
    total = next(r for r in o.resources if r.pool is None and r.resource == "a100")
    assert total.used_ratio == pytest.approx(0.4)


async def test_a_member_sees_their_workspaces_and_their_pools_totals(center: Center, db: Database) -> None:
    async with db.read() as session:
        alice = await monitoring.overview(session, center.alice)
        bob = await monitoring.overview(session, center.bob)
    assert not alice.whole_center
    assert alice.workspace_ids == (center.alice_ws,)
    assert alice.jobs == {"running": 1, "queued": 1, "failed": 1}
    # Pool gpu is bob's only; the default pool holds both nodes; bob's job on it counts in "allocated".
    assert _rows(alice) == {
        ("default", "cpu"): (12, 2, 2),
        ("default", "a100"): (2, 1, 1),
        (None, "cpu"): (12, 2, 2),
        (None, "a100"): (2, 1, 1),
    }
    assert [w.name for w in alice.top_workspaces] == ["alice"]
    assert (alice.nodes_down_count, alice.nodes_down) == (1, [])  # a count, no node names
    assert [q.pool for q in alice.queue] == ["default"]
    assert bob.jobs == {"running": 1, "queued": 0, "failed": 0}  # his old failure is out of the 24 h window
    assert _rows(bob)[("gpu", "cpu")] == (8, 4, 4)
    assert _rows(bob)[(None, "cpu")] == (12, 6, 4)  # both pools' nodes once; bob holds 4 of the 6 allocated


def _cell(row: str, testid: str) -> str:
    match = re.search(rf'data-testid="{testid}">(.*?)</td>', row, re.S)
    assert match, row
    return re.sub(r"<[^>]+>", "", match.group(1)).strip()


def _row(page: str, pool: str, resource: str) -> str:
    match = re.search(
        rf'<tr data-testid="resource-row" data-pool="{pool}" data-resource="{resource}".*?</tr>', page, re.S
    )
    assert match, f"no row {pool}/{resource}"
    return match.group(0)


async def test_the_home_page_shows_the_overview_by_role(
    center: Center, admin: Browser, open_browser: OpenBrowser
) -> None:
    page = (await admin.get("/")).text
    assert "The center now" in page
    assert re.search(r'data-testid="tile-running">.*?tile-value">2<', page, re.S)
    assert re.search(r'data-testid="tile-failed">.*?tile-value">1<', page, re.S)
    total = _row(page, "all", "cpu")
    assert (_cell(total, "capacity"), _cell(total, "allocated"), _cell(total, "used")) == ("12", "6", "no telemetry")
    assert "no telemetry" in page.split('data-testid="tile-resource-cpu"', 1)[1].split("</div></div>", 2)[1]
    assert 'data-testid="node-down-row" data-node="n2"' in page
    assert 'data-workspace="bob"' in page
    assert 'data-testid="chart-cluster-cpu"' in page
    assert "{% block" not in page

    alice = await open_browser("alice")
    page = (await alice.get("/")).text
    assert "Your workspaces now" in page
    assert 'data-pool="gpu"' not in page
    total = _row(page, "all", "cpu")
    assert (_cell(total, "allocated"), _cell(total, "mine")) == ("2", "2")
    assert 'data-workspace="bob"' not in page
    assert "node-down-row" not in page
    assert re.search(r'data-testid="tile-nodes-down">.*?tile-value">1<', page, re.S)
    # The charts ask the series API; the range picker offers every range, 1h chosen by default.
    assert 'data-range="1h" data-testid="range-1h" class="active"' in page
    for r in ("6h", "24h", "7d", "30d", "90d"):
        assert f'href="?range={r}"' in page
    picked = (await alice.get("/?range=7d&refresh=15")).text
    assert 'data-range="7d" data-testid="range-7d" class="active"' in picked
    assert '<option value="15" selected>' in picked


async def test_the_compare_page_overlays_visible_jobs_and_refuses_bad_ids(
    center: Center, db: Database, open_browser: OpenBrowser
) -> None:
    async with db.read() as session:
        ids = {j.name: j.id for j in (await session.scalars(select(Job))).all()}
    alice = await open_browser("alice")
    listing = (await alice.get("/jobs")).text
    assert f'data-testid="compare-{ids["a-run"]}"' in listing
    assert 'action="/jobs/compare"' in listing
    page = await alice.get(f"/jobs/compare?ids={ids['a-run']},{ids['a-fail']}")
    assert page.status_code == 200, page.text
    assert page.text.count('data-testid="compare-row"') == 2
    assert f"/api/v1/jobs/{ids['a-fail']}/metrics" in page.text
    both = await alice.get(f"/jobs/compare?ids={ids['a-run']}&ids={ids['a-wait']}")
    assert both.text.count('data-testid="compare-row"') == 2
    for bad in ("", "1,x", "-1", ",".join(str(i) for i in range(1, 12))):
        refused = await alice.get(f"/jobs/compare?ids={bad}")
        assert refused.status_code == 422, (bad, refused.status_code)
        assert "ids=1,2,3" in refused.text or "at most 10" in refused.text
    # bob's job reads as missing to alice, as on its own page.
    hidden = await alice.get(f"/jobs/compare?ids={ids['a-run']},{ids['b-run']}")
    assert hidden.status_code == 404
    assert "b-run" not in hidden.text


async def test_the_job_and_node_pages_chart_their_series(center: Center, db: Database, admin: Browser) -> None:
    async with db.read() as session:
        job_id = await session.scalar(select(Job.id).where(Job.name == "a-run"))
        node_id = await session.scalar(select(Node.id).where(Node.name == "n1"))
    job = (await admin.get(f"/jobs/{job_id}")).text
    for key in ("replica-cpu", "replica-memory", "replica-accelerator-memory"):
        assert f'data-testid="chart-{key}"' in job
    assert f"&#34;job_id&#34;: {job_id}" in job
    assert '<option value="15" selected>' in job  # a running job's charts refresh by themselves
    async with db.read() as session:
        failed_id = await session.scalar(select(Job.id).where(Job.name == "a-fail"))
    assert '<option value="0" selected>' in (await admin.get(f"/jobs/{failed_id}")).text
    node = (await admin.get(f"/nodes/{node_id}")).text
    for key in ("node-cpu", "node-memory", "node-disk", "node-network", "accelerator-utilization"):
        assert f'data-testid="chart-{key}"' in node
    assert 'data-empty="no accelerator telemetry"' in node
    assert "/static/charts.js" in node
    assert "no-accelerator-telemetry" not in node  # no sampler has spoken yet
    async with db.write() as session:
        said = monitoring.Sample("node.accelerator_telemetry", utcnow(), 0.0, {"node": "n1"}, node_id=node_id)
        await monitoring.record_samples(session, [said])
    node = (await admin.get(f"/nodes/{node_id}")).text
    assert 'data-testid="no-accelerator-telemetry"' in node


@pytest.mark.parametrize(
    ("ago", "expected"),
    [
        (None, "1h"),
        (timedelta(minutes=20), "1h"),
        (timedelta(hours=5), "6h"),
        (timedelta(days=2), "7d"),
        (timedelta(days=200), "90d"),
    ],
)
def test_a_jobs_charts_open_on_the_range_reaching_its_start(ago: timedelta | None, expected: str) -> None:
    assert covering_range(None if ago is None else utcnow() - ago) == expected
