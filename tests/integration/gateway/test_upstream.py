"""The gateway's HTTP/1.1 client against raw asyncio servers that answer exactly as scripted: each framing, and a
replica that closes a kept-alive connection under the client's feet."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest

from aicenter.gateway.upstream import UpstreamError, UpstreamPool

Handler = Callable[[int, int, bytes], Awaitable[bytes | None]]  # (connection no, request no on it, head) -> reply


@dataclass
class Scripted:
    """A server that reads request heads (and Content-Length bodies) and writes what ``handler`` returns; None
    closes the connection without answering, and so does an HTTP/1.0 or ``connection: close`` answer after it."""

    handler: Handler
    connections: int = 0
    requests: list[bytes] = field(default_factory=list)
    port: int = 0

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        number = self.connections
        served = 0
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in head.split(b"\r\n"):
                    if line.lower().startswith(b"content-length:"):
                        length = int(line.split(b":")[1])
                body = await reader.readexactly(length)
                self.requests.append(head + body)
                served += 1
                reply = await self.handler(number, served, head)
                if reply is None:
                    break
                writer.write(reply)
                await writer.drain()
                if reply.startswith(b"HTTP/1.0") or b"connection: close" in reply:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[[Handler], Awaitable[Scripted]]]:
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> Scripted:
        script = Scripted(handler)
        server = await asyncio.start_server(script.serve, "127.0.0.1", 0)
        servers.append(server)
        script.port = server.sockets[0].getsockname()[1]
        return script

    yield start
    for server in servers:
        server.close()


def ok(body: bytes, *extra: bytes) -> bytes:
    return b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\n%s\r\n%s" % (
        len(body),
        b"".join(e + b"\r\n" for e in extra),
        body,
    )


async def test_keep_alive_reuses_one_connection(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(conn: int, n: int, head: bytes) -> bytes:
        return ok(b"answer %d" % n, b"x-replica: a")

    server = await scripted(handler)
    pool = UpstreamPool()
    for n in (1, 2, 3):
        reply = await pool.request("127.0.0.1", server.port, "POST", b"/v2/x?q=1", [(b"x-h", b"v")], b"{}")
        assert (reply.status, await reply.read()) == (200, b"answer %d" % n)
        assert (b"x-replica", b"a") in reply.headers
    assert server.connections == 1
    assert server.requests[0].startswith(b"POST /v2/x?q=1 HTTP/1.1\r\n")
    assert b"\r\nx-h: v\r\n" in server.requests[0]
    assert server.requests[0].endswith(b"content-length: 2\r\n\r\n{}")
    await pool.close()


async def test_chunked_and_close_delimited_bodies(scripted: Callable[[Handler], Awaitable[Scripted]]) -> None:
    async def handler(conn: int, n: int, head: bytes) -> bytes | None:
        if head.startswith(b"GET /chunked"):
            head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"
            return head + b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nx-t: 1\r\n\r\n"  # an extension, a trailer
        return b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end"

    server = await scripted(handler)
    pool = UpstreamPool()
    chunked = await pool.request("127.0.0.1", server.port, "GET", b"/chunked", ())
    assert chunked.streaming
    assert [piece async for piece in chunked.body()] == [b"hello", b" world"]
    again = await pool.request("127.0.0.1", server.port, "GET", b"/chunked", ())
    assert await again.read() == b"hello world"
    assert server.connections == 1  # the chunked answer left the connection reusable
    closing = await pool.request("127.0.0.1", server.port, "GET", b"/close", ())
    assert closing.streaming
    assert await closing.read() == b"until the end"
    await pool.close()


async def test_a_stale_keep_alive_connection_is_retried_on_a_fresh_one(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(conn: int, n: int, head: bytes) -> bytes | None:
        if n == 2:
            return None  # the replica dropped the idle connection just as the request arrived
        return ok(b"conn %d" % conn)

    server = await scripted(handler)
    pool = UpstreamPool()
    first = await pool.request("127.0.0.1", server.port, "POST", b"/infer", (), b"1")
    assert await first.read() == b"conn 1"
    second = await pool.request("127.0.0.1", server.port, "POST", b"/infer", (), b"2")
    assert await second.read() == b"conn 2"
    assert server.connections == 2
    await pool.close()


async def test_an_idle_connection_closed_by_the_replica_is_not_used(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(conn: int, n: int, head: bytes) -> bytes | None:
        return ok(b"conn %d" % conn, b"connection: close") if conn == 1 else ok(b"conn %d" % conn)

    server = await scripted(handler)
    pool = UpstreamPool()
    assert await (await pool.request("127.0.0.1", server.port, "GET", b"/", ())).read() == b"conn 1"
    assert await (await pool.request("127.0.0.1", server.port, "GET", b"/", ())).read() == b"conn 2"
    assert len(server.requests) == 2  # nothing was sent on the closed connection
    await pool.close()


async def test_an_unreachable_replica_raises() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again: nothing listens there
    pool = UpstreamPool()
    with pytest.raises(UpstreamError) as caught:
        await pool.request("127.0.0.1", port, "GET", b"/", ())
    assert caught.value.sent_nothing


async def test_a_replica_that_answers_nothing_on_a_fresh_connection_raises(
    scripted: Callable[[Handler], Awaitable[Scripted]],
) -> None:
    async def handler(conn: int, n: int, head: bytes) -> None:
        return None

    server = await scripted(handler)
    pool = UpstreamPool()
    with pytest.raises(UpstreamError):
        await pool.request("127.0.0.1", server.port, "POST", b"/infer", (), b"{}")
    assert server.connections == 1  # a fresh connection is not retried here: the gateway tries another replica
