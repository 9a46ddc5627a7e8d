"""A minimal HTTP/1.1 client on asyncio streams for the serving gateway: keep-alive pools per replica.

Why not httpx: the gateway's budget is about a millisecond per request, and httpx (httpcore, its pool's locks,
its request and response models) costs several hundred microseconds of Python per request on its own. The
gateway sends one kind of request (a buffered body, known length) to replicas it trusts to speak HTTP/1.1, so
what it needs is small:

- **Pools**: idle connections per ``(host, port)``, reused LIFO (the warmest socket), at most ``max_idle`` kept;
  TCP_NODELAY on every socket (a small request and its answer must not wait ~40 ms for Nagle + delayed ACK).
- **Framing** of answers: ``Content-Length``, ``Transfer-Encoding: chunked`` (each chunk is handed on as it
  arrives: server-sent events stream through) and close-delimited bodies; HEAD, 1xx, 204 and 304 have none.
- **Stale keep-alive**: a replica may close an idle connection at any moment (uvicorn after 5 s). A pooled
  connection already at EOF is dropped when taken; one closed while the request was on its way fails before any
  byte of the answer arrived, and the request is sent again on a fresh connection, transparently. Only a
  fresh connection's failure reaches the caller (``UpstreamError``): the replica itself is unreachable.
"""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import AsyncIterator, Sequence

__all__ = ["UpstreamError", "UpstreamPool", "UpstreamResponse"]

_HEAD_LIMIT = 64 * 1024  # status line + headers; a replica that sends more is broken
_READ = 64 * 1024
_NO_BODY_STATUS = frozenset({204, 304})


class UpstreamError(Exception):
    """The replica could not be reached, or broke the connection before any byte of its answer.

    The request may be sent to another replica: it got no answer from this one (``sent_nothing`` says whether
    even the request failed to leave, which makes the retry safe for anything).
    """

    def __init__(self, message: str, *, sent_nothing: bool = False) -> None:
        super().__init__(message)
        self.sent_nothing = sent_nothing


