"""The serving gateway in the API server: its control-plane callables, its load reports, and the ASGI middleware
that sends ``/serve/...`` to it ahead of FastAPI's routing (the per-request budget is about a millisecond).

What it reads and writes is never per request:

- the route table (``services.serving.load_route_table``) every ``serving_gateway_refresh_s`` and at once on
  ``events.routes_changed`` (a change made through this process);
- a user token through the API's token cache, plus the user's workspaces (cached by the gateway);
- an activation (``services.serving.activate_revision``) when a request waits for a revision with no replica;
- every second, one batch of load reports (``services.serving.record_load``), only while something happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aicenter.context import AppContext
from aicenter.core.errors import Unauthenticated
from aicenter.core.roles import TokenKind
from aicenter.core.serving.routing import RevisionLoad, RouteTable, TokenInfo
from aicenter.events import routes_changed
from aicenter.gateway.serving import PREFIX, GatewayMetrics, ServingGateway
from aicenter.services import serving

__all__ = ["ServingMiddleware", "ServingPlane"]

log = logging.getLogger(__name__)

REPORT_EVERY_S = 1.0

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Any, Any], Awaitable[None]]


class ServingPlane:
    """This process's serving gateway and its load reporter."""

    def __init__(self, ctx: AppContext) -> None:
        self.ctx = ctx
        self.source = f"{socket.gethostname()}:{os.getpid()}"[:64]
        telemetry = ctx.telemetry
        self.gateway = ServingGateway(
            load_routes=self._load_routes,
            resolve_token=self._resolve_token,
            activate=self._activate,
            refresh_s=ctx.settings.serving_gateway_refresh_s,
            metrics=GatewayMetrics(requests=telemetry.service_requests, duration=telemetry.service_duration),
        )
        self._reporter: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self._reported_ready: frozenset[int] = frozenset()
        self._was_busy: set[int] = set()

    async def _load_routes(self) -> RouteTable:
        async with self.ctx.db.read() as session:
            return await serving.load_route_table(session, secret_key=self.ctx.secret_key)

    async def _resolve_token(self, raw: str) -> TokenInfo | None:
        try:
            actor, kind = await self.ctx.tokens.verify(self.ctx.db, raw)
        except Unauthenticated:
            return None
        if kind == TokenKind.JOB:
            return None  # a job token reads its own job, nothing else
        async with self.ctx.db.read() as session:
            workspaces = await serving.member_workspaces(session, actor.user_id)
        return TokenInfo(actor.user_id, workspaces)

    async def _activate(self, revision_id: int) -> None:
        async with self.ctx.db.write() as session:
            started = await serving.activate_revision(session, revision_id)
        if started:
            log.info("serving: revision %s activated from zero", revision_id)
            self.gateway.refresh_soon()

    async def start(self) -> None:
        await self.gateway.start()
        self._unsubscribe = routes_changed.subscribe(self.gateway.refresh_soon)
        self._reporter = asyncio.get_running_loop().create_task(self._report_loop(), name="serving-load")

    async def close(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        if self._reporter is not None:
            self._reporter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reporter
        await self.gateway.close()

    async def _report_loop(self) -> None:
        while True:
            await asyncio.sleep(REPORT_EVERY_S)
            try:
                await self.report()
            except Exception:  # a lost report only delays the autoscaler; the next one goes on
                log.exception("serving: the load report could not be written")

    async def report(self) -> None:
        """Write what the gateway saw since the last report: revisions with activity, one zero report after
        activity ends (the autoscaler's windows must see it end), and replicas newly seen ready."""
        loads = self.gateway.take_load()
        busy = {rid for rid, load in loads.items() if _busy(load)}
        wanted = {rid: load for rid, load in loads.items() if rid in busy or rid in self._was_busy}
        ready = self.gateway.ready_replicas()
        new_ready = ready - self._reported_ready
        self._was_busy = busy
        if not wanted and not new_ready:
            return
        async with self.ctx.db.write() as session:
            await serving.record_load(session, self.source, wanted, new_ready)
        self._reported_ready = ready


def _busy(load: RevisionLoad) -> bool:
    return bool(load.requests or load.held or load.peak_concurrency or load.average_concurrency > 0)


class ServingMiddleware:
    """Sends ``/serve/...`` to the serving gateway, everything else to the app."""

    def __init__(self, app: ASGIApp, plane: ServingPlane) -> None:
        self.app = app
        self.plane = plane

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket") and scope["path"].startswith(PREFIX):
            await self.plane.gateway(scope, receive, send)
            return
        await self.app(scope, receive, send)
