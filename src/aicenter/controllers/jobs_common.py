"""What the two job controllers share: a loop that a commit can wake before its interval ends."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

from aicenter.controllers.base import Controller
from aicenter.services.jobs import _runtime

log = logging.getLogger(__name__)


class WakeableController(Controller):
    """A controller whose next tick starts as soon as ``wake()`` is called, or after ``interval_s``.

    It subscribes to the jobs' in-process wake-up (``services.jobs._runtime.notify``) while it runs, so a
    submit, a stop, or the other job controller's decision on this replica is acted on within milliseconds;
    work done through another replica is noticed within one interval.
    """

    def __init__(self) -> None:
        super().__init__()
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] | None = None

    def wake(self) -> None:
        """Start the next tick now (or right after the current one)."""
        self._wake.set()

    async def _run(self) -> None:
        self._unsubscribe = _runtime.subscribe(self.wake)
        try:
            while not self._stopping.is_set():
                # Cleared before the tick: a wake-up during the tick runs one more tick right after.
                self._wake.clear()
                try:
                    await self.tick()
                except Exception:
                    log.exception("controller %s: tick failed", self.name)
                await self._sleep()
        finally:
            self._unsubscribe()

    async def _sleep(self) -> None:
        stopping = asyncio.ensure_future(self._stopping.wait())
        woken = asyncio.ensure_future(self._wake.wait())
        try:
            await asyncio.wait({stopping, woken}, timeout=self.interval_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in (stopping, woken):
                waiter.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await waiter

    async def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._task is not None:
            await self._task
