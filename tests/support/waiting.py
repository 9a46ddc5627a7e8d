"""Small helpers every test engine cluster (tests/support/slurm.py, ray.py) uses; standard library only, so the
benchmarks import them without the server's test machinery."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

__all__ = ["free_port", "wait_for"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for(ready: Callable[[], bool], what: str, timeout: float) -> None:
    """Poll ``ready`` every 0.1 s until it is true; RuntimeError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.1)
