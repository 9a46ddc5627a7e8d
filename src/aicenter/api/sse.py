"""Server-sent event responses: every SSE endpoint answers through :func:`event_stream`.

sse-starlette writes the stream, sends a keep-alive comment (``: ping - <time>``) every ``ping_s`` seconds while
the source is quiet, so a proxy that closes idle connections (nginx after 60 s by default) keeps a quiet job's
live log open, and stops the source when the client goes away. ``EventSource`` ignores comments.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from sse_starlette import EventSourceResponse, ServerSentEvent

__all__ = ["EventSourceResponse", "encode_event", "event_stream"]

# The line separator of every event: "\n" (the format the console and the tests read; "\r\n" is also valid SSE).
SEP = "\n"


def encode_event(data: str, *, id: str | None = None, event: str | None = None) -> bytes:
    """One event as bytes, so that a source can send many events in one write (a busy log yields thousands)."""
    return ServerSentEvent(data, id=id, event=event, sep=SEP).encode()


def event_stream(events: AsyncIterator[bytes], *, ping_s: float) -> EventSourceResponse:
    """A ``text/event-stream`` response of ``events`` (encoded with :func:`encode_event`), pinged every ``ping_s``."""
    return EventSourceResponse(events, ping=ping_s, sep=SEP, headers={"Cache-Control": "no-cache"})
