"""The serving gateway's data plane: ``/serve/<workspace>/<service>/<rest>`` routed to a service's replicas.

A raw ASGI app (no framework routing: the per-request budget is about a millisecond), mounted by the API server
in front of FastAPI for paths under ``/serve/``. Per request, with nothing read from the database:

1. **Find** the service in the route table (``core.serving.routing``), which a background task reloads from the
   injected ``load_routes`` every ``refresh_s`` and at once on ``refresh_soon()`` (every 100 ms while requests
   are held); a request arriving while a ``refresh_soon()`` reload is pending waits for it (``refresh_s`` at most),
   so a change made through this process routes the next request. Unknown: 404; stopped: 503.
2. **Authenticate**: ``Authorization: Bearer <x>`` or ``X-Api-Key: <x>``; the sha256 of ``x`` among the
   service's key hashes passes; otherwise ``x`` is a user token, resolved by the injected ``resolve_token``
   (cached ``token_ttl_s``, refusals too, by the token's hash: no token is kept in memory) and its user must be
   a member of the service's workspace. None: 401; wrong: 403. Keys are never logged.
3. **Read the body** whole, up to the service's ``max_body_bytes`` (413 past it, from ``Content-Length`` or while
   reading): inference payloads are bounded, and a buffered body can be sent again to another replica.
4. **Choose** the revision (header pin, A/B header, traffic split) and its least loaded ready replica; with
   none ready, the activator (``gateway.activator``) holds the request until one is.
5. **Forward** to ``/<rest>`` (V2 revisions: ``v2/...`` only), without the caller's credentials, with
   ``X-Forwarded-*`` and the replica's serve token (``X-Aicenter-Serve-Token``, from the route table: the
   replica's port answers nothing without it; a caller's own header of that name is dropped); the answer
   streams back as it arrives (server-sent events pass through). A replica that cannot be reached is marked not
   ready and the request goes to another (twice at most), as long as nothing was answered yet.

Every error under the gateway is ``{"error": "<message>"}`` (the V2 protocol's error form); every answer from a
replica carries ``X-Aicenter-Revision: <number>`` (which revision served it). A caller that disconnects while
held, or during a streamed answer, is let go (and the stream's upstream connection closed, so the replica stops).

Measured (``bench/gateway_overhead.py``, 2 shared CPUs, uvicorn + httptools, 1 worker): the gateway adds 0.32 ms
at p50 and 0.41 ms at p99 to a small V2 inference request (0.27 -> 0.59 ms p50).

Metrics (optional prometheus_client objects, ``GatewayMetrics``): ``requests`` counted with labels ``service``
(``<workspace>/<name>``) and ``code``, plus ``revision`` (its number) when the counter declares that label;
``duration`` (seconds to the response's start) with ``service`` (+ ``revision``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import random
import time
import urllib.parse
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aicenter.core.jobs.serving import SERVE_TOKEN_HEADER
from aicenter.core.serving.routing import (
    REVISION_HEADER,
    Endpoint,
    RevisionLoad,
    RevisionRoute,
    RouteTable,
    ServiceRoute,
    ServingProtocol,
    TokenInfo,
    choose_revision,
    least_outstanding,
)
from aicenter.gateway.activator import Activator, HoldRefused
from aicenter.gateway.load import LoadMeter
from aicenter.gateway.readiness import Readiness, endpoint_key
from aicenter.gateway.upstream import UpstreamError, UpstreamPool, UpstreamResponse

__all__ = ["GatewayMetrics", "ServingGateway"]

log = logging.getLogger(__name__)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

T = TypeVar("T")

PREFIX = "/serve/"
MAX_RETRIES = 2  # another replica after a connection failure, twice at most
TOKEN_CACHE_SIZE = 10_000
_PIN = REVISION_HEADER.encode("latin-1")
REVISION_REPLY_HEADER = _PIN  # the answer says which revision served it
_SERVE_TOKEN = SERVE_TOKEN_HEADER.encode("ascii")
# Hop-by-hop headers (RFC 9110 7.6.1), what the client sets itself, and the caller's credentials.
_HOP = frozenset({b"connection", b"keep-alive", b"proxy-authenticate", b"proxy-authorization", b"te", b"trailer",
                  b"transfer-encoding", b"upgrade"})  # fmt: skip
_DROP_UP = _HOP | {b"host", b"content-length", b"expect", b"authorization", b"x-api-key", b"forwarded",
                   b"x-forwarded-for", b"x-forwarded-host", b"x-forwarded-proto", b"x-forwarded-prefix",
                   _SERVE_TOKEN}  # fmt: skip
_DROP_DOWN = _HOP | {b"date", b"server"}  # the ASGI server sets its own


@dataclass(frozen=True, slots=True)
class GatewayMetrics:
    """Prometheus metrics the gateway feeds (``services.monitoring``'s ``aicenter_service_*`` families).

    Attributes:
        requests: A counter with labels ``service``, ``revision``, ``code``.
        duration: A histogram with labels ``service``, ``revision``.
    """

    requests: Any = None
    duration: Any = None


class _Refusal(Exception):
    def __init__(self, status: int, message: str, headers: tuple[tuple[bytes, bytes], ...] = ()) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = headers


class ServingGateway:
    """The ``/serve/`` ASGI app; one per server process.

    Args:
        load_routes: Builds the current route table (the control plane; a database read).
        resolve_token: A user token's user and workspaces, or None for an unknown or expired token.
        activate: Asks for a replica of a revision now (the activator's cold start).
        refresh_s: The table's reload period.
        token_ttl_s: How long a resolved token (or a refusal) is trusted.
        metrics: Prometheus metrics to feed, or None.
    """

    def __init__(
        self,
        *,
        load_routes: Callable[[], Awaitable[RouteTable]],
        resolve_token: Callable[[str], Awaitable[TokenInfo | None]],
        activate: Callable[[int], Awaitable[None]],
        refresh_s: float = 1.0,
        token_ttl_s: float = 10.0,
        metrics: GatewayMetrics | None = None,
    ) -> None:
        self._load_routes = load_routes
        self._resolve_token = resolve_token
        self.refresh_s = refresh_s
        self.token_ttl_s = token_ttl_s
        self._metrics = metrics
        self._metric_children: dict[tuple[str, str, str], tuple[Any, Any]] = {}
        self.table = RouteTable()
        self._pool = UpstreamPool()
        self._meter = LoadMeter()
        self._activator = Activator(activate, self._meter, on_hold=self._on_hold)
        self._readiness = Readiness(
            self._pool, on_ready=self._activator.wake, urgent=lambda rid: self._activator.held(rid) > 0
        )
        self._outstanding: dict[tuple[int, str, int], int] = {}
        self._revision_of: dict[tuple[int, str, int], int] = {}
        self._tokens: dict[str, tuple[float, TokenInfo | None]] = {}
        self._refresh = asyncio.Event()
        self._refresher: asyncio.Task[None] | None = None
        # Reloads asked for (``refresh_soon``) and loaded: a request that arrives while one is pending waits for
        # it, so the answer to a change made through this process (a deploy, a stop) holds for the next request.
        self._asked = 0
        self._loaded = 0
        self._swapped = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------------------------------------

    async def start(self) -> None:
        """Load the first table, then keep it fresh and probe replicas in the background."""
        self._swap(await self._load_routes())
        self._refresher = asyncio.get_running_loop().create_task(self._refreshing(), name="serving-routes")
        self._readiness.start()

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
        await self._activator.close()
        await self._readiness.close()
        await self._pool.close()

    def refresh_soon(self) -> None:
        """Reload the table now (the control plane changed a service or a replica in this process); requests
        that arrive meanwhile wait for it (at most ``refresh_s``)."""
        self._asked += 1
        self._refresh.set()

    async def _caught_up(self) -> None:
        """Wait for the reloads asked so far (bounded: a failing reload must not hold requests)."""
        if self._loaded >= self._asked or self._refresher is None:
            return
        deadline = time.monotonic() + max(self.refresh_s, 0.1)
        while self._loaded < self._asked and (left := deadline - time.monotonic()) > 0:
            self._swapped.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._swapped.wait(), left)

    def _on_hold(self) -> None:
        self._refresh.set()
        self._readiness.hurry()

    async def _refreshing(self) -> None:
        while True:
            wait = 0.1 if self._activator.holding else self.refresh_s
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._refresh.wait(), wait)
            self._refresh.clear()
            asked = self._asked
            try:
                self._swap(await self._load_routes())
            except Exception:
                log.exception("serving gateway: could not load the route table; keeping the last one")
            self._loaded = asked  # failed too: the waiting requests go on with the last table
            self._swapped.set()

    def _swap(self, table: RouteTable) -> None:
        self.table = table
        revision_of: dict[tuple[int, str, int], int] = {}
        for service in table.services.values():
            for revision in service.revisions:
                for endpoint in revision.endpoints:
                    revision_of[endpoint_key(endpoint)] = revision.revision_id
        self._revision_of = revision_of
        self._readiness.set_table(table)
        self._activator.wake_all()  # a replica known ready may have joined a revision with held requests

    def ready_replicas(self) -> frozenset[int]:
        """The replica job ids this gateway has seen ready and not failed since (diagnostics, tests)."""
        return frozenset(key[0] for key in self._revision_of if self._readiness.is_ready_key(key))

    # -- load ------------------------------------------------------------------------------------------------

    def take_load(self) -> dict[int, RevisionLoad]:
        """Each revision's load since the last call (``RevisionLoad``): concurrency (in flight + held), peak,
        requests, errors, held now, latency p50/p99, and requests in flight per replica now (every replica of the
        table, 0 included). A revision this gateway saw nothing of since the call before last is absent: no
        traffic here (it is reported once with zeros when its traffic stops)."""
        in_flight: dict[int, dict[int, int]] = {}
        for key, count in self._outstanding.items():
            revision_id = self._revision_of.get(key)
            if revision_id is not None:
                in_flight.setdefault(revision_id, {})[key[0]] = count
        for key, revision_id in self._revision_of.items():
            in_flight.setdefault(revision_id, {}).setdefault(key[0], 0)
        return self._meter.take(in_flight)

    # -- ASGI ------------------------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "websocket":
                await send({"type": "websocket.close", "code": 1008})
            return
        started = time.perf_counter()
        service: ServiceRoute | None = None
        revision: RevisionRoute | None = None
        try:
            workspace, name, rest = _split(scope)
            await self._caught_up()
            service = self.table.get(workspace, name)
            if service is None:
                raise _Refusal(404, f"no service {name!r} in workspace {workspace!r}")
            if service.stopped:
                raise _Refusal(503, f"service {name!r} is stopped")
            headers = scope["headers"]
            await self._authenticate(service, headers)
            body = await _read_body(scope, receive, service.max_body_bytes)
            revision = self._choose(service, headers)
            _check_path(service, revision, rest)
            await self._forward(scope, receive, send, service, revision, rest, body, started)
        except _Refusal as refusal:
            if revision is not None and refusal.status >= 500:
                self._meter.finished(revision.revision_id, None, error=True, started=False)
            await _send_error(send, refusal.status, refusal.message, refusal.headers)
            self._count(service, revision, refusal.status, started)

    async def _authenticate(self, service: ServiceRoute, headers: list[tuple[bytes, bytes]]) -> None:
        secret = None
        for key, value in headers:
            if key == b"authorization":
                scheme, _, token = value.partition(b" ")
                if scheme.lower() == b"bearer" and token.strip():
                    secret = token.strip()
                    break
            elif key == b"x-api-key" and value.strip():
                secret = value.strip()
                break
        if secret is None:
            raise _Refusal(401, "an API key or token is required (Authorization: Bearer, or X-Api-Key)")
        digest = hashlib.sha256(secret).hexdigest()
        if digest in service.key_hashes:
            return
        info = await self._token(digest, secret)
        if info is None or service.workspace_id not in info.workspace_ids:
            raise _Refusal(403, f"this key or token does not grant service {service.name!r}")

    async def _token(self, digest: str, secret: bytes) -> TokenInfo | None:
        now = time.monotonic()
        cached = self._tokens.get(digest)
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            info = await self._resolve_token(secret.decode("latin-1"))
        except Exception as exc:
            log.warning("serving gateway: resolving a token failed: %s", type(exc).__name__)
            raise _Refusal(503, "authentication is unavailable, retry shortly", ((b"retry-after", b"1"),)) from exc
        if len(self._tokens) >= TOKEN_CACHE_SIZE:
            for stale in [k for k, (until, _) in self._tokens.items() if until <= now] or list(self._tokens)[:1000]:
                del self._tokens[stale]
        self._tokens[digest] = (now + self.token_ttl_s, info)
        return info

    def _choose(self, service: ServiceRoute, headers: list[tuple[bytes, bytes]]) -> RevisionRoute:
        pinned = ab_value = None
        ab_header = service.ab_header.encode("latin-1") if service.ab_header else None
        for key, value in headers:
            if key == _PIN:
                pinned = value.decode("latin-1")
            elif ab_header is not None and key == ab_header:
                ab_value = value.decode("latin-1")
        revision = choose_revision(service, pinned=pinned, ab_value=ab_value, draw=random.random())
        if revision is None:
            if pinned is not None:
                raise _Refusal(404, f"service {service.name!r} has no revision {pinned!r}")
            raise _Refusal(503, f"no revision of service {service.name!r} takes traffic")
        return revision

    def _pick(self, revision: RevisionRoute, exclude: frozenset[int]) -> Endpoint | None:
        outstanding = self._outstanding
        return least_outstanding(
            revision.endpoints,
            lambda e: outstanding.get((e.replica_job_id, e.host, e.port), 0),
            ready=self._readiness.is_ready,
            draw=random.random(),
            exclude=exclude,
        )

    def _fresh(self, service: ServiceRoute, revision: RevisionRoute) -> RevisionRoute:
        """The revision as the current table has it (the request's own table, if it no longer does)."""
        current = self.table.get(service.workspace, service.name)
        if current is None or current is service:
            return revision
        return next((r for r in current.revisions if r.revision_id == revision.revision_id), revision)

    async def _endpoint(
        self, receive: Receive, service: ServiceRoute, revision: RevisionRoute, exclude: frozenset[int]
    ) -> Endpoint:
        """A ready replica, holding the request while there is none."""
        endpoint = self._pick(self._fresh(service, revision) if exclude else revision, exclude)
        if endpoint is not None:
            return endpoint

        def pick_fresh() -> Endpoint | None:
            # Held: the replicas that appear are in the tables loaded since; one that failed this request before
            # is fine again once a probe saw it ready (a restarted replica, the only one of its revision).
            return self._pick(self._fresh(service, revision), frozenset())

        try:
            gone, endpoint = await _unless_gone(receive, self._activator.hold(revision, pick_fresh))
        except HoldRefused as exc:
            raise _Refusal(503, f"{exc}; retry shortly", ((b"retry-after", b"1"),)) from exc
        if gone:
            raise _Refusal(499, "the client went away while its request was held")
        if endpoint is None:
            raise _Refusal(
                503,
                f"no replica of revision {revision.number} became ready in {revision.activation_timeout_s:g} s",
                ((b"retry-after", b"1"),),
            )
        return endpoint

    async def _forward(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        service: ServiceRoute,
        revision: RevisionRoute,
        rest: str,
        body: bytes,
        started: float,
    ) -> None:
        method: str = scope["method"]
        target = b"/" + rest.encode("latin-1")
        if scope.get("query_string"):
            target += b"?" + scope["query_string"]
        headers = _upstream_headers(scope, f"/serve/{service.workspace}/{service.name}")
        rid = revision.revision_id
        tried: frozenset[int] = frozenset()
        for attempt in range(MAX_RETRIES + 1):
            endpoint = await self._endpoint(receive, service, revision, tried)
            key = endpoint_key(endpoint)
            self._outstanding[key] = self._outstanding.get(key, 0) + 1
            self._meter.started(rid)
            sent = [*headers, (_SERVE_TOKEN, endpoint.token.encode("ascii"))] if endpoint.token else headers
            try:
                response = await self._pool.request(endpoint.host, endpoint.port, method, target, sent, body)
            except UpstreamError as exc:
                self._done(key)
                self._meter.abandoned(rid)
                self._readiness.failed(endpoint)
                tried |= {endpoint.replica_job_id}
                log.info("serving gateway: %s/%s attempt %d: %s", service.workspace, service.name, attempt + 1, exc)
                if attempt < MAX_RETRIES:
                    continue
                raise _Refusal(502, f"no replica of revision {revision.number} answered") from exc
            except BaseException:
                self._done(key)
                self._meter.abandoned(rid)
                raise
            latency = time.perf_counter() - started
            try:
                await self._relay(receive, send, response, revision, started, service)
            finally:
                self._done(key)
                response.close()
                self._meter.finished(rid, latency, error=response.status >= 500)
            return

    def _done(self, key: tuple[int, str, int]) -> None:
        count = self._outstanding.get(key, 0) - 1
        if count > 0:
            self._outstanding[key] = count
        else:
            self._outstanding.pop(key, None)

    async def _relay(
        self,
        receive: Receive,
        send: Send,
        response: UpstreamResponse,
        revision: RevisionRoute,
        started: float,
        service: ServiceRoute,
    ) -> None:
        headers = [(k, v) for k, v in response.headers if k not in _DROP_DOWN]
        headers.append((REVISION_REPLY_HEADER, str(revision.number).encode("ascii")))
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        self._count(service, revision, response.status, started)
        if response.streaming:
            # A stream (an LLM's tokens) may last minutes: when its caller leaves, the replica should stop too
            # (closing the upstream connection tells it). A known length ends soon enough to just finish.
            await _unless_gone(receive, _pass_body(send, response))
        else:
            await _pass_body(send, response)

    def _count(self, service: ServiceRoute | None, revision: RevisionRoute | None, status: int, started: float) -> None:
        metrics = self._metrics
        if metrics is None or service is None:
            return
        label = f"{service.workspace}/{service.name}"
        number = str(revision.number) if revision is not None else ""
        code = str(status)
        children = self._metric_children.get((label, number, code))
        if children is None:
            children = (
                None
                if metrics.requests is None
                else metrics.requests.labels(service=label, revision=number, code=code),
                None if metrics.duration is None else metrics.duration.labels(service=label, revision=number),
            )
            if len(self._metric_children) < 100_000:
                self._metric_children[(label, number, code)] = children
        if children[0] is not None:
            children[0].inc()
        if children[1] is not None:
            children[1].observe(time.perf_counter() - started)


async def _pass_body(send: Send, response: UpstreamResponse) -> None:
    async for chunk in response.body():
        await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _unless_gone(receive: Receive, work: Awaitable[T]) -> tuple[bool, T | None]:
    """Run ``work`` unless the client disconnects first (then it is cancelled): (gone, its result or None).

    The request body was read whole before, so the next ``receive()`` only returns at the disconnect.
    """
    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(_disconnected(receive))
    try:
        await asyncio.wait((task, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for pending in (task, watch):
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pending
    if task.cancelled():
        return True, None
    return False, task.result()


async def _disconnected(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


def _split(scope: Scope) -> tuple[str, str, str]:
    """(workspace, service, rest) of ``/serve/<workspace>/<service>/<rest>``; rest keeps its %-encoding (it is
    sent upstream as it came)."""
    raw: bytes | None = scope.get("raw_path")
    # raw_path as received (read as latin-1, so it encodes back to the same bytes); else the decoded path encoded
    path = raw.decode("latin-1").partition("?")[0] if raw else urllib.parse.quote(scope["path"], safe="/:@!$&'()*+,;=")
    root = scope.get("root_path", "")
    if not path.startswith(PREFIX) and root and path.startswith(root):
        path = path[len(root) :]  # served under a prefix (a proxy's): raw_path carries it, /serve/ follows
    if not path.startswith(PREFIX):
        raise _Refusal(404, "not a serving path: /serve/<workspace>/<service>/...")
    parts = path[len(PREFIX) :].split("/", 2)
    if len(parts) < 2 or not parts[0] or not parts[1]:
        raise _Refusal(404, "not a serving path: /serve/<workspace>/<service>/...")
    return parts[0], parts[1], parts[2] if len(parts) == 3 else ""


def _check_path(service: ServiceRoute, revision: RevisionRoute, rest: str) -> None:
    """V2 revisions serve the Open Inference Protocol only, for their own model name."""
    if revision.protocol is not ServingProtocol.V2:
        return
    if rest != "v2" and not rest.startswith("v2/"):
        raise _Refusal(404, f"service {service.name!r} serves the V2 inference protocol: /v2/... only")
    parts = rest.split("/", 3)
    if len(parts) >= 3 and parts[1] == "models" and parts[2] != service.name:
        raise _Refusal(404, f"no model {parts[2]!r} here: this service serves model {service.name!r}")


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    for key, value in scope["headers"]:
        if key == b"content-length":
            try:
                declared = int(value)
            except ValueError:
                raise _Refusal(400, "invalid Content-Length") from None
            if declared > limit:
                raise _Refusal(413, f"the request body is over this service's limit of {limit} bytes")
            break
    parts: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Refusal(499, "the client went away")
        chunk = message.get("body", b"")
        if chunk:
            size += len(chunk)
            if size > limit:
                raise _Refusal(413, f"the request body is over this service's limit of {limit} bytes")
            parts.append(chunk)
        if not message.get("more_body", False):
            break
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _upstream_headers(scope: Scope, prefix: str) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    host = b""
    forwarded_for = b""
    for key, value in scope["headers"]:
        if key in _DROP_UP:
            if key == b"host":
                host = value
            elif key == b"x-forwarded-for":
                forwarded_for = value
            continue
        out.append((key, value))
    client = scope.get("client")
    if client:
        peer = client[0].encode("latin-1")
        forwarded_for = forwarded_for + b", " + peer if forwarded_for else peer
    if forwarded_for:
        out.append((b"x-forwarded-for", forwarded_for))
    if host:
        out.append((b"x-forwarded-host", host))
    out.append((b"x-forwarded-proto", scope.get("scheme", "http").encode("latin-1")))
    out.append((b"x-forwarded-prefix", prefix.encode("latin-1")))
    return out


async def _send_error(send: Send, status: int, message: str, extra: tuple[tuple[bytes, bytes], ...] = ()) -> None:
    if status == 499:
        return  # nobody to answer
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
