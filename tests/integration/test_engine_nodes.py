"""The nodes of an engine (Ray, Slurm) read into the inventory by the engine-nodes controller, on both databases.

The engine here is a scripted executor: what is under test is our own synchronization (registration, topology,
not-ready marking, an unreachable engine changing nothing). The real engines' ``nodes()`` are tested against real
Ray and Slurm clusters in ``tests/contract`` and ``tests/integration/executors``.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from sqlalchemy import select

from aicenter.config import Settings
from aicenter.controllers.engine_nodes import EngineNodesController
from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent, Node
from aicenter.executors import EXECUTOR_LABEL, AcceleratorInfo, HostInfo
from tests.factories import admin_login

GIB = 2**30


class ScriptedEngine:
    """An executor whose ``nodes()`` answers what the test set (or raises)."""

    name = "slurm"

    def __init__(self) -> None:
        self.hosts: list[HostInfo] = []
        self.error: Exception | None = None

    async def nodes(self) -> list[HostInfo]:
        if self.error is not None:
            raise self.error
        return list(self.hosts)

    def __getattr__(self, name: str) -> Any:  # launch, status ...: never called by the controller
        raise AssertionError(f"the engine-nodes controller called {name}")


def _host(name: str, *, rack: str | None = None, gpus: int = 0) -> HostInfo:
    labels = {"aicenter.io/hostname": name, **({"rack": rack} if rack else {})}
    accelerators = tuple(AcceleratorInfo(i, "nvidia-a100", "nvidia", "A100", 80 * GIB) for i in range(gpus))
    return HostInfo(name, "10.0.0.1", "slurm", 4000, 16 * GIB, accelerators, labels)


async def _nodes(db: Database) -> dict[str, Node]:
    async with db.read() as session:
        return {n.name: n for n in (await session.scalars(select(Node))).all()}


@pytest.fixture
def engine(db: Database, settings: Settings) -> tuple[ScriptedEngine, EngineNodesController]:
    scripted = ScriptedEngine()
    return scripted, EngineNodesController(db, settings, {"slurm": scripted})  # type: ignore[dict-item]


async def test_engine_nodes_are_registered_with_labels_topology_and_accelerators(
    db: Database, engine: tuple[ScriptedEngine, EngineNodesController], client: httpx.AsyncClient
) -> None:
    scripted, controller = engine
    scripted.hosts = [_host("gpu1", rack="r1", gpus=2), _host("cpu1")]
    await controller.tick()
    nodes = await _nodes(db)
    gpu1 = nodes["gpu1"]
    assert (gpu1.executor, gpu1.state, gpu1.rack, gpu1.address) == ("slurm", "ready", "r1", "10.0.0.1")
    assert gpu1.labels[EXECUTOR_LABEL] == "slurm"
    assert [a["type"] for a in gpu1.accelerators] == ["nvidia-a100", "nvidia-a100"]
    assert nodes["cpu1"].rack is None

    # A pool per engine selects its nodes by the executor label.
    admin = await admin_login(client)
    created = await client.post(
        "/api/v1/pools", json={"name": "slurm", "selector": {EXECUTOR_LABEL: "slurm"}}, headers=admin.headers
    )
    assert created.status_code == 201, created.text
    listed = await client.get(f"/api/v1/nodes?label={EXECUTOR_LABEL}=slurm", headers=admin.headers)
    assert sorted(n["name"] for n in listed.json()["items"]) == ["cpu1", "gpu1"]
    assert all("slurm" in n["pools"] for n in listed.json()["items"])


async def test_a_node_the_engine_stops_reporting_is_not_ready_at_once_and_comes_back(
    db: Database, engine: tuple[ScriptedEngine, EngineNodesController]
) -> None:
    scripted, controller = engine
    scripted.hosts = [_host("n1"), _host("n2")]
    await controller.tick()
    scripted.hosts = [_host("n1")]  # n2 died, went down or was drained
    await controller.tick()
    nodes = await _nodes(db)
    assert (nodes["n1"].state, nodes["n2"].state) == ("ready", "not_ready")
    async with db.read() as session:
        events = (await session.scalars(select(AuditEvent).where(AuditEvent.action == "node.not_ready"))).all()
    assert [e.details["name"] for e in events] == ["n2"]

    await controller.tick()  # already not ready: nothing more recorded
    scripted.hosts = [_host("n1"), _host("n2")]
    await controller.tick()
    assert (await _nodes(db))["n2"].state == "ready"


async def test_an_unreachable_engine_changes_nothing(
    db: Database, engine: tuple[ScriptedEngine, EngineNodesController], caplog: pytest.LogCaptureFixture
) -> None:
    scripted, controller = engine
    scripted.hosts = [_host("n1")]
    await controller.tick()
    scripted.error = ConnectionError("slurmctld is not answering")
    await controller.tick()
    await controller.tick()
    assert (await _nodes(db))["n1"].state == "ready"
    assert sum("cannot read its nodes" in r.message for r in caplog.records) == 1  # said once, not every tick


async def test_only_the_engines_own_nodes_are_touched(
    db: Database, engine: tuple[ScriptedEngine, EngineNodesController]
) -> None:
    scripted, controller = engine
    async with db.write() as session:
        session.add(Node(name="handmade", executor="local", cpu_milli=1000, memory_bytes=GIB, state="ready"))
    scripted.hosts = []
    await controller.tick()
    assert (await _nodes(db))["handmade"].state == "ready"
