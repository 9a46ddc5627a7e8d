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

The same relay publishes a replica's port on the node (``upstream_netns``: each connection is relayed into the
job's namespace). A service replica's published port is reachable by anything that reaches the node, not only by
the platform's gateway, so its relay is given the replica's serve token (``token``) and checks the first request
of each connection before anything reaches the replica: it reads up to the end of that request's head (at most
``HEAD_LIMIT`` bytes, within ``HEAD_TIMEOUT_S``), and unless the head carries the token in
``X-Aicenter-Serve-Token`` it answers 401 (431 for a head too large, 408 for one too slow) and closes. A
connection that passed is relayed plainly from then on, the bytes it was read forwarded unchanged first: further
requests on a keep-alive connection are not checked, and need not be, since only the gateway (which sends the
token with every request) got through. The API relay checks nothing: the API authenticates each request itself.

Threads: one accepting, two per connection (one per direction); a job makes few API connections, and a blocked
``recv`` costs no CPU. At most ``MAX_CHECKING`` connections wait for their first head at once (more are closed at
once), so slow clients cannot pile up threads. Standard library only; the launcher imports this module in its
relay thread.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import socket
import threading
import time

__all__ = [
    "CONNECT_TIMEOUT_S",
    "HEAD_LIMIT",
    "HEAD_TIMEOUT_S",
    "MAX_CHECKING",
    "SERVE_TOKEN_HEADER",
    "Relay",
    "listen_on",
    "relay_target",
]

CHUNK = 64 * 1024
_CLONE_NEWNET = 0x40000000
CONNECT_TIMEOUT_S = 10.0
SERVE_TOKEN_HEADER = "x-aicenter-serve-token"  # noqa: S105 - a header's name, not a secret
"""``aicenter.core.jobs.serving.SERVE_TOKEN_HEADER``, spelled again: this module imports nothing of the server."""
HEAD_LIMIT = 64 * 1024
"""The most bytes a checked connection's first request head may take (what the model server accepts too)."""
HEAD_TIMEOUT_S = 10.0
"""How long a checked connection has to send its first request head, in all (not per read: a client trickling
a byte at a time is cut at the same time as one sending nothing)."""
MAX_CHECKING = 128
"""Checked connections whose first head is still awaited; one more is closed at once."""
_DRAIN_S = 1.0  # after a refusal: read what the client still sends, so that closing does not reset the answer
_DRAIN_BYTES = 1 << 20
_HEADER = SERVE_TOKEN_HEADER.encode("ascii")
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


def _refusal(status: int, reason: str, message: str) -> bytes:
    body = b'{"error": "%s"}' % message.encode("ascii")
    head = b"HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n"
    return head % (status, reason.encode("ascii"), len(body)) + body


_UNAUTHORIZED = _refusal(
    401, "Unauthorized", "this port serves the platform only: the request has no valid serve token"
)
_TOO_LARGE = _refusal(431, "Request Header Fields Too Large", f"the request head is over {HEAD_LIMIT} bytes")
_TOO_SLOW = _refusal(408, "Request Timeout", "no whole request head in time")


def read_head(conn: socket.socket, *, limit: int = HEAD_LIMIT, timeout_s: float = HEAD_TIMEOUT_S) -> bytes | int:
    """Read from ``conn`` up to the end of the first request head (``\\r\\n\\r\\n``).

    Returns:
        Every byte read (the head, and whatever followed it in the same reads), or the status to refuse the
        connection with: 431 (no head end within ``limit`` bytes), 408 (not within ``timeout_s``), 400 (the
        client closed first).
    """
    deadline = time.monotonic() + timeout_s
    data = bytearray()
    searched = 0
    while True:
        end = data.find(b"\r\n\r\n", max(0, searched - 3))
        if end >= 0:
            return bytes(data) if end + 4 <= limit else 431
        if len(data) >= limit:
            return 431
        searched = len(data)
        left = deadline - time.monotonic()
        if left <= 0:
            return 408
        conn.settimeout(left)
        try:
            chunk = conn.recv(CHUNK)
        except TimeoutError:
            return 408
        if not chunk:
            return 400
        data += chunk