class _Connection:
    __slots__ = ("idle_since", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.idle_since = 0.0

    def usable(self) -> bool:
        return not self.reader.at_eof() and not self.writer.is_closing()

    def close(self) -> None:
        self.writer.close()


class UpstreamResponse:
    """An answer whose head was read; iterate ``body()`` once (or ``close()``) to finish with it.

    The connection goes back to its pool when the body was read to its end and both sides allow keep-alive;
    otherwise it is closed.
    """

    __slots__ = ("_conn", "_framing", "_keep", "_key", "_length", "_pool", "headers", "status")

    def __init__(
        self,
        pool: UpstreamPool,
        key: tuple[str, int],
        conn: _Connection | None,
        status: int,
        headers: list[tuple[bytes, bytes]],
        *,
        framing: str,
        length: int,
        keep: bool,
    ) -> None:
        self._pool = pool
        self._key = key
        self._conn: _Connection | None = conn
        self.status = status
        self.headers = headers
        self._framing = framing  # "none", "length", "chunked", "close"
        self._length = length
        self._keep = keep

    @property
    def streaming(self) -> bool:
        """Whether the body arrives in pieces of unknown total length (chunked or close-delimited)."""
        return self._framing in ("chunked", "close")

    async def body(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (chunk framing removed)."""
        conn = self._conn
        if conn is None:
            return
        reader = conn.reader
        try:
            if self._framing == "length":
                left = self._length
                while left > 0:
                    data = await reader.read(min(left, _READ))
                    if not data:
                        raise ConnectionError("replica closed the connection mid-body")
                    left -= len(data)
                    yield data
            elif self._framing == "chunked":
                while True:
                    line = await reader.readuntil(b"\r\n")
                    size = int(line.split(b";", 1)[0].strip(), 16)
                    if size == 0:
                        while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers: dropped
                            pass
                        break
                    data = await reader.readexactly(size + 2)
                    yield data[:-2]
            elif self._framing == "close":
                while data := await reader.read(_READ):
                    yield data
        except BaseException:
            self._conn = None
            conn.close()
            raise
        self._conn = None
        if self._keep and self._framing != "close":
            self._pool.release(self._key, conn)
        else:
            conn.close()

    async def read(self) -> bytes:
        """The whole body (small answers: probes, errors)."""
        return b"".join([part async for part in self.body()])

    def close(self) -> None:
        """Give up on the rest of the body: the connection cannot be reused."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class UpstreamPool:
    """Keep-alive connections to replicas, and the requests sent over them.

    Args:
        max_idle: Idle connections kept per replica (more are closed when released).
        idle_s: An idle connection older than this is closed rather than reused.
        connect_timeout_s: A replica that does not accept within this is unreachable.
    """

    def __init__(self, *, max_idle: int = 64, idle_s: float = 30.0, connect_timeout_s: float = 2.0) -> None:
        self.max_idle = max_idle
        self.idle_s = idle_s
        self.connect_timeout_s = connect_timeout_s
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def request(
        self,
        host: str,
        port: int,
        method: str,
        target: bytes,
        headers: Sequence[tuple[bytes, bytes]],
        body: bytes = b"",
    ) -> UpstreamResponse:
        """Send a request and read its answer's head.

        Args:
            host: The replica's address.
            port: Its port.
            method: The HTTP method.
            target: The request target (path and query, already encoded).
            headers: Headers to send, without ``Host``, ``Content-Length``, ``Transfer-Encoding`` and
                ``Connection`` (this client sets those).
            body: The request body.

        Raises:
            UpstreamError: The replica could not be reached or closed the connection without answering.
        """
        key = (host, port)
        head = [method.encode("ascii"), b" ", target, b" HTTP/1.1\r\nhost: ", f"{host}:{port}".encode("ascii")]
        for name, value in headers:
            head += (b"\r\n", name, b": ", value)
        if body or method not in ("GET", "HEAD", "OPTIONS", "DELETE"):
            head += (b"\r\ncontent-length: ", str(len(body)).encode("ascii"))
        head.append(b"\r\n\r\n")
        payload = b"".join(head) + body
        while True:
            conn, reused = self._take(key), True
            if conn is None:
                conn, reused = await self._connect(key), False
            try:
                conn.writer.write(payload)
                await conn.writer.drain()
                return await self._read_head(key, conn, method)
            except (OSError, EOFError, asyncio.IncompleteReadError) as exc:
                conn.close()
                if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                    raise UpstreamError(f"{host}:{port} broke its answer: {exc}") from exc
                if reused:
                    continue  # a stale keep-alive connection: again, on a fresh one
                raise UpstreamError(f"{host}:{port} closed the connection: {exc!r}") from exc
            except asyncio.LimitOverrunError as exc:
                conn.close()
                raise UpstreamError(f"{host}:{port} sent an oversized head") from exc
            except BaseException:
                conn.close()
                raise

    def _take(self, key: tuple[str, int]) -> _Connection | None:
        idle = self._idle.get(key)
        now = time.monotonic()
        while idle:
            conn = idle.pop()
            if conn.usable() and now - conn.idle_since < self.idle_s:
                return conn
            conn.close()
        return None

    def release(self, key: tuple[str, int], conn: _Connection) -> None:
        """Put a connection whose answer was fully read back in its pool."""
        idle = self._idle.setdefault(key, [])
        if len(idle) >= self.max_idle or not conn.usable():
            conn.close()
            return
        conn.idle_since = time.monotonic()
        idle.append(conn)

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        try:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(key[0], key[1], limit=_HEAD_LIMIT), self.connect_timeout_s
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamError(f"{key[0]}:{key[1]} unreachable: {exc!r}", sent_nothing=True) from exc
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return _Connection(reader, writer)

    async def _read_head(self, key: tuple[str, int], conn: _Connection, method: str) -> UpstreamResponse:
        while True:
            raw = await conn.reader.readuntil(b"\r\n\r\n")
            lines = raw[:-4].split(b"\r\n")
            version, _, rest = lines[0].partition(b" ")
            status = int(rest[:3])
            if 100 <= status < 200 and status != 101:
                continue  # an interim answer (100 Continue): the real one follows
            break
        headers: list[tuple[bytes, bytes]] = []
        length = -1
        chunked = False
        keep = version == b"HTTP/1.1"
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            value = value.strip()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = value.lower().endswith(b"chunked")
                continue
            elif name == b"connection":
                tokens = value.lower()
                keep = b"close" not in tokens if keep else b"keep-alive" in tokens
                continue
            headers.append((name, value))
        if method == "HEAD" or status in _NO_BODY_STATUS or status < 200:
            framing, length = "none", 0
        elif chunked:
            framing = "chunked"
        elif length >= 0:
            framing = "length" if length else "none"
        else:
            framing = "close"
        if framing != "none":
            return UpstreamResponse(self, key, conn, status, headers, framing=framing, length=length, keep=keep)
        if keep:
            self.release(key, conn)
        else:
            conn.close()
        return UpstreamResponse(self, key, None, status, headers, framing=framing, length=0, keep=keep)

    def forget(self, host: str, port: int) -> None:
        """Close the idle connections to a replica that is gone."""
        for conn in self._idle.pop((host, port), []):
            conn.close()

    async def close(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
