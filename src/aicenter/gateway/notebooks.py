"""The notebook proxy's data plane: HTTP and WebSocket passed to a notebook's JupyterLab, wherever it runs.

The API's route (``api/routers/notebook_proxy.py``) authenticates the platform user and checks ownership; this
module finds where the notebook listens and forwards:

- **Where**: ``NotebookGateway.endpoint`` keeps each notebook's ``Endpoint`` (node address, port, token) for
  ``cache_s`` seconds, so a page load of a hundred requests reads the database once, not a hundred times; a
  restarted notebook (new attempt, new port, new token) is seen within that time.
- **HTTP**: one pooled client; the request streams up and the answer streams back, unbuffered (large downloads,
  server-sent output). The user's platform credentials (``Authorization``, the session cookie) never reach
  JupyterLab: the request carries JupyterLab's own token instead, which the user never has to see.
- **WebSocket** (kernels, terminals): both directions relayed message by message; the subprotocol JupyterLab
  picks is the one the browser gets.
- **Activity**: what a person does (pages, writes, WebSocket messages from the browser; not the background polls
  of an open tab, ``GET .../api/...``) is noted in memory and flushed every ``flush_s`` in one transaction
  (``services.notebooks.record_proxy_activity``) for the idle culler.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Mapping
from datetime import datetime

import httpx
from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.websockets import WebSocket, WebSocketDisconnect
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.services import jobs, notebooks

__all__ = ["NotebookGateway", "is_activity"]

log = logging.getLogger(__name__)

# Hop-by-hop headers (RFC 9110 7.6.1) and what must not cross the proxy in either direction.
_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "transfer-encoding",
     "upgrade", "host"}
)  # fmt: skip
_DROP_UP = _HOP | {"authorization", "cookie", "origin", "referer", "forwarded", "x-forwarded-for",
                   "x-forwarded-host", "x-forwarded-proto", "x-real-ip"}  # fmt: skip
_WS_DROP_UP = _DROP_UP | {"sec-websocket-key", "sec-websocket-version", "sec-websocket-extensions",
                          "sec-websocket-protocol", "sec-websocket-accept"}  # fmt: skip
_SAFE = frozenset({"GET", "HEAD", "OPTIONS"})


def is_activity(method: str, path: str) -> bool:
    """Whether a request through the proxy is a person's doing. JupyterLab's open tab polls its REST API
    (kernels, sessions, terminals, contents) every few seconds on its own: those reads are not."""
    return method.upper() not in _SAFE or not path.startswith("api/")


def _cookies_without(header: str, drop: str) -> str:
    """The Cookie header without cookie ``drop`` (the platform's session: JupyterLab has no business with it)."""
    kept = [c for c in (p.strip() for p in header.split(";")) if c and c.partition("=")[0].strip() != drop]
    return "; ".join(kept)


class NotebookGateway:
    """Forwards requests to notebooks; one per server process.

    Args:
        db: The platform database (endpoints, activity flushes).
        secret_key: Derives JupyterLab tokens (``services.jobs.notebook_token``).
        session_cookie: The platform's session cookie name, stripped from forwarded requests.
        cache_s: How long an endpoint (or its absence) is trusted.
        flush_s: How often the activity noted in memory is written.
    """

    def __init__(
        self,
        db: Database,
        secret_key: str,
        *,
        session_cookie: str,
        cache_s: float = 2.0,
        flush_s: float = 10.0,
    ) -> None:
        self.db = db
        self.secret_key = secret_key
        self.session_cookie = session_cookie
        self.cache_s = cache_s
        self.flush_s = flush_s
        self._endpoints: dict[int, tuple[float, notebooks.Endpoint | None]] = {}
        self._loading: dict[int, asyncio.Future[notebooks.Endpoint | None]] = {}
        self._activity: dict[int, datetime] = {}
        self._client = httpx.AsyncClient(
            timeout=httpx.Timeout(None, connect=5.0),
            limits=httpx.Limits(max_connections=256, max_keepalive_connections=64),
            follow_redirects=False,
            trust_env=False,
        )
        self._flusher: asyncio.Task[None] | None = None

    # -- where ---------------------------------------------------------------------------------------------------

    async def endpoint(self, job_id: int) -> notebooks.Endpoint | None:
        """The notebook's endpoint (None: not running), from the cache or one read shared by concurrent callers."""
        cached = self._endpoints.get(job_id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        pending = self._loading.get(job_id)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[notebooks.Endpoint | None] = asyncio.get_running_loop().create_future()
        self._loading[job_id] = future
        try:
            async with self.db.read() as session:
                found = (await notebooks.endpoints(session, [job_id], self.secret_key)).get(job_id)
            self._endpoints[job_id] = (time.monotonic() + self.cache_s, found)
            future.set_result(found)
            return found
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: concurrent waiters re-raise it, nobody else must log it
            raise
        finally:
            del self._loading[job_id]

    def forget(self, job_id: int) -> None:
        """Drop a cached endpoint (after a stop or start through this process)."""
        self._endpoints.pop(job_id, None)

    # -- activity ------------------------------------------------------------------------------------------------

    def touch(self, job_id: int) -> None:
        self._activity[job_id] = utcnow()
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self.flush_s)
        await self.flush()

    async def flush(self) -> None:
        """Write the activity noted since the last flush (a failed write is retried with the next)."""
        if not self._activity:
            return
        batch, self._activity = self._activity, {}
        try:
            async with self.db.write() as session:
                await notebooks.record_proxy_activity(session, batch)
        except Exception as exc:  # the database is away: keep the newest for the next flush
            log.warning("notebook proxy: could not record activity: %s", exc)
            for job_id, at in batch.items():
                self._activity[job_id] = max(at, self._activity.get(job_id, at))

    # -- HTTP ----------------------------------------------------------------------------------------------------

    def _upstream_headers(self, headers: Mapping[str, str], token: str, drop: frozenset[str]) -> list[tuple[str, str]]:
        out = [(k, v) for k, v in headers.items() if k.lower() not in drop]
        cookie = _cookies_without(headers.get("cookie", ""), self.session_cookie)
        if cookie:
            out.append(("cookie", cookie))
        out.append(("authorization", f"token {token}"))
        return out

    async def forward_http(self, request: Request, endpoint: notebooks.Endpoint, path: str) -> Response:
        """Pass ``request`` to the notebook at ``.../notebooks/<id>/<path>`` and stream its answer back."""
        if is_activity(request.method, path):
            self.touch(endpoint.job_id)
        base = jobs.notebook_base_url(endpoint.job_id)
        url = httpx.URL(
            scheme="http",
            host=endpoint.host,
            port=endpoint.jupyter_port,
            path=base + path,
            query=request.url.query.encode(),
        )
        body = None if request.method in ("GET", "HEAD") else _body(request)
        upstream_request = self._client.build_request(
            request.method, url, headers=self._upstream_headers(request.headers, endpoint.token, _DROP_UP), content=body
        )
        try:
            upstream = await self._client.send(upstream_request, stream=True)
        except httpx.HTTPError as exc:
            self.forget(endpoint.job_id)
            return Response(
                f"notebook {endpoint.job_id} does not answer yet ({type(exc).__name__}); it may still be starting\n",
                status_code=502,
                media_type="text/plain",
                headers={"retry-after": "2"},
            )
        headers = [(k, v) for k, v in upstream.headers.multi_items() if k.lower() not in _HOP]
        origin = f"http://{endpoint.host}:{endpoint.jupyter_port}"
        headers = [(k, v.replace(origin, "", 1) if k.lower() == "location" else v) for k, v in headers]
        response = StreamingResponse(
            upstream.aiter_raw(), status_code=upstream.status_code, background=BackgroundTask(upstream.aclose)
        )
        response.raw_headers = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        return response

    # -- WebSocket -----------------------------------------------------------------------------------------------

    async def forward_websocket(self, websocket: WebSocket, endpoint: notebooks.Endpoint, path: str) -> None:
        """Relay a WebSocket (a kernel's channels, a terminal) both ways until either side closes."""
        base = jobs.notebook_base_url(endpoint.job_id)
        query = websocket.url.query
        uri = f"ws://{endpoint.host}:{endpoint.jupyter_port}{base}{path}" + (f"?{query}" if query else "")
        offered = [p.strip() for p in websocket.headers.get("sec-websocket-protocol", "").split(",") if p.strip()]
        try:
            upstream = await connect(
                uri,
                additional_headers=self._upstream_headers(websocket.headers, endpoint.token, _WS_DROP_UP),
                subprotocols=offered or None,  # type: ignore[arg-type]
                max_size=None,
                compression=None,
                open_timeout=10,
                ping_interval=None,
            )
        except (OSError, InvalidHandshake, TimeoutError) as exc:
            status = exc.response.status_code if isinstance(exc, InvalidStatus) else 502
            log.info("notebook %s: WebSocket %s refused upstream: %s", endpoint.job_id, path, exc)
            await websocket.close(code=1011 if status >= 500 else 1008, reason=f"notebook answered {status}")
            return
        async with upstream:
            await websocket.accept(subprotocol=upstream.subprotocol)
            up = asyncio.create_task(self._browser_to_notebook(websocket, upstream, endpoint.job_id))
            down = asyncio.create_task(_notebook_to_browser(upstream, websocket))
            _, pending = await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
            for task in pending:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        # Closed already by the browser: RuntimeError after its close frame, WebSocketDisconnect when it vanished.
        with contextlib.suppress(RuntimeError, WebSocketDisconnect):
            await websocket.close()

    async def _browser_to_notebook(self, websocket: WebSocket, upstream: ClientConnection, job_id: int) -> None:
        with contextlib.suppress(WebSocketDisconnect, ConnectionClosed):
            while True:
                message = await websocket.receive()
                if message["type"] == "websocket.disconnect":
                    return
                self.touch(job_id)
                if message.get("bytes") is not None:
                    await upstream.send(message["bytes"])
                elif message.get("text") is not None:
                    await upstream.send(message["text"])

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flusher
        await self.flush()
        await self._client.aclose()


async def _notebook_to_browser(upstream: ClientConnection, websocket: WebSocket) -> None:
    with contextlib.suppress(WebSocketDisconnect, ConnectionClosed, RuntimeError):
        async for message in upstream:
            if isinstance(message, bytes):
                await websocket.send_bytes(message)
            else:
                await websocket.send_text(message)


async def _body(request: Request) -> AsyncIterator[bytes]:
    async for chunk in request.stream():
        yield chunk
