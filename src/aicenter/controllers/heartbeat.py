"""This host's node heartbeat, and marking nodes that stopped heartbeating as not ready.

Every replica runs it. With ``settings.register_host`` the first tick detects this host (CPUs, memory, GPUs)
and registers it as a node of the ``local`` executor; later ticks refresh its ``last_heartbeat_at`` (and
register it again if an admin deleted the node). Every tick, on every replica, marks ready nodes whose last
heartbeat is older than ``settings.node_lost_after_s`` as ``not_ready``; that update is idempotent.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller
from aicenter.db.engine import Database
from aicenter.executors import HostInfo
from aicenter.executors.local.host import detect_host
from aicenter.services import inventory

log = logging.getLogger(__name__)


class HeartbeatController(Controller):
    """Registers this host, heartbeats its node, and marks silent nodes not ready.

    Args:
        db: The database.
        settings: ``register_host``, ``heartbeat_s`` and ``node_lost_after_s`` are read.
        detect: How to detect this host (the local executor's detection by default).
    """

    name = "heartbeat"

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        detect: Callable[[], HostInfo] = detect_host,
    ) -> None:
        super().__init__()
        self.db = db
        self.settings = settings
        self.interval_s = settings.heartbeat_s
        self._detect = detect
        self.host: HostInfo | None = None  # set once this host is registered

    async def prepare(self) -> None:
        """Register this host before the server answers: a job submitted right after ``aicenter up`` would
        otherwise find no node in its pool (the first tick ran only once the other controllers had started)."""
        if self.settings.register_host and "local" in self.settings.executors:
            try:
                await self._heartbeat()
            except Exception:
                log.exception("registering this host failed; the heartbeat retries it")

    async def tick(self) -> None:
        if self.settings.register_host and "local" in self.settings.executors:
            await self._heartbeat()
        async with self.db.write() as session:
            lost = await inventory.mark_lost_nodes(session, lost_after_s=self.settings.node_lost_after_s)
        if lost:
            log.warning(
                "nodes without a heartbeat for %.0f s, now not ready: %s", self.settings.node_lost_after_s, lost
            )

    async def _heartbeat(self) -> None:
        if self.host is not None:
            async with self.db.write() as session:
                if await inventory.heartbeat(session, self.host.name):
                    return
            log.info("node %s was deleted; registering this host again", self.host.name)
        # Detection reads /proc and NVML (tens of ms, more on a busy GPU host): off the event loop and outside
        # any transaction.
        host = await asyncio.to_thread(self._detect)
        async with self.db.write() as session:
            node = await inventory.register_host(session, host)
        if self.host is None:
            log.info(
                "registered this host as node %s: %s CPUs, %d bytes of memory, %d accelerators",
                node.name,
                node.cpu_milli / 1000,
                node.memory_bytes,
                len(host.accelerators),
            )
        self.host = host


def build(ctx: AppContext) -> HeartbeatController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return HeartbeatController(ctx.db, ctx.settings)
