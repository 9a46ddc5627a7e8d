"""ASGI middleware: a request id on every response, the client's address behind trusted proxies, and HSTS.
Pure ASGI rather than BaseHTTPMiddleware, which costs a task and a stream copy per request."""

from __future__ import annotations

import ipaddress
import secrets
from collections.abc import Sequence

from starlette.types import ASGIApp, Message, Receive, Scope, Send

REQUEST_ID_HEADER = b"x-request-id"
FORWARDED_FOR_HEADER = b"x-forwarded-for"
HSTS_HEADER = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")

IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


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


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def _in(networks: Sequence[IpNetwork], host: str) -> bool:
    address = _address(host)
    return address is not None and any(address in network for network in networks)


class ClientAddressMiddleware:
    """Sets ``scope["client"]`` to the client behind trusted reverse proxies.

    Only a request whose socket peer is a trusted proxy has its ``X-Forwarded-For`` read, and from the right
    (each proxy appends the address it got the request from): the client is the nearest hop that is not itself
    a trusted proxy. Anything left of it was written by the client and proves nothing. A request from any other
    peer keeps the peer's address, so a forged header cannot pick the address that the login limiter counts
    failures against or that the audit log records. uvicorn's own proxy-header handling, which trusts
    127.0.0.1 by default, is switched off by `aicenter up` so that this is the only place that decides.
    """

    def __init__(self, app: ASGIApp, trusted_proxies: Sequence[IpNetwork]) -> None:
        self.app = app
        self.trusted = list(trusted_proxies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client")
        if scope["type"] in ("http", "websocket") and client and _in(self.trusted, client[0]):
            values = [value for name, value in scope.get("headers") or [] if name == FORWARDED_FOR_HEADER]
            hops = [hop.strip() for hop in b",".join(values).decode("latin-1").split(",") if hop.strip()]
            client_hop = next((hop for hop in reversed(hops) if not _in(self.trusted, hop)), None)
            if client_hop is None and hops:  # every hop is a trusted proxy: the first one made the request
                client_hop = hops[0]
            # A hop that is not an address (a proxy passing on junk) tells nothing: keep the proxy's own.
            if client_hop is not None and _address(client_hop) is not None:
                scope["client"] = (client_hop, 0)
        await self.app(scope, receive, send)


class HstsMiddleware:
    """``Strict-Transport-Security`` on every response: installed when the public URL is https, so that a
    browser that once reached the server never again sends a session cookie over plain HTTP."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_hsts(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), HSTS_HEADER]
            await send(message)

        await self.app(scope, receive, send_with_hsts)
