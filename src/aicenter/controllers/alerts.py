"""The alert evaluator and the notification delivery loop.

The evaluator runs every ``alert_eval_interval_s`` (15 s) on every replica, but a named lease
(``alert-evaluator``) held for one interval lets one replica evaluate per interval. It only writes rows: alerts,
events and the outbox. Delivery is a separate loop so that a webhook that hangs (cut after 5 s) never delays an
evaluation; it wakes when an evaluation in this process queued notifications, and otherwise every 5 s, and works on
leased outbox rows, so several replicas may run it at once without sending twice.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, WakeableController, replica_name
from aicenter.core.alerts import Element
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.events import alerts_outbox
from aicenter.services import alerts, monitoring

log = logging.getLogger(__name__)

LEASE_NAME = "alert-evaluator"
DELIVERY_INTERVAL_S = 5.0  # how soon a retry due (or a row queued by another replica) is picked up
# A series whose newest point is older than this is no longer current: a node that stopped sampling must not keep
# an alert firing on its last value (node-down says it is gone). Four sampler intervals of 15 s.
SERIES_MAX_AGE_S = 60.0


async def read_series(session: AsyncSession, names: Sequence[str]) -> list[tuple[str, Element]]:
    """The samplers' latest values of ``names`` (the platform's view: every workspace), as alert elements."""
    values = await monitoring.latest_values(session, None, names=list(names), max_age_s=SERIES_MAX_AGE_S)
    return [(v.name, Element(dict(v.labels), v.value, v.workspace_id, _ids(v))) for v in values]


def _ids(value: monitoring.LatestValue) -> dict[str, object]:
    """The node and job a series is about, for the event an alert on it records."""
    return {k: i for k, i in (("node_id", value.node_id), ("job_id", value.job_id)) if i is not None}


class AlertEvaluator(Controller):
    """Evaluates every alert rule at most once per ``alert_eval_interval_s`` across all replicas.

    Args:
        db: The database.
        settings: ``alert_eval_interval_s`` is read.
        series: Reads the samplers' latest values (None: platform facts only).
        owner: The lease owner name (default ``host:pid``).
    """

    name = "alert-evaluator"

    def __init__(
        self,
        db: Database,
        settings: Settings,
        *,
        series: alerts.SeriesReader | None = None,
        owner: str | None = None,
    ) -> None:
        super().__init__()
        self.db = db
        self.interval_s = settings.alert_eval_interval_s
        self.series = series
        self.owner = owner or replica_name()
        self.last: alerts.EvaluationResult | None = None

    async def tick(self) -> None:
        # The lease is a little shorter than the interval, so this replica's next tick finds it free again;
        # a replica that died hands evaluation to another within one interval.
        lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self.interval_s * 0.9)
        if lease is None:
            return
        async with self.db.write() as session:
            self.last = await alerts.evaluate_rules(session, series=self.series)
        if self.last.fired or self.last.resolved:
            log.info(
                "alerts: %d fired, %d resolved, %d notifications queued",
                len(self.last.fired),
                len(self.last.resolved),
                self.last.queued,
            )


class AlertDelivery(WakeableController):
    """Sends due notifications (webhook, e-mail); woken when an evaluation queued some."""

    name = "alert-delivery"

    def __init__(self, db: Database, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__(alerts_outbox)
        self.db = db
        self.settings = settings
        self.interval_s = DELIVERY_INTERVAL_S
        self.owner = owner or replica_name()

    async def tick(self) -> None:
        # A read first: claiming is a write transaction (on SQLite the database's one writer), not worth taking
        # every 5 s on every replica when nothing is due, which is nearly always.
        due_in = await alerts.next_due_in_s(self.db)
        if due_in is None or due_in > 0:
            return
        await alerts.deliver_due(self.db, self.settings, owner=self.owner)


def build_evaluator(ctx: AppContext) -> AlertEvaluator:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return AlertEvaluator(ctx.db, ctx.settings, series=read_series)


def build_delivery(ctx: AppContext) -> AlertDelivery:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return AlertDelivery(ctx.db, ctx.settings)
