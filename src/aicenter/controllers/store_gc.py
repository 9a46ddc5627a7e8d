"""Store garbage collection: expire abandoned uploads, then delete blobs nothing references.

Every replica runs the loop, but a named lease (``store-gc``) held for ``gc_interval_s`` lets one replica collect
per interval: the others find the lease held and skip. The lease is not released after a run, so the next
collection, on whichever replica, comes one interval later.
"""

from __future__ import annotations

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.services import catalog
from aicenter.storage import BlobStore

LEASE_NAME = "store-gc"


class StoreGcController(Controller):
    """Runs ``catalog.run_gc`` at most once per ``gc_interval_s`` across all replicas.

    Args:
        db: The database (for the lease and the references).
        store: The blob store to collect.
        settings: ``gc_interval_s``, ``gc_grace_s`` and ``build_timeout_s`` are read.
        owner: The lease owner name (default ``host:pid``).
    """

    name = "store-gc"

    def __init__(self, db: Database, store: BlobStore, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.store = store
        self.settings = settings
        self.interval_s = settings.gc_interval_s
        self.owner = owner or replica_name()
        self.last: catalog.GcResult | None = None

    async def tick(self) -> None:
        lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self.interval_s)
        if lease is None:
            return  # another replica collected within this interval
        self.last = await catalog.run_gc(self.db, self.store, self.settings)
        # Hold the lease a full interval from the end of this run, however long the run took.
        await leases.renew(self.db, lease, ttl_s=self.interval_s)


def build(ctx: AppContext) -> StoreGcController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return StoreGcController(ctx.db, ctx.store, ctx.settings)