def head_has_token(data: bytes, token: bytes) -> bool:
    """Whether the request head at the start of ``data`` carries ``token`` in ``X-Aicenter-Serve-Token``."""
    head = data[: data.find(b"\r\n\r\n")]
    found = False
    for line in head.split(b"\r\n")[1:]:
        name, sep, value = line.partition(b":")
        if sep and name.strip().lower() == _HEADER:
            # Every line is compared (no early exit): the time taken tells nothing of where a guess went wrong.
            found = hmac.compare_digest(value.strip(), token) or found
    return found


def _refuse(conn: socket.socket, answer: bytes) -> None:
    """Answer and close; what the client still sends is read first (briefly), or closing would reset the answer."""
    with contextlib.suppress(OSError):
        conn.settimeout(_DRAIN_S)
        conn.sendall(answer)
        conn.shutdown(socket.SHUT_WR)
        deadline, drained = time.monotonic() + _DRAIN_S, 0
        while drained < _DRAIN_BYTES and (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            chunk = conn.recv(CHUNK)
            if not chunk:
                break
            drained += len(chunk)


class Relay:
    """Accepts on a listening socket (given as an fd) and relays each connection to ``upstream``.

    Args:
        listen_fd: A listening TCP socket (the launcher inherits it from the executor); the relay owns it.
        upstream: The API's ``(host, port)``, connected to from the caller's network namespace.
        upstream_netns: The namespace to connect to ``upstream`` from (a published port), or None.
        token: A service replica's serve token: only a connection whose first request head carries it is relayed
            (module docstring); None relays every connection.
        head_timeout_s: How long a checked connection has to send its first request head.
    """

    def __init__(
        self,
        listen_fd: int,
        upstream: tuple[str, int],
        *,
        upstream_netns: str | None = None,
        token: str | None = None,
        head_timeout_s: float = HEAD_TIMEOUT_S,
    ) -> None:
        self._listener = socket.socket(fileno=listen_fd)
        self._upstream = upstream
        self._token = token.encode("ascii") if token else None
        self._head_timeout_s = head_timeout_s
        # Publishing a port of the job's namespace on the node: each connection's thread joins the namespace
        # (``setns`` changes only that thread, which ends with the connection) before it connects upstream.
        self._netns_fd = None if upstream_netns is None else os.open(upstream_netns, os.O_RDONLY | os.O_CLOEXEC)
        self._open = 0
        self._checking = 0
        self._idle = threading.Condition()

    def serve(self) -> None:
        """Accept until ``close``; each connection is relayed in threads of its own."""
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:  # shut down by close()
                break
            with self._idle:
                crowded = self._token is not None and self._checking >= MAX_CHECKING
                if not crowded:
                    self._open += 1
                    self._checking += self._token is not None  # its thread counts it down once the head is in
            if crowded:
                conn.close()  # unanswered: answering would cost the thread the limit is there to save
                continue
            threading.Thread(target=self._relay, args=(conn,), name="aicenter-relay", daemon=True).start()
        self._listener.close()

    def _relay(self, conn: socket.socket) -> None:
        try:
            first = b""
            if self._token is not None:
                checked = self._check(conn)
                if checked is None:
                    return
                first = checked
            try:
                if self._netns_fd is not None:
                    _join_netns(self._netns_fd)
                upstream = socket.create_connection(self._upstream, timeout=CONNECT_TIMEOUT_S)
            except OSError:
                return  # the job sees its connection closed, as when the server is down
            upstream.settimeout(None)
            with upstream:
                if first:
                    try:
                        upstream.sendall(first)
                    except OSError:
                        return
                back = threading.Thread(target=_copy, args=(upstream, conn), name="aicenter-relay", daemon=True)
                back.start()
                _copy(conn, upstream)
                back.join()
        finally:
            conn.close()
            with self._idle:
                self._open -= 1
                self._idle.notify_all()

    def _check(self, conn: socket.socket) -> bytes | None:
        """The bytes of a connection whose first request head carries the token; None once it was refused."""
        try:
            try:
                read = read_head(conn, timeout_s=self._head_timeout_s)
            except OSError:
                return None
            assert self._token is not None
            if isinstance(read, int):
                if read != 400:  # 400: the client closed already, nobody to answer
                    _refuse(conn, _TOO_LARGE if read == 431 else _TOO_SLOW)
                return None
            if not head_has_token(read, self._token):
                _refuse(conn, _UNAUTHORIZED)
                return None
            conn.settimeout(None)
            return read
        finally:
            with self._idle:
                self._checking -= 1

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
