"""The Prometheus exposition at ``GET /metrics``: the HTTP middleware, the platform collector and the route.

Every app has a registry of its own (not prometheus_client's global one), so several apps in one process (the
tests) never share or collide on series. Names follow Prometheus' conventions: base units (seconds, bytes),
``_total`` on counters, ``_info``-style build information, and no high-cardinality labels: a request is counted
under its route template (``/api/v1/jobs/{job_id}``), never its path, and jobs by workspace, never by id.
docs/monitoring.md lists the metrics.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hmac
import logging
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from aicenter import __version__
from aicenter.api.deps import Ctx, authenticate, bearer_token
from aicenter.context import AppContext
from aicenter.core.errors import Forbidden, Unauthenticated
from aicenter.services import monitoring

METRICS_PATH = "/metrics"
# The classic text format, which every Prometheus (Debian's 2.x included) reads; newer prometheus_client
# releases default to announcing version 1.0.0, which older servers do not know.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Latency buckets for an API whose reads answer in milliseconds and whose uploads may take many seconds.
_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
UNMATCHED_ROUTE = "unmatched"  # a path no route matched (404s): one label value, not one per path
# The refresher re-reads the platform's counts while a scrape came within this (4 x a 15 s scrape interval).
REFRESH_WHILE_SCRAPED_S = 60.0
log = logging.getLogger(__name__)


class PlatformGauges:
    """The database-derived gauges: read from the snapshot and rendered to text once per refresh, so scrapes
    within ``metrics_cache_s`` only render the in-memory metrics.

    Rendered here rather than by prometheus_client's ``generate_latest``, which validates and escapes every
    label of every sample: a center of 50 nodes with 8 accelerators exposes ~3,000 node and device samples, and
    on this 2-core machine under a load of 7 that took 28 us a sample (67 ms a scrape) against 4 us here, where
    a label set's text is built once per process (nodes and devices repeat every scrape). Only gauges, whose
    label names are ours and fixed, go this way; the registry keeps the counters and histograms.
    """

    def __init__(self) -> None:
        self.snapshot = monitoring.PlatformSnapshot()
        self.text = render_gauges(self.gauges())
        self.taken_at = float("-inf")  # monotonic; -inf: never
        self.lock = asyncio.Lock()
        self.scraped_at = float("-inf")  # monotonic: the last scrape
        self.refresher: asyncio.Task[None] | None = None

    async def serve(self, ctx: AppContext) -> None:
        """Make ``text`` fit to serve, without a database read on the scrape's path once the first is done.

        The first scrape waits for a read. Later ones serve the text in memory, and a refresher task re-reads
        every ``metrics_cache_s`` for as long as scrapes keep coming (one within ``REFRESH_WHILE_SCRAPED_S``),
        so the gauges are at most that old plus one read: a scrape costs the render of the in-memory metrics
        (~3 ms) whatever the database holds, against ~55 ms with the read on its path at 10,000 jobs. An
        unscraped server reads nothing.
        """
        self.scraped_at = time.monotonic()
        if self.taken_at == float("-inf"):
            await self.refresh(ctx, force=True)  # a refresher's read begun earlier must not stand in for it
        if ctx.settings.metrics_cache_s > 0 and (self.refresher is None or self.refresher.done()):
            self.refresher = asyncio.create_task(self._refresh_while_scraped(ctx), name="metrics-refresher")
        elif ctx.settings.metrics_cache_s == 0:
            await self.refresh(ctx)  # no cache: every scrape reads (the benchmark's uncached figure)

    async def _refresh_while_scraped(self, ctx: AppContext) -> None:
        while time.monotonic() - self.scraped_at < REFRESH_WHILE_SCRAPED_S:
            await asyncio.sleep(max(0.0, self.taken_at + ctx.settings.metrics_cache_s - time.monotonic()))
            try:
                await self.refresh(ctx)
            except Exception:  # the database away for a moment: serve the last text, try again next interval
                log.exception("reading the platform's counts for /metrics failed")
                await asyncio.sleep(ctx.settings.metrics_cache_s)

    async def close(self) -> None:
        """Stop the refresher (the app's shutdown, before the database goes)."""
        if self.refresher is not None:
            self.refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.refresher

    async def refresh(self, ctx: AppContext, *, force: bool = False) -> None:
        """Read the platform's counts unless the last read is younger than ``metrics_cache_s`` (or ``force``)."""
        async with self.lock:  # concurrent scrapes wait for one read instead of each running their own
            if not force and time.monotonic() - self.taken_at < ctx.settings.metrics_cache_s:
                return
            async with ctx.db.read() as session:
                self.snapshot = await monitoring.snapshot(session)
            self.text = render_gauges(self.gauges())
            self.taken_at = time.monotonic()

    def gauges(self) -> Iterator[Gauge]:
        """The families of the current snapshot."""
        s = self.snapshot
        yield _gauge("aicenter_jobs", "Jobs by status and workspace.", ["status", "workspace"], s.jobs)
        yield _gauge("aicenter_queue_jobs", "Jobs queued for the scheduler, by pool.", ["pool"], s.queued)
        yield _gauge(
            "aicenter_queue_wait_seconds",
            "How long the oldest queued job of the pool has waited since its submission.",
            ["pool"],
            s.queue_wait_s,
        )
        yield _gauge("aicenter_nodes", "Nodes by state and executor.", ["state", "executor"], s.nodes)
        yield _gauge(
            "aicenter_accelerators",
            "Accelerators by type, allocated to replicas or free.",
            ["type", "state"],
            s.accelerators,
        )
        yield _gauge(
            "aicenter_cpu_cores", "CPU cores allocated to replicas, and the nodes' capacity.", ["state"], s.cpu_cores
        )
        yield _gauge(
            "aicenter_store_bytes", "Bytes of the distinct blobs catalog versions list.", [], {(): s.store_bytes}
        )
        yield _gauge("aicenter_store_objects", "Distinct blobs catalog versions list.", [], {(): s.store_objects})
        yield from _cluster_families(s.cluster)


def _cluster_families(c: monitoring.ClusterSnapshot) -> Iterator[Gauge]:
    """Per node, per workspace and per lease: capacity and allocation from the registry, use as sampled."""
    yield _gauge(
        "aicenter_node_info", "A node's executor and state; always 1.", ["node", "executor", "state"], c.node_info
    )
    yield _gauge(
        "aicenter_node_pool_info",
        "A pool the node is in (pools overlap); always 1.",
        ["node", "pool"],
        c.node_pools,
    )
    yield _gauge("aicenter_node_cpu_cores", "CPU cores of the node.", ["node"], c.node_cpu_cores)
    yield _gauge(
        "aicenter_node_cpu_cores_allocated",
        "CPU cores allocated to replicas on the node.",
        ["node"],
        c.node_cpu_cores_allocated,
    )
    yield _gauge("aicenter_node_memory_bytes", "Memory of the node.", ["node"], c.node_memory_bytes)
    yield _gauge(
        "aicenter_node_memory_allocated_bytes",
        "Memory allocated to replicas on the node.",
        ["node"],
        c.node_memory_allocated_bytes,
    )
    yield _gauge("aicenter_node_accelerators", "Accelerators of the node.", ["node", "type"], c.node_accelerators)
    yield _gauge(
        "aicenter_node_accelerators_allocated",
        "Accelerators allocated to replicas on the node, by type.",
        ["node", "type"],
        c.node_accelerators_allocated,
    )
    yield _gauge(
        "aicenter_workspace_cpu_cores_allocated",
        "CPU cores allocated to the workspace's replicas.",
        ["workspace"],
        c.workspace_cpu_cores_allocated,
    )
    yield _gauge(
        "aicenter_workspace_accelerators_allocated",
        "Accelerators allocated to the workspace's replicas, by type.",
        ["workspace", "type"],
        c.workspace_accelerators_allocated,
    )
    yield _gauge(
        "aicenter_controller_lease_held",
        "Whether a live holder has the controller's named lease (1) or not (0).",
        ["lease"],
        {lease: 1 if holder else 0 for lease, holder in c.leases.items()},
    )
    yield _gauge(
        "aicenter_controller_lease_holder",
        "The replica (host:pid) that holds the controller's named lease; always 1.",
        ["lease", "holder"],
        {(lease, holder): 1 for lease, holder in c.leases.items() if holder},
    )
    for family in monitoring.USED_FAMILIES:
        yield _gauge(family.metric, family.help, list(family.labels), c.used.get(family.metric, {}))
    for metric, doc in monitoring.WORKSPACE_USED.values():
        yield _gauge(metric, doc, ["workspace"], c.used.get(metric, {}))


@dataclass(frozen=True, slots=True)
class Gauge:
    """A gauge family: ``values`` maps a label value (one label) or a tuple of them (in ``labels`` order)."""

    name: str
    doc: str
    labels: Sequence[str]
    values: Mapping[Any, float]


def _gauge(name: str, doc: str, labels: list[str], values: Mapping[Any, float]) -> Gauge:
    return Gauge(name, doc, labels, values)


@functools.lru_cache(maxsize=65536)
def _label_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """``{a="x",b="y"}`` with the values escaped; label sets repeat from scrape to scrape (nodes, devices,
    workspaces), so each is built once."""
    if not names:
        return ""
    escaped = (str(v).replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"') for v in values)
    return "{" + ",".join(f'{n}="{v}"' for n, v in zip(names, escaped, strict=True)) + "}"


def _number(value: float) -> str:
    """A sample value as Prometheus' text format writes it (``+Inf``, ``-Inf``, ``NaN``; else Python's repr)."""
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    return "NaN" if math.isnan(value) else "+Inf" if value > 0 else "-Inf"


def render_gauges(gauges: Iterable[Gauge]) -> bytes:
    """The text exposition (format 0.0.4) of gauge families, as ``generate_latest`` writes it."""
    out: list[str] = []
    for g in gauges:
        doc = g.doc.replace("\\", "\\\\").replace("\n", "\\n")
        out.append(f"# HELP {g.name} {doc}\n# TYPE {g.name} gauge\n")
        names = tuple(g.labels)
        for key, value in g.values.items():
            labels = _label_text(names, key if isinstance(key, tuple) else (key,))
            out.append(f"{g.name}{labels} {_number(value)}\n")
    return "".join(out).encode()


class BuildInfoCollector(Collector):
    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("aicenter_build_info", "The running aicenter's version; always 1.", labels=["version"])
        info.add_metric([__version__], 1.0)
        yield info


class Metrics:
    """One app's registry: the metrics its middleware updates, the platform snapshot and the process telemetry
    (``AppContext.telemetry``: scheduler cycles, service requests)."""

    def __init__(self, telemetry: monitoring.ProcessTelemetry | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.requests = Counter(
            "aicenter_http_requests",
            "HTTP requests answered, by method, route template and status code.",
            ["method", "route", "status"],
            registry=self.registry,
        )
        self.duration = Histogram(
            "aicenter_http_request_duration_seconds",
            "Time to answer an HTTP request (to the response's start), by method and route template.",
            ["method", "route"],
            buckets=_BUCKETS,
            registry=self.registry,
        )
        self.platform = PlatformGauges()
        self.registry.register(BuildInfoCollector())
        for collector in (telemetry or monitoring.ProcessTelemetry()).collectors():
            self.registry.register(collector)


class HttpMetricsMiddleware:
    """Counts every HTTP request and times it to the start of its response. No database access: two in-memory
    updates per request. Streamed responses (a live log) are timed to their first byte, not their end."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # an exception before the response started is answered 500 by the outer handler

        async def send_timed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                self.metrics.duration.labels(scope["method"], _route(scope)).observe(time.perf_counter() - started)
            await send(message)

        try:
            await self.app(scope, receive, send_timed)
        finally:
            self.metrics.requests.labels(scope["method"], _route(scope), str(status)).inc()


def _route(scope: Scope) -> str:
    """The template of the route that matched (the router writes it into the shared scope), else one value."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) and path else UNMATCHED_ROUTE


router = APIRouter()


@router.get(METRICS_PATH, include_in_schema=False)
async def metrics(request: Request, ctx: Ctx) -> Response:
    """The Prometheus text exposition. Outside the OpenAPI document: it is Prometheus' contract, not the
    REST API's. Who may read it: the bearer ``AICENTER_METRICS_TOKEN`` (when set) or a platform admin's
    token; never an anonymous client, since it names the workspaces."""
    sent = bearer_token(request)
    token = ctx.settings.metrics_token
    if not (token and sent is not None and hmac.compare_digest(sent.encode(), token.encode())):
        actor = await authenticate(request, ctx)
        if actor is None:
            raise Unauthenticated("send 'Authorization: Bearer <AICENTER_METRICS_TOKEN or a platform admin token>'")
        if not actor.is_platform_admin:
            raise Forbidden("only platform admins or the scraper's token (AICENTER_METRICS_TOKEN) can read /metrics")
    state: Metrics = request.app.state.metrics
    await state.platform.serve(ctx)
    return Response(generate_latest(state.registry) + state.platform.text, media_type=CONTENT_TYPE)
