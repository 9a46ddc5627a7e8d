"""The billing meter: charges running copies for their machine time every ``billing_interval_s`` (60 s) and
closes each copy's charges at its end (``services.billing.meter``).

One server replica meters at a time: a named lease (``billing-meter``) held for three intervals and renewed in
every transaction that writes charges, so a replica that lost the lease mid-pass writes nothing, and another
takes over within three intervals of the holder's death. The lease is an economy, not the guarantee: the
ledger's unique idempotency keys and the meter rows' guarded updates keep charges exactly once even when two
passes overlap (a lease that expired during a stall), and a crash mid-pass loses nothing because each batch
commits its entries, meter rows and balances together, and the next pass starts from the meter rows.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.core.billing_policy import Action
from aicenter.core.clock import utcnow
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.services import billing, jobs, serving

log = logging.getLogger(__name__)

LEASE_NAME = "billing-meter"
_LEASE_INTERVALS = 3.0
BATCH = 5000  # copies per transaction: a pass over 10,000 running copies is 2 write transactions


class BillingController(Controller):
    """Runs ``services.billing.meter`` every ``billing_interval_s`` while holding the ``billing-meter`` lease.

    Args:
        db: The database.
        settings: ``billing_interval_s`` is read.
        owner: The lease owner name (default ``host:pid``).
    """

    name = "billing-meter"

    def __init__(self, db: Database, settings: Settings, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.interval_s = settings.billing_interval_s
        self.owner = owner or replica_name()
        self.lease: leases.NamedLease | None = None
        self.last: billing.MeterResult | None = None
        # Half an interval: a pass charges every running copy even when ticks come a little early; a copy is
        # still charged at most about once per interval, however often something else runs a pass.
        self.min_period = timedelta(seconds=self.interval_s / 2)

    @property
    def _ttl_s(self) -> float:
        return self.interval_s * _LEASE_INTERVALS

    async def tick(self) -> None:
        if self.lease is None:
            self.lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self._ttl_s)
            if self.lease is None:
                return
        if await self.run_pass() is not None:
            await self.run_policies()

    async def run_pass(self) -> billing.MeterResult | None:
        """One pass over every open copy, in batches; None when the lease was lost (nothing more written)."""
        assert self.lease is not None
        now, after, total = utcnow(), 0, billing.MeterResult()
        while True:
            try:
                async with self.db.write() as session:
                    if not await leases.renew_in(session, self.lease, ttl_s=self._ttl_s):
                        log.info("billing: lease lost to another replica; not metering")
                        self.lease = None
                        return None
                    result = await billing.meter(
                        session, now, min_period=self.min_period, after_replica_id=after, limit=BATCH
                    )
            except billing.MeterRaced as exc:  # raised out of the transaction: it rolled back whole
                log.warning("billing: %s; the next pass charges it", exc)
                return None
            total.add(result)
            if not result.more or result.last_replica_id is None:
                break
            after = result.last_replica_id
        self.last = total
        if total.entries:
            log.info("billing: %d charges (%d copies closed), %d cents", total.entries, total.closed, total.cents)
        return total

    async def run_policies(self) -> list[billing.Transition] | None:
        """After metering: move every workspace with a billing policy one step (warn, stop after the grace,
        recover), carrying out its stops in the same transaction as its new phase, so a crash neither loses a
        stop nor writes its events twice. None when the lease was lost."""
        assert self.lease is not None
        async with self.db.write() as session:
            if not await leases.renew_in(session, self.lease, ttl_s=self._ttl_s):
                self.lease = None
                return None
            transitions = await billing.evaluate_policies(session, utcnow())
            for t in transitions:
                if Action.STOP in t.decision.actions:
                    stopped = await jobs.stop_for_arrears(session, t.workspace_id)
                    services = await serving.stop_for_arrears(session, t.workspace_id, t.workspace)
                    log.warning(
                        "billing: workspace %s in arrears: stopping jobs %s and services %s",
                        t.workspace, stopped, services,
                    )  # fmt: skip
        return transitions


def build(ctx: AppContext) -> BillingController | None:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES`` (none with the interval set to 0)."""
    if ctx.settings.billing_interval_s == 0:
        return None
    return BillingController(ctx.db, ctx.settings)
