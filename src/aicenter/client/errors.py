"""Errors the SDK raises: every failure is an :class:`ApiError`, so one ``except`` clause covers them all."""

from __future__ import annotations

from typing import Any

__all__ = ["ApiError", "ConnectionFailed"]


class ApiError(Exception):
    """The server answered with an error, parsed from ``{"error": {"code", "message", "details"}}``.

    Attributes:
        status: HTTP status (0 when no answer came back, see :class:`ConnectionFailed`).
        code: Stable machine-readable code such as ``not_found`` or ``validation_failed``.
        message: Human-readable message.
        details: Extra data; ``details["field"]`` names the offending field of a ``validation_failed``.
        request_id: The server's request id, to find the request in its log.
    """

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        details: dict[str, Any] | None = None,
        *,
        request_id: str | None = None,
    ) -> None:
        super().__init__(f"{code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.details = details or {}
        self.request_id = request_id

    @property
    def field(self) -> str | None:
        """The field path a validation error names, if any."""
        field = self.details.get("field")
        return str(field) if field else None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r}, message={self.message!r})"


class ConnectionFailed(ApiError):
    """No answer from the server: refused, unreachable, timed out, or a broken TLS handshake."""

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(0, "connection_failed", f"cannot reach {url}: {reason}")
        self.url = url
        self.reason = reason
