"""The serving controller: drives every service's revisions, traffic and replicas toward its spec and its load.

One server replica at a time holds the ``serving`` lease; each tick (every second, and at once when a service
changed in this process) it

1. **loads** every service with a live revision, the gateways' load reports of the last stable window, and the
   running replicas no one has seen ready yet (``services.serving.load_controls``);
2. **observes** those replicas' readiness with one HTTP GET each (the model server's ``/v2/health/ready``, or a
   custom command's ``ready_path``); a replica is ready once it answered 200;
3. **decides** per service with ``core.serving.reconcile.decide_service`` (pure): revision readiness and
   failure, traffic moves, the autoscaler's replicas, drains and stops;
4. **applies** each service's decision in one transaction (``services.serving.apply_decision``).

The autoscaler's memory (panic mode, the last request) lives here, per revision; a controller that takes the lease
over starts from the database's ``last_request_at``, which only delays a scale-down.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import WakeableController, replica_name
from aicenter.core.clock import utcnow
from aicenter.core.jobs.serving import SERVE_TOKEN_HEADER
from aicenter.core.serving.autoscale import ScaleState
from aicenter.core.serving.reconcile import decide_service
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.events import routes_changed
from aicenter.services import serving

__all__ = ["ServingController", "build"]

log = logging.getLogger(__name__)

LEASE_NAME = "serving"
PROBE_TIMEOUT_S = 1.0


class ServingController(WakeableController):
    """Reconciles services every ``serving_interval_s`` on one replica."""

    name = "serving"

    def __init__(
        self, db: Database, settings: Settings, *, owner: str | None = None, secret_key: str | None = None
    ) -> None:
        super().__init__(routes_changed)
        self.db = db
        # Derives the replicas' serve tokens, which the probes send: the key that planned them (the server's).
        self.secret_key = settings.resolve_secret_key() if secret_key is None else secret_key
        self.interval_s = settings.serving_interval_s
        self.owner = owner or replica_name()
        self.scale_states: dict[int, ScaleState] = {}
        self._client: httpx.AsyncClient | None = None

    async def tick(self) -> None:
        lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=max(5.0, self.interval_s * 5))
        if lease is None:
            self.scale_states.clear()  # another replica decides; its memory is what counts
            return
        await self.run_once()

    async def run_once(self) -> None:
        now = utcnow()
        clock = time.monotonic()
        async with self.db.read() as session:
            controls = await serving.load_controls(session, now=now, clock=clock, secret_key=self.secret_key)
        if not controls:
            self.scale_states.clear()
            return
        ready = await self._probe([p for c in controls for p in c.probes])
        if ready:
            async with self.db.write() as session:
                await serving.mark_ready(session, ready)
            async with self.db.read() as session:
                controls = await serving.load_controls(session, now=now, clock=clock, secret_key=self.secret_key)
        live: set[int] = set()
        for control in controls:
            decision = decide_service(
                control.snapshot,
                now=now,
                clock=clock,
                load=control.load,
                held=control.held,
                scale_states=self.scale_states,
            )
            self.scale_states.update(decision.scale_states)
            live.update(r.id for r in control.snapshot.revisions)
            try:
                async with self.db.write() as session:
                    await serving.apply_decision(session, control.snapshot.id, decision, now=now)
            except Exception:  # one service's trouble must not stop the others; the next tick retries
                log.exception("service %s: its decision could not be applied", control.snapshot.id)
        for revision_id in set(self.scale_states) - live:
            del self.scale_states[revision_id]

    async def _probe(self, probes: list[serving.Probe]) -> list[int]:
        """The replica jobs among ``probes`` that answer their readiness path with 200."""
        if not probes:
            return []
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=PROBE_TIMEOUT_S, trust_env=False)
        client = self._client

        async def one(probe: serving.Probe) -> int | None:
            try:
                response = await client.get(
                    probe.url, headers={SERVE_TOKEN_HEADER: probe.token} if probe.token else None
                )
            except httpx.HTTPError:
                return None
            return probe.job_id if response.status_code == 200 else None

        results = await asyncio.gather(*(one(p) for p in probes))
        return [r for r in results if r is not None]

    async def stop(self) -> None:
        await super().stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def build(ctx: AppContext) -> ServingController:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return ServingController(ctx.db, ctx.settings, secret_key=ctx.secret_key)
