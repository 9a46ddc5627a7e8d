"""Metric series upkeep: the ingest of what jobs report, and retention.

Both run on every replica and do their work on one at a time through named leases, as the store GC does.
``metrics-ingest`` is held for three intervals and renewed every round, so one replica keeps ingesting while it
lives and another takes over within 30 s (at the default 10 s interval) when it dies; ``metrics-prune`` is held
for one prune interval after a run, so pruning happens once per interval across all replicas.
"""

from __future__ import annotations

import asyncio
import logging

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.services import monitoring

log = logging.getLogger(__name__)

INGEST_LEASE = "metrics-ingest"
PRUNE_LEASE = "metrics-prune"


class MetricsIngestController(Controller):
    """Copies new ``metrics.jsonl`` lines of running and lately finished jobs into ``report.*`` series.

    Args:
        db: The database.
        settings: ``jobs_path`` and ``metrics_ingest_interval_s`` are read.
        owner: The lease owner name (default ``host:pid``).
    """

    name = "metrics-ingest"

    def __init__(self, db: Database, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.jobs_path = settings.jobs_path
        self.interval_s = settings.metrics_ingest_interval_s
        self.owner = owner or replica_name()
        self.lease: leases.NamedLease | None = None
        self.points = 0  # stored since start (tests and logs)

    async def tick(self) -> None:
        ttl_s = self.interval_s * 3
        if self.lease is not None:
            self.lease = await leases.renew(self.db, self.lease, ttl_s)
        if self.lease is None:
            self.lease = await leases.acquire(self.db, INGEST_LEASE, self.owner, ttl_s)
            if self.lease is None:
                return  # another replica ingests
        async with self.db.read() as session:
            targets = await monitoring.ingest_targets(session)
        for target in targets:
            chunks = await asyncio.to_thread(monitoring.read_reported, self.jobs_path, target)
            if not chunks:
                continue
            async with self.db.write() as session:
                if not await leases.renew_in(session, self.lease, ttl_s=ttl_s):
                    self.lease = None
                    return  # lost the lease mid-round: the new holder reads from the committed cursors
                self.points += await monitoring.store_reported(session, target.job_id, chunks)

    async def stop(self) -> None:
        await super().stop()
        if self.lease is not None:
            await leases.release(self.db, self.lease)
            self.lease = None


class MetricsPruneController(Controller):
    """Deletes points past their tier's retention once per ``metrics_prune_interval_s`` across all replicas."""

    name = "metrics-prune"

    def __init__(self, db: Database, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.retention = monitoring.Retention.from_settings(settings)
        self.interval_s = settings.metrics_prune_interval_s
        self.owner = owner or replica_name()
        self.last: monitoring.PruneResult | None = None

    async def tick(self) -> None:
        lease = await leases.acquire(self.db, PRUNE_LEASE, self.owner, ttl_s=self.interval_s)
        if lease is None:
            return
        async with self.db.write() as session:
            self.last = await monitoring.prune_series(session, self.retention)
        if self.last.points or self.last.rollups or self.last.series:
            log.info("metrics prune: %s", self.last)
        await leases.renew(self.db, lease, ttl_s=self.interval_s)


def build_ingest(ctx: AppContext) -> MetricsIngestController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return MetricsIngestController(ctx.db, ctx.settings)


def build_prune(ctx: AppContext) -> MetricsPruneController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return MetricsPruneController(ctx.db, ctx.settings)
