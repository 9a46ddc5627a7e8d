"""A real aicenter server on a free 127.0.0.1 port, in a background thread, for SDK and CLI tests.

The SDK is synchronous, so it cannot use httpx's ASGI transport (async only); a real uvicorn server also covers
what the CLI meets in practice: sockets, HTTP parsing, the lifespan with migrations and bootstrap.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn

from aicenter.app import create_app
from aicenter.config import Settings

ADMIN_PASSWORD = "admin-password-1"


@contextmanager
def live_server(home: Path) -> Iterator[str]:
    """Serve a fresh app (SQLite under ``home``) and yield its base URL; stop it on exit."""
    settings = Settings(
        home=home,
        admin_password=ADMIN_PASSWORD,
        secret_key="test-secret-key-0123456789",
        register_host=False,
        token_cache_s=0,  # tests check revocation at once
        login_max_failures=1000,  # tests log in with wrong passwords on purpose
    )
    app = create_app(settings, run_controllers=False)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="aicenter-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)
        sock.close()
