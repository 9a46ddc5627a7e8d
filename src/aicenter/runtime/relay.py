"""A job's only door to the platform: bytes relayed from a socket inside its network namespace to the API.

A replica in its job's network namespace (``aicenter.runtime.netns``) reaches nothing of the host. Its launcher,
which runs outside, keeps a socket listening on 127.0.0.1:<the API's port> inside that namespace and relays
every connection to the server's real API address, reached from the host's namespace; the replica's
``AICENTER_API_URL`` names the inside address. The relay is plain bytes both ways (HTTP, chunked and streaming
responses, half-closes): it neither reads nor changes requests, so the API still authenticates each with the
job's token, as it does any client's. It opens no other door: the upstream address is fixed by the executor.

Why the API's own port number inside: the ports the executor gives a job for its rendezvous are free on the
host, and the server's port is in use there, so the two can never collide; with the default server address
(127.0.0.1) the job's URL is even unchanged.

Threads: one accepting, two per connection (one per direction); a job makes few API connections, and a blocked
``recv`` costs no CPU. Standard library only; the launcher imports this module in its relay thread.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading

__all__ = ["CONNECT_TIMEOUT_S", "Relay", "listen_on", "relay_target"]

CHUNK = 64 * 1024
_CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_S = 10.0
_DEFAULT_PORTS = {"http": 80, "https": 443}
# Addresses a server listens on that mean "every interface": it is reached from this host through loopback.
_ANY = {"0.0.0.0": "127.0.0.1", "": "127.0.0.1", "::": "::1"}  # noqa: S104 - mapped away, never bound


def relay_target(api_url: str, server: tuple[str, int] | None = None) -> tuple[tuple[str, int], str]:
    """Where a relay for ``api_url`` forwards to, and the URL the job is given instead.

    Args:
        api_url: The job's ``AICENTER_API_URL`` as the platform computed it (possibly its public URL).
        server: The server's own listening address, when the executor knows it; the relay then goes there and
            the job's URL has no path (the server serves its API at its root). Otherwise ``api_url``'s host and
            port, and its path is kept.

    Returns:
        ``((host, port), "http://127.0.0.1:<port><path>")``.

    Raises:
        ValueError: ``api_url`` is not an http(s) URL with a host (when no ``server`` is given).
    """
    from urllib.parse import urlsplit  # lazy: only the executor calls this, the launcher never

    if server is not None:
        host, port = server
        return (_ANY.get(host, host), int(port)), f"http://127.0.0.1:{int(port)}"
    parts = urlsplit(api_url)
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError(f"AICENTER_API_URL {api_url!r} is not an http(s) URL: the job's API relay has no target")
    port = parts.port or _DEFAULT_PORTS[parts.scheme]
    host = _ANY.get(parts.hostname, parts.hostname)
    return (host, port), f"http://127.0.0.1:{port}{parts.path.rstrip('/')}"


def _copy(src: socket.socket, dst: socket.socket) -> None:
    """One direction until EOF, which is passed on as a half-close; an error ends both directions."""
    try:
        while data := src.recv(CHUNK):
            dst.sendall(data)
    except OSError:
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the other direction's recv
        return
    with contextlib.suppress(OSError):
        dst.shutdown(socket.SHUT_WR)


class Relay:
    """Accepts on a listening socket (given as an fd) and relays each connection to ``upstream``.

    Args:
        listen_fd: A listening TCP socket (the launcher inherits it from the executor); the relay owns it.
        upstream: The API's ``(host, port)``, connected to from the caller's network namespace.
    """

    def __init__(self, listen_fd: int, upstream: tuple[str, int], *, upstream_netns: str | None = None) -> None:
        self._listener = socket.socket(fileno=listen_fd)
        self._upstream = upstream
        # Publishing a port of the job's namespace on the node: each connection's thread joins the namespace
        # (``setns`` changes only that thread, which ends with the connection) before it connects upstream.
        self._netns_fd = None if upstream_netns is None else os.open(upstream_netns, os.O_RDONLY | os.O_CLOEXEC)
        self._open = 0
        self._idle = threading.Condition()

    def serve(self) -> None:
        """Accept until ``close``; each connection is relayed in threads of its own."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # shut down by close()
                break
            with self._idle:
                self._open += 1
            threading.Thread(target=self._relay, args=(conn,), name="aicenter-relay", daemon=True).start()
        self._listener.close()

    def _relay(self, conn: socket.socket) -> None:
        try:
            try:
                if self._netns_fd is not None:
                    _join_netns(self._netns_fd)
                upstream = socket.create_connection(self._upstream, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                return  # the job sees its connection closed, as when the server is down
            upstream.settimeout(None)
            with upstream:
                back = threading.Thread(target=_copy, args=(upstream, conn), name="aicenter-relay", daemon=True)
                back.start()
                _copy(conn, upstream)
                back.join()
        finally:
            conn.close()
            with self._idle:
                self._open -= 1
                self._idle.notify_all()

    def close(self, drain_s: float) -> bool:
        """Stop accepting, then wait up to ``drain_s`` for the open connections to end; True when they did.

        The kernel spreads a job's connections over every replica's relay on the node, so one that ends may
        still carry another replica's request: it is given time to finish.
        """
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept(); close() alone would not
        with self._idle:
            drained = self._idle.wait_for(lambda: self._open == 0, drain_s)
        if self._netns_fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._netns_fd)
            self._netns_fd = None
        return drained


def _join_netns(fd: int) -> None:
    """Move the calling thread into the network namespace of ``fd`` (needs CAP_SYS_ADMIN: the launcher is root)."""
    import ctypes  # lazy: only published ports need it

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, _CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


def listen_on(host: str, port: int) -> int:
    """A TCP socket listening on ``(host, port)`` in the caller's network namespace, as an fd for ``Relay``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock.detach()
