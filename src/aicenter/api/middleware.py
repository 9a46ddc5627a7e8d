"""ASGI middleware: a request id on every response. Pure ASGI rather than BaseHTTPMiddleware, which costs
a task and a stream copy per request."""

from __future__ import annotations

import secrets

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"


class RequestIdMiddleware:
    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        incoming = dict(scope.get("headers") or []).get(REQUEST_ID_HEADER)
        # Accept a caller's id only if it is short and plain, so that it is safe to log.
        request_id = (
            incoming.decode("latin-1")
            if incoming and len(incoming) <= 64 and incoming.replace(b"-", b"").isalnum()
            else secrets.token_hex(8)
        )
        scope.setdefault("state", {})["request_id"] = request_id

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message.setdefault("headers", [])
                message["headers"] = [*message["headers"], (REQUEST_ID_HEADER, request_id.encode())]
            await send(message)

        await self.app(scope, receive, send_with_id)
