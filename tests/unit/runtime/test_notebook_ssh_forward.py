"""The gateway's and the agent's TCP forward (``open_forward``) keeps what the target says before the channel opens.

An SSH server speaks first: its banner can arrive between the TCP connect and asyncssh connecting the channel
side. asyncssh's own forwarder loses those bytes, and ``ssh`` through the gateway then failed now and then with
"banner line contains invalid characters". Here the target writes on accept and the channel side is connected
only after the bytes have arrived, which is that race made certain.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aicenter.runtime.notebook_ssh import open_forward


class _Channel:
    """What asyncssh hands the session as its transport: the bytes written to the client."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.eof = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def write(self, data: bytes) -> None:
        self.written += data

    def write_eof(self) -> None:
        self.eof = True

    def close(self) -> None:
        pass


async def _forward(close_after_banner: bool) -> _Channel:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"SSH-2.0-target\r\n")
        await writer.drain()
        if close_after_banner:
            writer.close()
            return
        got = await reader.read(100)
        writer.write(b"echo " + got)
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    inputs: list[int] = []
    try:
        session = await open_forward("127.0.0.1", port, lambda: inputs.append(1))
        await asyncio.sleep(0.1)  # the banner arrives while the channel is not open yet
        channel = _Channel()
        session.connection_made(channel)  # type: ignore[arg-type]
        assert bytes(channel.written) == b"SSH-2.0-target\r\n"
        if not close_after_banner:
            session.data_received(b"hi", None)
            for _ in range(100):
                if channel.written.endswith(b"echo hi"):
                    break
                await asyncio.sleep(0.01)
            assert inputs == [1]
        else:
            for _ in range(100):
                if channel.eof:
                    break
                await asyncio.sleep(0.01)
        return channel
    finally:
        server.close()
        await server.wait_closed()


def test_the_targets_first_bytes_reach_a_channel_opened_after_them() -> None:
    channel = asyncio.run(_forward(close_after_banner=False))
    assert bytes(channel.written) == b"SSH-2.0-target\r\necho hi"


def test_an_eof_before_the_channel_opens_follows_the_early_bytes() -> None:
    channel = asyncio.run(_forward(close_after_banner=True))
    assert (bytes(channel.written), channel.eof) == (b"SSH-2.0-target\r\n", True)
