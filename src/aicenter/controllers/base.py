"""Background controllers: reconcile loops that run on every replica and coordinate through leases."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from abc import ABC, abstractmethod
from collections.abc import Callable

from aicenter.events import EventBus, jobs_changed

log = logging.getLogger(__name__)


def replica_name() -> str:
    """This process, as lease owners are named: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


class Controller(ABC):
    """Calls ``tick()`` every ``interval_s`` until stopped. A failing tick is logged and retried next time:
    one bad row must not stop the loop. Ticks must be idempotent (they may run again after a crash)."""

    name: str = "controller"
    interval_s: float = 5.0

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    async def prepare(self) -> None:  # noqa: B027 (an optional hook: most controllers need none)
        """What must be done before the server answers its first request (the app factory awaits it before
        ``start``); nothing by default. A failure is logged and left to the ticks."""

    @abstractmethod
    async def tick(self) -> None: ...

    async def _run(self) -> None:
        while not self._stopping.is_set():
            await self._tick_once()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.interval_s)

    async def _tick_once(self) -> None:
        try:
            await self.tick()
        except Exception:
            log.exception("controller %s: tick failed", self.name)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"controller:{self.name}")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task


class WakeableController(Controller):
    """A controller whose next tick starts as soon as ``wake()`` is called, or after ``interval_s``.

    It subscribes to an event bus (the jobs' by default) while it runs, so a submit, a stop, or the other job
    controller's decision in this process is acted on within milliseconds; work done through another server
    replica is noticed within one interval.
    """

    def __init__(self, events: EventBus | None = None) -> None:
        super().__init__()
        self._events = events or jobs_changed
        self._wake = asyncio.Event()
        self._unsubscribe: Callable[[], None] | None = None

    def wake(self) -> None:
        """Start the next tick now (or right after the current one)."""
        self._wake.set()

    async def _run(self) -> None:
        self._unsubscribe = self._events.subscribe(self.wake)
        try:
            while not self._stopping.is_set():
                # Cleared before the tick: a wake-up during the tick runs one more tick right after.
                self._wake.clear()
                await self._tick_once()
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
        await super().stop()
