"""This host's registration, heartbeat and not_ready marking through the controller's tick, on both databases."""

from __future__ import annotations

from datetime import timedelta

import httpx
from sqlalchemy import select

from aicenter.config import Settings
from aicenter.controllers.heartbeat import HeartbeatController
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.db.models import AcceleratorType, AuditEvent, Node
from aicenter.executors import AcceleratorInfo, HostInfo
from aicenter.executors.local.host import HOSTNAME_LABEL, detect_host
from aicenter.services import inventory
from tests.factories import admin_login

GIB = 2**30


def _controller(db: Database, settings: Settings, **changes: object) -> HeartbeatController:
    return HeartbeatController(db, settings.model_copy(update={"register_host": True, **changes}))


async def _node(db: Database, name: str) -> Node:
    async with db.read() as session:
        node = await session.scalar(select(Node).where(Node.name == name))
    assert node is not None
    return node


async def test_first_tick_registers_this_host(db: Database, settings: Settings, client: httpx.AsyncClient) -> None:
    controller = _controller(db, settings)
    await controller.tick()
    host = detect_host()
    node = await _node(db, host.name)
    assert node.executor == "local"
    assert node.cpu_milli == host.cpu_milli > 0
    assert node.memory_bytes == host.memory_bytes > 0
    assert node.accelerators == []  # no GPU on this machine
    assert node.labels[HOSTNAME_LABEL] == host.name
    assert (node.state, node.schedule) == ("ready", "schedulable")
    assert node.last_heartbeat_at is not None

    # The API shows it, in the default pool.
    admin = await admin_login(client)
    listed = await client.get(f"/api/v1/nodes?label={HOSTNAME_LABEL}={host.name}", headers=admin.headers)
    assert [(n["name"], n["pools"]) for n in listed.json()["items"]] == [(host.name, ["default"])]

    # Later ticks refresh the heartbeat and keep what an admin set.
    first = node.last_heartbeat_at
    await client.post(f"/api/v1/nodes/{node.id}/cordon", headers=admin.headers)
    await client.patch(f"/api/v1/nodes/{node.id}", json={"labels": {"zone": "a"}, "rack": "r1"}, headers=admin.headers)
    await controller.tick()
    again = await _node(db, host.name)
    assert again.id == node.id
    assert again.last_heartbeat_at is not None
    assert again.last_heartbeat_at > first
    assert (again.schedule, again.rack, again.labels) == ("cordoned", "r1", {"zone": "a"})

    # A restart (a new controller) registers again: the detected labels come back beside the admin's.
    await _controller(db, settings).tick()
    restarted = await _node(db, host.name)
    assert restarted.id == node.id
    assert restarted.labels["zone"] == "a"
    assert restarted.labels[HOSTNAME_LABEL] == host.name
    assert restarted.schedule == "cordoned"


async def test_deleted_node_registers_again(db: Database, settings: Settings, client: httpx.AsyncClient) -> None:
    controller = _controller(db, settings)
    await controller.tick()
    name = detect_host().name
    admin = await admin_login(client)
    node = await _node(db, name)
    assert (await client.delete(f"/api/v1/nodes/{node.id}", headers=admin.headers)).status_code == 204
    assert (await client.get(f"/api/v1/nodes/{node.id}", headers=admin.headers)).status_code == 404
    await controller.tick()
    back = await _node(db, name)  # (SQLite may give it the same id again)
    assert back.created_at > node.created_at


async def test_silent_nodes_become_not_ready_and_recover(db: Database, settings: Settings) -> None:
    now = utcnow()
    other = HostInfo(name="gpu-07", address="10.0.0.7", executor="local", cpu_milli=64000, memory_bytes=512 * GIB)
    async with db.write() as session:
        await inventory.register_host(session, other, now=now - timedelta(seconds=120))
    fresh = HostInfo(name="gpu-08", address="10.0.0.8", executor="local", cpu_milli=64000, memory_bytes=512 * GIB)
    async with db.write() as session:
        await inventory.register_host(session, fresh, now=now - timedelta(seconds=10))
        manual = Node(name="manual-1", executor="manual", cpu_milli=1000, memory_bytes=GIB)  # never heartbeats
        session.add(manual)

    # Any replica marks them, whether or not it registers a host itself.
    controller = _controller(db, settings, register_host=False, node_lost_after_s=60.0)
    await controller.tick()
    assert (await _node(db, "gpu-07")).state == "not_ready"
    assert (await _node(db, "gpu-08")).state == "ready"
    assert (await _node(db, "manual-1")).state == "ready"
    await controller.tick()  # idempotent: marked once, audited once
    async with db.read() as session:
        events = list((await session.scalars(select(AuditEvent).where(AuditEvent.action == "node.not_ready"))).all())
    assert [e.details["name"] for e in events] == ["gpu-07"]

    # Its heartbeat comes back: ready again.
    async with db.write() as session:
        assert await inventory.heartbeat(session, "gpu-07")
    assert (await _node(db, "gpu-07")).state == "ready"
    async with db.write() as session:
        assert not await inventory.heartbeat(session, "no-such-node")


async def test_registration_creates_missing_nvidia_types(db: Database) -> None:
    gpus = tuple(AcceleratorInfo(i, "nvidia-h100", "nvidia", "NVIDIA H100 80GB HBM3", 80 * GIB) for i in range(2))
    host = HostInfo(
        name="dgx-01",
        address="dgx-01",
        executor="local",
        cpu_milli=224000,
        memory_bytes=2048 * GIB,
        accelerators=gpus,
        labels={HOSTNAME_LABEL: "dgx-01", "aicenter.io/accelerator": "nvidia-h100"},
    )
    async with db.write() as session:
        await inventory.register_host(session, host)
    async with db.write() as session:  # a second registration neither duplicates nor changes anything
        await inventory.register_host(session, host)
    async with db.read() as session:
        types = list((await session.scalars(select(AcceleratorType))).all())
        node = await session.scalar(select(Node).where(Node.name == "dgx-01"))
        registrations = list(
            (await session.scalars(select(AuditEvent).where(AuditEvent.action == "node.register"))).all()
        )
    assert [(t.name, t.vendor, t.memory_bytes) for t in types] == [("nvidia-h100", "nvidia", 80 * GIB)]
    assert node is not None
    assert node.accelerators == [
        {
            "index": i,
            "type": "nvidia-h100",
            "model": "NVIDIA H100 80GB HBM3",
            "memory_bytes": 80 * GIB,
            "nvlink_domain": None,
        }
        for i in range(2)
    ]
    assert len(registrations) == 1
