"""The nodes of the Ray and Slurm engines, read into the inventory.

Every ``engine_sync_s`` each engine executor other than ``local`` is asked for its usable nodes
(``Executor.nodes``); ``inventory.sync_engine_hosts`` registers those (hardware, accelerators, labels, topology,
a fresh heartbeat) and marks the engine's other nodes not ready, so the scheduler stops placing work there as soon
as the engine says a node died, went down or was drained. The engine's own health checks decide that (Ray's GCS
heartbeats, slurmctld's node states): the platform does not probe nodes itself.

An engine that cannot be reached changes nothing: "I could not ask" is not "every node is gone". Every server
replica runs this; the updates are idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller
from aicenter.db.engine import Database
from aicenter.executors import Executor
from aicenter.services import inventory

log = logging.getLogger(__name__)


class EngineNodesController(Controller):
    """Keeps the nodes of every non-local executor in step with its engine.

    Args:
        db: The database.
        settings: ``engine_sync_s`` is read.
        executors: The executors by name; ``local`` is skipped (the heartbeat controller registers this host).
    """

    name = "engine-nodes"

    def __init__(self, db: Database, settings: Settings, executors: Mapping[str, Executor]) -> None:
        super().__init__()
        self.db = db
        self.interval_s = settings.engine_sync_s
        self.executors = {name: e for name, e in executors.items() if name != "local"}
        self._unreachable: set[str] = set()

    async def tick(self) -> None:
        for name, executor in self.executors.items():
            await self.sync(name, executor)

    async def sync(self, name: str, executor: Executor) -> None:
        """Read one engine's nodes into the inventory (the tick, for one engine)."""
        try:
            await sync_engine(self.db, name, executor)
        except Exception as exc:  # the engine's own errors, whatever their type: retried next tick
            if name not in self._unreachable:
                log.warning("executor %s: cannot read its nodes, inventory left as it was: %s", name, exc)
                self._unreachable.add(name)
            return
        if name in self._unreachable:
            log.info("executor %s: reachable again", name)
            self._unreachable.discard(name)


async def sync_engine(db: Database, name: str, executor: Executor) -> None:
    """Read one engine's nodes into the inventory now. Also called by the job reconciler when an executor
    reports a replica's node lost, so that the job's restart is never placed on that node again.

    Raises:
        Exception: Whatever the engine raised when asked for its nodes; nothing was changed then.
    """
    hosts = await executor.nodes()
    async with db.write() as session:
        ready, gone = await inventory.sync_engine_hosts(session, name, hosts)
    if ready:
        log.info("executor %s: nodes ready: %s", name, ", ".join(ready))
    if gone:
        log.warning("executor %s: nodes the engine no longer reports usable, now not ready: %s", name, gone)


def build(ctx: AppContext) -> EngineNodesController | None:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``; None when only ``local`` runs."""
    if not any(name != "local" for name in ctx.executors):
        return None
    return EngineNodesController(ctx.db, ctx.settings, ctx.executors)
