"""The launcher's share of its job's network: the API relay it serves and its hold on the job's namespace.

A sandboxed replica in its job's network namespace (``aicenter.runtime.netns``) comes with two fds the executor
opened: a socket listening inside the namespace, which the launcher relays to the API (``aicenter.runtime.relay``)
for as long as the replica runs, and a share of the namespace. When the command has ended the relay stops
accepting and finishes its open connections, the share is dropped, and the namespace is removed if this was the
last replica of the job on the node. Imports stay light (the launcher's start-up is the job's latency): the relay
module (``socket``) is loaded in the relay's own thread, ``netns`` (``ctypes``) only at the end.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["RELAY_DRAIN_S", "ReplicaNetwork"]

# The API relay's connections may be another replica's (the kernel spreads them over the job's relays): once the
# command ended they get this long to finish before the launcher exits; as long for the relay to have started.
RELAY_DRAIN_S = 10.0


class ReplicaNetwork:
    """The replica's API relay and its share of the job's network namespace (both absent without one)."""

    def __init__(
        self,
        sandbox: dict[str, Any] | None,
        api_fd: int | None,
        netns_fd: int | None,
        *,
        log: Callable[[str, str], None],
    ) -> None:
        sandbox = sandbox or {}
        self.log = log
        upstream = sandbox.get("api_upstream")
        self.upstream = None if not upstream else (str(upstream[0]), int(upstream[1]))
        self.netns: str | None = sandbox.get("netns")
        self.api_fd = api_fd
        self.netns_fd = netns_fd
        self.relay: Any = None
        self.serving = False
        self.ready = threading.Event()
        self.published = [(str(h), int(p)) for h, p in sandbox.get("published") or ()]
        # A service replica's serve token: its published port's relay lets through only the platform's requests.
        self.publish_token: str | None = sandbox.get("publish_token") or None
        self.publishers: list[Any] = []

    def start(self) -> None:
        """Serve the relay in a thread, which also pays for its imports (socket: ~2 ms), off the launch path."""
        if self.api_fd is not None and self.upstream is not None:
            self.serving = True
            threading.Thread(target=self._serve, name="relay", daemon=True).start()
        for relay in self.publishers:
            threading.Thread(target=relay.serve, name="publish", daemon=True).start()

    def bind_published(self) -> str | None:
        """Listen on each published ``(host, port)`` of the node, to be relayed into the namespace's 127.0.0.1
        (only for requests with the serve token, when the sandbox has one); why not, when a port is taken.
        Before the command starts: a port another process took since it was allocated fails the launch, rather
        than leaving the platform to reach whoever holds it now."""
        if not self.published or not self.netns:
            return None
        from aicenter.runtime.relay import Relay, listen_on

        for host, port in self.published:
            try:
                relay = Relay(
                    listen_on(host, port), ("127.0.0.1", port), upstream_netns=self.netns, token=self.publish_token
                )
                self.publishers.append(relay)
            except OSError as exc:
                return f"cannot publish port {port} on {host}: {exc}"
        return None

    def _serve(self) -> None:
        from aicenter.runtime.relay import Relay

        assert self.api_fd is not None
        assert self.upstream is not None
        try:
            self.relay = Relay(self.api_fd, self.upstream)
        finally:
            self.ready.set()
        self.relay.serve()

    def close(self) -> None:
        """Stop the relay, drop this replica's share of the namespace, and remove it if nobody else holds it."""
        for publisher in self.publishers:  # the command ended: nothing listens behind them any more
            publisher.close(0.0)
        if self.api_fd is not None:
            if self.serving and self.ready.wait(RELAY_DRAIN_S) and self.relay is not None:
                if not self.relay.close(RELAY_DRAIN_S):
                    self.log("WARNING", f"API relay connections still open after {RELAY_DRAIN_S:g} s; cutting them")
            else:
                with contextlib.suppress(OSError):
                    os.close(self.api_fd)
            self.api_fd = None
        if self.netns_fd is None:
            return
        with contextlib.suppress(OSError):
            os.close(self.netns_fd)
        self.netns_fd = None
        if self.netns:
            from aicenter.runtime import netns  # only at the end: it imports ctypes

            try:
                if netns.release(os.path.basename(self.netns)):
                    self.log("INFO", f"removed the job's network namespace {self.netns}")
            except OSError as exc:  # a later launch or sweep removes it
                self.log("WARNING", f"cannot remove the network namespace {self.netns}: {exc}")
