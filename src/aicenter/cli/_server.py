"""The uvicorn server that `aicenter up` runs; imported only by `up`, since uvicorn costs ~200 ms to import."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Generator
from typing import Any

import uvicorn


class Server(uvicorn.Server):
    """uvicorn's server, minus re-raising SIGINT/SIGTERM after a graceful shutdown.

    uvicorn re-raises the signal it caught once it has shut down, so that the default handler "exits the expected
    way": a KeyboardInterrupt traceback for Ctrl-C and death by SIGTERM (exit status -15) for a service manager.
    A clean shutdown here exits 0 instead.
    """

    announce: str | None = None  # printed once the socket listens

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        handled = (signal.SIGINT, signal.SIGTERM)
        original = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
        try:
            yield
        finally:
            for sig, handler in original.items():
                signal.signal(sig, handler)

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and self.announce and not self.should_exit:
            print(self.announce, flush=True)
