"""Real receivers for alert notifications: an SMTP server (aiosmtpd) and an HTTP webhook receiver.

Both listen on 127.0.0.1 with free ports and keep what they received in memory. The webhook receiver answers
``/ok`` with 200, ``/fail`` with 500, and holds ``/hang`` open until ``release()`` (so a test knows, without any
timing, that a request is still hanging while it checks that nothing else waits for it).
"""

from __future__ import annotations

import email
import email.policy
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email.message import EmailMessage
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from tests.support.waiting import free_port


@dataclass
class Inbox:
    """What the SMTP server received."""

    messages: list[EmailMessage] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        message = email.message_from_bytes(content, policy=email.policy.default)
        assert isinstance(message, EmailMessage)
        with self.lock:
            self.messages.append(message)
        return "250 OK"

    def to(self, address: str) -> list[EmailMessage]:
        with self.lock:
            return [m for m in self.messages if m["To"] == address]


@contextmanager
def smtp_server() -> Iterator[tuple[Inbox, int]]:
    """An SMTP server on 127.0.0.1: (inbox, port)."""
    inbox = Inbox()
    port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield inbox, port
    finally:
        controller.stop()


class WebhookReceiver:
    """An HTTP server on 127.0.0.1 that records JSON POSTs by path."""

    def __init__(self) -> None:
        self.received: list[tuple[str, Any]] = []
        self.hanging = threading.Event()  # set once a /hang request arrived
        self._release = threading.Event()
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"null")
                with receiver._lock:
                    receiver.received.append((self.path, body))
                if self.path.startswith("/hang"):
                    receiver.hanging.set()
                    receiver._release.wait(60)
                status = 500 if self.path.startswith("/fail") else 200
                self.send_response(status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def bodies(self, path: str) -> list[Any]:
        with self._lock:
            return [body for p, body in self.received if p == path]

    def reset_hang(self) -> None:
        """Make the next /hang request hang again (after an earlier test released one)."""
        self.hanging.clear()
        self._release.clear()

    def release(self) -> None:
        """Let every hanging request answer."""
        self._release.set()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


@contextmanager
def webhook_receiver() -> Iterator[WebhookReceiver]:
    receiver = WebhookReceiver()
    receiver.start()
    try:
        yield receiver
    finally:
        receiver.stop()
