"""Which replicas the gateway may send requests to: each endpoint is probed until it answers its readiness path.

A replica in the route table is running, not necessarily serving: the model server answers
``/v2/health/ready`` with 200 only once its model is loaded, a custom command whenever it listens. The gateway
probes every endpoint it has not seen ready, every ``slow_s`` (0.5 s), or every ``fast_s`` (50 ms) while the
activator holds requests for its revision (a cold start's last step should not add half a second). A ready
endpoint is not probed again: a request that cannot connect to it marks it not ready (``failed``), and the
probing resumes. Endpoints dropped from the table are forgotten, with their pooled connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from aicenter.core.jobs.serving import SERVE_TOKEN_HEADER
from aicenter.core.serving.routing import Endpoint, RouteTable
from aicenter.gateway.upstream import UpstreamError, UpstreamPool

__all__ = ["Readiness", "endpoint_key"]

log = logging.getLogger(__name__)

EndpointKey = tuple[int, str, int]
_TOKEN = SERVE_TOKEN_HEADER.encode("ascii")


def endpoint_key(endpoint: Endpoint) -> EndpointKey:
    """An endpoint's identity, whatever its draining flag: (replica job id, host, port)."""
    return (endpoint.replica_job_id, endpoint.host, endpoint.port)


class Readiness:
    """The endpoints seen ready, and the prober that finds them.

    Args:
        pool: The connections probes use (the gateway's own: a probe warms a connection for the first request).
        on_ready: Called with a revision id when one of its endpoints became ready (the activator releases).
        urgent: Whether a revision has held requests (fast probing).
        slow_s: The probe period otherwise.
        fast_s: The probe period of urgent revisions, and the prober's tick.
        timeout_s: A probe not answered within this failed.
    """

    def __init__(
        self,
        pool: UpstreamPool,
        *,
        on_ready: Callable[[int], None],
        urgent: Callable[[int], bool],
        slow_s: float = 0.5,
        fast_s: float = 0.05,
        timeout_s: float = 1.0,
    ) -> None:
        self._pool = pool
        self._on_ready = on_ready
        self._urgent = urgent
        self.slow_s = slow_s
        self.fast_s = fast_s
        self.timeout_s = timeout_s
        self._ready: set[EndpointKey] = set()
        self._targets: dict[EndpointKey, tuple[int, str, str]] = {}  # -> (revision id, ready path, serve token)
        self._next: dict[EndpointKey, float] = {}
        self._probing: dict[EndpointKey, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()

    def is_ready(self, endpoint: Endpoint) -> bool:
        return (endpoint.replica_job_id, endpoint.host, endpoint.port) in self._ready

    def is_ready_key(self, key: EndpointKey) -> bool:
        return key in self._ready

    def set_table(self, table: RouteTable) -> None:
        """Follow a new table: probe its new endpoints, forget the ones it dropped."""
        targets: dict[EndpointKey, tuple[int, str, str]] = {}
        for service in table.services.values():
            for revision in service.revisions:
                for endpoint in revision.endpoints:
                    targets[endpoint_key(endpoint)] = (revision.revision_id, revision.ready_path, endpoint.token)
        for key in self._targets.keys() - targets.keys():
            self._ready.discard(key)
            self._next.pop(key, None)
            task = self._probing.pop(key, None)
            if task is not None:
                task.cancel()
            self._pool.forget(key[1], key[2])
        self._targets = targets
        self._wake.set()

    def failed(self, endpoint: Endpoint) -> None:
        """A request could not reach the endpoint: not ready until a probe says so again."""
        key = endpoint_key(endpoint)
        if key in self._ready:
            log.info("serving gateway: replica %s (%s:%s) unreachable, probing it again", *key)
            self._ready.discard(key)
            self._pool.forget(key[1], key[2])
        self._next[key] = 0.0
        self._wake.set()

    def hurry(self) -> None:
        """Probe now (the activator began holding)."""
        self._wake.set()

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="serving-readiness")

    async def close(self) -> None:
        tasks = [t for t in (self._task, *self._probing.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._probing.clear()

    async def _run(self) -> None:
        while True:
            now = time.monotonic()
            for key, (revision_id, path, token) in self._targets.items():
                if key in self._ready or key in self._probing or now < self._next.get(key, 0.0):
                    continue
                probe = self._probe(key, revision_id, path, token)
                self._probing[key] = asyncio.get_running_loop().create_task(probe)
            self._wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.fast_s)

    async def _probe(self, key: EndpointKey, revision_id: int, path: str, token: str) -> None:
        ok = False
        headers = ((_TOKEN, token.encode("ascii")),) if token else ()
        try:
            async with asyncio.timeout(self.timeout_s):
                response = await self._pool.request(key[1], key[2], "GET", path.encode("ascii"), headers)
                await response.read()
                ok = response.status == 200
        except (UpstreamError, OSError, TimeoutError, ValueError, asyncio.IncompleteReadError):
            ok = False
        finally:
            self._probing.pop(key, None)
        if key not in self._targets:
            return
        if ok:
            self._ready.add(key)
            self._on_ready(revision_id)
        else:
            period = self.fast_s if self._urgent(revision_id) else self.slow_s
            self._next[key] = time.monotonic() + period
