"""The one place where errors become HTTP responses: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from aicenter.core.errors import AicenterError

log = logging.getLogger(__name__)

_HTTP_CODES = {
    400: "bad_request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    409: "conflict",
    413: "too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}


def error_body(code: str, message: str, details: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def _field_path(loc: tuple[Any, ...]) -> str:
    """``("body", "tasks", 0, "resources")`` -> ``tasks[0].resources``."""
    parts = [p for p in loc if p not in ("body", "query", "path", "header", "cookie")]
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or ".".join(str(p) for p in loc)


def _describe(error: Any) -> dict[str, str]:
    """One validation error as ``{"field", "message", "type"}``."""
    if error.get("type") == "json_invalid":
        # FastAPI's location is ("body", <character position>), which would read as a list index "[3]".
        loc = tuple(error.get("loc", ()))
        where = f" at position {loc[-1]}" if loc and isinstance(loc[-1], int) else ""
        reason = (error.get("ctx") or {}).get("error", "")
        message = f"the body is not valid JSON{where}" + (f": {reason}" if reason else "")
        return {"field": "body", "message": message, "type": "json_invalid"}
    return {
        "field": _field_path(tuple(error.get("loc", ()))),
        "message": error.get("msg", ""),
        "type": error.get("type", ""),
    }


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(AicenterError)
    async def _domain(request: Request, exc: AicenterError) -> JSONResponse:
        headers = {}
        if exc.status == 401:
            headers["WWW-Authenticate"] = "Bearer"
        if exc.status == 429 and "retry_after_s" in exc.details:
            headers["Retry-After"] = str(exc.details["retry_after_s"])
        return JSONResponse(error_body(exc.code, exc.message, exc.details), status_code=exc.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_describe(e) for e in exc.errors()]
        first = errors[0] if errors else {"field": "", "message": "invalid request"}
        whole_body = first.get("type") == "json_invalid"  # "body: the body is ..." would say it twice
        message = f"{first['field']}: {first['message']}" if first["field"] and not whole_body else first["message"]
        return JSONResponse(
            error_body("validation_failed", message, {"field": first["field"], "errors": errors}), status_code=422
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 400 and isinstance(exc.__cause__, UnicodeDecodeError):
            # FastAPI turns a JSON body that is not UTF-8 into a bare 400 ("error parsing the body"); it is a
            # malformed body like any other, so it gets the same 422 as invalid JSON.
            bad = exc.__cause__
            message = (
                f"the body is not valid UTF-8 (byte 0x{bad.object[bad.start]:02x} at position {bad.start}); "
                "send JSON encoded as UTF-8"
            )
            error = {"field": "body", "message": message, "type": "json_invalid"}
            return JSONResponse(
                error_body("validation_failed", message, {"field": "body", "errors": [error]}),
                status_code=422,
            )
        code = _HTTP_CODES.get(exc.status_code, "error")
        message = exc.detail if isinstance(exc.detail, str) else code
        return JSONResponse(error_body(code, message), status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        request_id = getattr(request.state, "request_id", None)
        log.exception("unhandled error in %s %s (request %s)", request.method, request.url.path, request_id)
        return JSONResponse(
            error_body(
                "internal",
                "internal server error; the request id identifies it in the server log",
                {"request_id": request_id},
            ),
            status_code=500,
        )
