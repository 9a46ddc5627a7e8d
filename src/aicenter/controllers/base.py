"""Background controllers: reconcile loops that run on every replica and coordinate through leases."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from aicenter.config import Settings
    from aicenter.db.engine import Database
    from aicenter.storage import BlobStore

log = logging.getLogger(__name__)


class Controller(ABC):
    """Calls ``tick()`` every ``interval_s`` until stopped. A failing tick is logged and retried next time:
    one bad row must not stop the loop. Ticks must be idempotent (they may run again after a crash)."""

    name: str = "controller"
    interval_s: float = 5.0

    def __init__(self) -> None:
        self._task: asyncio.Task[None] | None = None
        self._stopping = asyncio.Event()

    @abstractmethod
    async def tick(self) -> None: ...

    async def _run(self) -> None:
        while not self._stopping.is_set():
            try:
                await self.tick()
            except Exception:
                log.exception("controller %s: tick failed", self.name)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=self.interval_s)

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"controller:{self.name}")

    async def stop(self) -> None:
        self._stopping.set()
        if self._task is not None:
            await self._task


class ControllerContext(Protocol):
    """What a controller factory reads from the app's context (``aicenter.api.context.AppContext`` fits it);
    a protocol, so that controllers do not import the API layer above them."""

    @property
    def db(self) -> Database: ...

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> BlobStore: ...
