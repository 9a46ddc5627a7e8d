"""The activator: requests for a revision with no ready replica wait here, rather than fail (Knative's activator).

A revision scaled to zero (or whose replicas all just died) gets a request: the gateway holds it in the
revision's bounded queue (``max_held``; more get 503 at once) for up to ``activation_timeout_s`` (then 503 with
``Retry-After``). The first hold of a cold episode calls ``activate(revision_id)`` (the control plane asks the
autoscaler for a replica now, without waiting for a window), and again every ``repeat_s`` while requests are
still held, in case the first ask was lost. When a replica of the revision becomes ready the waiters are woken
and each takes the least loaded ready replica, so a burst held during a cold start spreads over every replica
that came up.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable

from aicenter.core.serving.routing import Endpoint, RevisionRoute
from aicenter.gateway.load import LoadMeter

__all__ = ["Activator", "HoldRefused"]

log = logging.getLogger(__name__)


class HoldRefused(Exception):
    """The revision's queue of held requests is full."""


class Activator:
    """Held requests per revision, and the activation calls while any is held.

    Args:
        activate: Asks the control plane for a replica of a revision.
        meter: Counts held requests as the revision's demand.
        on_hold: Called when a cold episode begins (the gateway refreshes its table and probes fast).
        repeat_s: ``activate`` is called again this often while requests are held.
    """

    def __init__(
        self,
        activate: Callable[[int], Awaitable[None]],
        meter: LoadMeter,
        *,
        on_hold: Callable[[], None],
        repeat_s: float = 3.0,
    ) -> None:
        self._activate = activate
        self._meter = meter
        self._on_hold = on_hold
        self.repeat_s = repeat_s
        self._held: dict[int, int] = {}
        self._events: dict[int, asyncio.Event] = {}
        self._tasks: dict[int, asyncio.Task[None]] = {}

    def held(self, revision_id: int) -> int:
        """Requests held for the revision now."""
        return self._held.get(revision_id, 0)

    @property
    def holding(self) -> bool:
        return bool(self._held)

    def wake(self, revision_id: int) -> None:
        """Something changed for the revision (a replica became ready, a new table): the waiters look again."""
        event = self._events.pop(revision_id, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        for revision_id in list(self._events):
            self.wake(revision_id)

    async def hold(self, revision: RevisionRoute, pick: Callable[[], Endpoint | None]) -> Endpoint | None:
        """Wait until ``pick`` finds a replica for the request.

        Args:
            revision: The revision the request goes to.
            pick: Chooses a ready replica (None: none yet). The caller counts the request at the replica right
                after this returns, before anything else runs, so woken waiters spread by least outstanding.

        Returns:
            The replica, or None when ``activation_timeout_s`` passed without one.

        Raises:
            HoldRefused: ``max_held`` requests are held for the revision already.
        """
        rid = revision.revision_id
        count = self._held.get(rid, 0)
        if count >= revision.max_held:
            raise HoldRefused(f"{count} requests are waiting for revision {revision.number} already")
        self._held[rid] = count + 1
        self._meter.held(rid)
        if rid not in self._tasks:
            self._tasks[rid] = asyncio.get_running_loop().create_task(self._activating(rid))
            self._on_hold()
        deadline = time.monotonic() + revision.activation_timeout_s
        try:
            while True:
                endpoint = pick()
                if endpoint is not None:
                    return endpoint
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                event = self._events.get(rid)
                if event is None:
                    event = self._events[rid] = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), left)
        finally:
            self._meter.unheld(rid)
            left_held = self._held[rid] - 1
            if left_held:
                self._held[rid] = left_held
            else:
                del self._held[rid]

    async def _activating(self, revision_id: int) -> None:
        """One cold episode: ``activate`` now and every ``repeat_s`` while requests are held."""
        try:
            while self._held.get(revision_id, 0) > 0:
                try:
                    await self._activate(revision_id)
                except Exception:
                    log.exception("serving gateway: activating revision %s failed", revision_id)
                slept = 0.0
                while slept < self.repeat_s and self._held.get(revision_id, 0) > 0:
                    await asyncio.sleep(0.1)
                    slept += 0.1
        finally:
            self._tasks.pop(revision_id, None)

    async def close(self) -> None:
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
