"""The in-replica model server: ``python -m aicenter.runtime.serve`` (Open Inference Protocol v2 over HTTP/1.1).

It reads the replica environment of the serving contract (``AICENTER_SERVE_BIND``/``AICENTER_SERVE_PORT``,
``AICENTER_MODEL_DIR``, ``AICENTER_SERVE_CONFIG``), binds the port at once, and loads the model in a background
thread: liveness answers from the first moment, readiness (``/v2/health/ready``) turns 200 once the model is
loaded (the spec's "4xx means false": 400 before). A model that fails to load is fatal: the reason goes to stderr
and the process exits 1, so the platform marks the revision failed with it.

The HTTP layer is asyncio streams, not uvicorn: it has to run in any image that has numpy and the model's
framework, nothing else. It does keep-alive, ``Content-Length`` and ``Transfer-Encoding: chunked`` request bodies,
``Expect: 100-continue``, a body size cap (413), and no pipelining (clients of this protocol do not pipeline).
``predict`` runs in a thread pool of ``AICENTER_SERVE_WORKERS`` (else the config's ``workers``) threads (default
1: most frameworks parallelise inside one call), so health probes answer while a long batch runs; a model whose
calls take under 1 ms runs on the event loop instead (``ModelServer._inline``).

Every request must carry the replica's serve token (``AICENTER_SERVE_TOKEN``) in ``X-Aicenter-Serve-Token``,
else it gets 401 and the connection closes: the port is published on the node, where more than the platform's
gateway can reach it, and the gateway and the controller's probes send the token. Without the variable (the
server run by hand) every request is served.

SIGTERM: the listener closes, requests in flight finish (up to 30 s), idle keep-alive connections are closed,
and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Coroutine
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from aicenter.runtime.serve_runtimes import Runtime, make_runtime
from aicenter.runtime.serve_v2 import V2Error, encode_infer_response, parse_infer_request, validate_inputs

__all__ = ["ModelServer", "main"]

DRAIN_S = 30.0
INLINE_AFTER = 8  # calls measured in the pool before a fast model may run inline
INLINE_UNDER_S = float(os.environ.get("AICENTER_SERVE_INLINE_UNDER_S", "0.001"))
DEFAULT_MAX_BODY = 64 * 1024 * 1024
_HEAD_LIMIT = 64 * 1024
# core.jobs.serving.SERVE_TOKEN_HEADER, spelled again: this module imports only the stdlib.
TOKEN_HEADER = "x-aicenter-serve-token"  # noqa: S105 - a header's name, not a secret
_REASONS = {
    100: b"Continue",
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    411: b"Length Required",
    413: b"Payload Too Large",
    415: b"Unsupported Media Type",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    501: b"Not Implemented",
    503: b"Service Unavailable",
}
_JSON = b"application/json"
_BINARY = b"application/octet-stream"
_UNAUTHORIZED = b'{"error":"this replica serves the platform only: the request has no valid serve token"}'


def _log(message: str) -> None:
    print(f"aicenter.serve: {message}", file=sys.stderr, flush=True)


def _json(status: int, doc: Any) -> tuple[int, bytes, bytes, int | None]:
    return status, _JSON, json.dumps(doc, separators=(",", ":")).encode(), None


class _BadRequest(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class ModelServer:
    """One model behind the V2 routes. ``handle`` is the whole application; the rest is HTTP plumbing."""

    def __init__(self, config: dict[str, Any], model_dir: Path, workers: int, token: str = "") -> None:
        self.config = config
        self.token = token.encode("latin-1")
        self.model_dir = model_dir
        # The V2 model name is the service's: the job spec's ``serving`` section says ``service``, SERVING.md's
        # early draft said ``model_name``; either is read.
        self.model_name = str(config.get("model_name") or config.get("service") or "model")
        self.model_version = str(config.get("model_version") or "1")
        self.max_body = int(config.get("max_body_bytes") or DEFAULT_MAX_BODY)
        self.runtime: Runtime = make_runtime(str(config.get("runtime") or ""))
        self.ready = False
        self.signature_inputs: list[dict[str, Any]] | None = None
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="predict")
        self.in_flight = 0
        self.infers = 0
        self.infer_avg_s = 0.0
        self.pool_busy = 0
        self.draining = False
        self.idle = asyncio.Event()
        self.idle.set()
        self.connections: set[asyncio.StreamWriter] = set()

    # -- model -----------------------------------------------------------------------------------------------

    def load(self) -> None:
        """Load the model (in a thread, off the event loop); raises whatever the runtime raised."""
        self.runtime.load(self.model_dir, self.config)
        signature = self.config.get("signature")
        if signature and signature.get("inputs"):
            self.signature_inputs = list(signature["inputs"])
        elif self.runtime.authoritative and self.runtime.metadata()["inputs"]:
            self.signature_inputs = self.runtime.metadata()["inputs"]
        self.ready = True

    def _metadata(self) -> dict[str, Any]:
        signature = self.runtime.metadata() if self.ready else {"inputs": [], "outputs": []}
        if not signature["inputs"] and not signature["outputs"]:
            signature = self.config.get("signature") or signature
        return {
            "name": self.model_name,
            "versions": [self.model_version],
            "platform": self.runtime.name,
            "inputs": signature.get("inputs") or [],
            "outputs": signature.get("outputs") or [],
        }

    def _infer(self, body: bytes, header_length: int | None) -> tuple[bytes, int | None]:
        started = time.perf_counter()
        try:
            request = parse_infer_request(body, header_length)
            if self.signature_inputs is not None:
                validate_inputs(request, self.signature_inputs)
            outputs = self.runtime.predict(request.inputs)
            return encode_infer_response(self.model_name, self.model_version, request, outputs)
        finally:
            took = time.perf_counter() - started
            self.infer_avg_s = took if self.infers == 0 else self.infer_avg_s + (took - self.infer_avg_s) / 16
            self.infers += 1

    def _inline(self) -> bool:
        # A thread hop (loop -> pool -> loop) costs ~150 us on a busy 2-core host, 15x a small ONNX model's run.
        # So a model whose calls have been short runs on the event loop, which it then holds no longer than a
        # request parse would; a slow one (or one not yet measured) goes to the pool and the loop keeps serving.
        return self.infers >= INLINE_AFTER and self.infer_avg_s < INLINE_UNDER_S and self.pool_busy == 0

    # -- routes ----------------------------------------------------------------------------------------------

    async def handle(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes, bytes, int | None]:
        """Route one request: ``(status, content type, body, Inference-Header-Content-Length or None)``."""
        parts = path.split("?", 1)[0].strip("/").split("/")
        if parts[0] != "v2":
            return _json(404, {"error": f"no route {path}"})
        if len(parts) == 1:
            return self._get(method) or _json(
                200, {"name": "aicenter", "version": "1", "extensions": ["binary_tensor_data"]}
            )
        if parts[1] == "health" and len(parts) == 3 and parts[2] in ("live", "ready"):
            if parts[2] == "live":
                return self._get(method) or _json(200, {"live": True})
            return self._get(method) or _json(200 if self.ready else 400, {"ready": self.ready})
        if parts[1] != "models" or len(parts) < 3:
            return _json(404, {"error": f"no route {path}"})
        if parts[2] != self.model_name:
            return _json(404, {"error": f"unknown model '{parts[2]}' (this server serves '{self.model_name}')"})
        rest = parts[3:]
        if len(rest) >= 2 and rest[0] == "versions":
            if rest[1] != self.model_version:
                return _json(404, {"error": f"unknown version '{rest[1]}' of model '{self.model_name}'"})
            rest = rest[2:]
        if not rest:
            return self._get(method) or _json(200, self._metadata())
        if rest == ["ready"]:
            return self._get(method) or _json(
                200 if self.ready else 400, {"name": self.model_name, "ready": self.ready}
            )
        if rest == ["infer"]:
            if method != "POST":
                return _json(405, {"error": "infer takes POST"})
            return await self._infer_route(headers, body)
        return _json(404, {"error": f"no route {path}"})

    @staticmethod
    def _get(method: str) -> tuple[int, bytes, bytes, int | None] | None:
        return None if method in ("GET", "HEAD") else _json(405, {"error": f"{method} is not allowed here"})

    async def _infer_route(self, headers: dict[str, str], body: bytes) -> tuple[int, bytes, bytes, int | None]:
        if not self.ready:
            return _json(503, {"error": f"model '{self.model_name}' is not ready"})
        raw_length = headers.get("inference-header-content-length")
        try:
            header_length = None if raw_length is None else int(raw_length)
        except ValueError:
            return _json(400, {"error": f"Inference-Header-Content-Length {raw_length!r} is not an integer"})
        loop = asyncio.get_running_loop()
        try:
            if self._inline():
                out, out_header = self._infer(body, header_length)
            else:
                self.pool_busy += 1
                try:
                    out, out_header = await loop.run_in_executor(self.pool, self._infer, body, header_length)
                finally:
                    self.pool_busy -= 1
        except V2Error as exc:
            return _json(exc.status, {"error": exc.message})
        except Exception as exc:  # the model's own failure: the client learns why, the log keeps it
            _log(f"predict failed: {type(exc).__name__}: {exc}")
            return _json(500, {"error": f"{type(exc).__name__}: {exc}"})
        return 200, (_JSON if out_header is None else _BINARY), out, out_header

    # -- HTTP/1.1 --------------------------------------------------------------------------------------------

    async def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.connections.add(writer)
        try:
            while not self.draining:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except asyncio.IncompleteReadError:
                    return
                except asyncio.LimitOverrunError:
                    writer.write(self._response(431, _JSON, b'{"error":"request head too large"}', None, False))
                    return
                self._begin()
                try:
                    keep = await self._one(head, reader, writer)
                finally:
                    self._end()
                if not keep:
                    return
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        except Exception as exc:  # a bug of ours on one connection: say so once, keep serving the others
            _log(f"connection dropped: {type(exc).__name__}: {exc}")
        finally:
            self.connections.discard(writer)
            with contextlib.suppress(Exception):
                writer.close()

    def _begin(self) -> None:
        self.in_flight += 1
        self.idle.clear()

    def _end(self) -> None:
        self.in_flight -= 1
        if self.in_flight == 0:
            self.idle.set()

    async def _one(self, head: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Serve one request whose head was read; returns whether the connection stays open."""
        lines = head[:-4].split(b"\r\n")
        try:
            method_b, target_b, version = lines[0].split(b" ", 2)
        except ValueError:
            writer.write(self._response(400, _JSON, b'{"error":"malformed request line"}', None, False))
            return False
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if sep:
                headers[name.strip().lower().decode("latin-1")] = value.strip().decode("latin-1")
        if self.token and not hmac.compare_digest(headers.get(TOKEN_HEADER, "").encode("latin-1"), self.token):
            await self._unauthorized(headers, reader, writer)
            return False
        connection = headers.get("connection", "").lower()
        keep = connection != "close" if version == b"HTTP/1.1" else connection == "keep-alive"
        try:
            body = await self._body(headers, reader, writer)
        except _BadRequest as exc:
            doc = json.dumps({"error": str(exc)}).encode()
            writer.write(self._response(exc.status, _JSON, doc, None, False))
            return False
        method = method_b.decode("latin-1")
        status, ctype, out, header_length = await self.handle(method, target_b.decode("latin-1"), headers, body)
        keep = keep and not self.draining
        writer.write(self._response(status, ctype, b"" if method == "HEAD" else out, header_length, keep, len(out)))
        if writer.transport.get_write_buffer_size() > 1 << 16:
            await writer.drain()
        return keep

    @classmethod
    async def _unauthorized(
        cls, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """401, and the connection closes. A small body is read first (briefly): closing with unread bytes would
        reset the connection, and the caller might never see why; a large one is not worth it."""
        length = headers.get("content-length", "")
        if length.isdigit() and int(length) <= _HEAD_LIMIT:
            with contextlib.suppress(asyncio.IncompleteReadError, TimeoutError):
                await asyncio.wait_for(reader.readexactly(int(length)), 1.0)
        writer.write(cls._response(401, _JSON, _UNAUTHORIZED, None, False))

    async def _body(self, headers: dict[str, str], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bytes:
        if headers.get("content-encoding", "identity").lower() != "identity":
            raise _BadRequest(415, f"Content-Encoding {headers['content-encoding']} is not supported")
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = headers.get("content-length")
        if not chunked and length is None:
            return b""
        if headers.get("expect", "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        if not chunked:
            try:
                size = int(length or "")
            except ValueError:
                raise _BadRequest(400, f"Content-Length {length!r} is not an integer") from None
            if size < 0:
                raise _BadRequest(400, "negative Content-Length")
            if size > self.max_body:
                raise _BadRequest(413, f"the body ({size} bytes) is over the limit of {self.max_body} bytes")
            return await reader.readexactly(size) if size else b""
        parts: list[bytes] = []
        total = 0
        while True:
            try:
                line = await reader.readuntil(b"\r\n")
                size = int(line.split(b";", 1)[0].strip(), 16)
                if size == 0:
                    while (await reader.readuntil(b"\r\n")) != b"\r\n":  # trailers, ignored
                        pass
                    return b"".join(parts)
            except (ValueError, asyncio.LimitOverrunError):
                raise _BadRequest(400, "malformed chunked body") from None
            total += size
            if total > self.max_body:
                raise _BadRequest(413, f"the body is over the limit of {self.max_body} bytes")
            parts.append((await reader.readexactly(size + 2))[:-2])

    @staticmethod
    def _response(
        status: int, ctype: bytes, body: bytes, header_length: int | None, keep: bool, length: int | None = None
    ) -> bytes:
        head = [
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
            % (status, _REASONS.get(status, b"Status"), ctype, len(body) if length is None else length)
        ]
        if header_length is not None:
            head.append(b"Inference-Header-Content-Length: %d\r\n" % header_length)
        if not keep:
            head.append(b"Connection: close\r\n")
        head.append(b"\r\n")
        head.append(body)
        return b"".join(head)


async def _serve(server: ModelServer, bind: str, port: int) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    listener = await asyncio.start_server(server.connection, bind, port, limit=_HEAD_LIMIT, reuse_address=True)
    port = listener.sockets[0].getsockname()[1]  # port 0 (tests): the log line says which one the OS chose
    _log(
        f"listening on {bind}:{port}, model '{server.model_name}' version {server.model_version} "
        f"({server.runtime.name} runtime), loading"
    )
    failure: list[str] = []
    started = time.monotonic()

    def load() -> None:
        try:
            server.load()
        except BaseException as exc:  # fatal: the reason is the revision's failure reason
            failure.append(f"{type(exc).__name__}: {exc}")
            loop.call_soon_threadsafe(stop.set)
            return
        loop.call_soon_threadsafe(
            _log, f"ready: model '{server.model_name}' loaded in {time.monotonic() - started:.2f} s"
        )

    threading.Thread(target=load, name="model-load", daemon=True).start()
    await stop.wait()
    listener.close()
    if failure:
        _log(f"model '{server.model_name}' failed to load: {failure[0]}")
        return 1
    _log(f"stopping: {server.in_flight} request(s) in flight")
    server.draining = True
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(server.idle.wait(), DRAIN_S)
    for writer in list(server.connections):  # idle keep-alive connections: nothing in flight on them now
        writer.close()
    server.pool.shutdown(wait=False, cancel_futures=True)
    _log("stopped")
    return 0


def _run(coroutine: Coroutine[Any, Any, int]) -> int:
    # uvloop where the image has it (the host image does: uvicorn[standard] brings it); interleaved runs here put
    # its infer p50 at 256-280 us against the stdlib loop's 251-378 us (a noisy 2-core host). Any other image runs
    # the stdlib loop, with the same behaviour (the tests run both).
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coroutine)
    return int(uvloop.run(coroutine))


def main() -> None:
    """Entry point: the replica environment in, an exit status out (0 after SIGTERM, 1 when the model fails)."""
    try:
        config = json.loads(os.environ.get("AICENTER_SERVE_CONFIG") or "{}")
        bind = os.environ.get("AICENTER_SERVE_BIND", "127.0.0.1")
        port = int(os.environ.get("AICENTER_SERVE_PORT") or os.environ.get("PORT") or "8080")
        model_dir = Path(os.environ.get("AICENTER_MODEL_DIR") or ".")
        workers = int(os.environ.get("AICENTER_SERVE_WORKERS") or config.get("workers") or 1)
        server = ModelServer(config, model_dir, workers, os.environ.get("AICENTER_SERVE_TOKEN", ""))
    except (ValueError, TypeError) as exc:
        _log(f"bad configuration: {exc}")
        sys.exit(2)
    code = _run(_serve(server, bind, port))
    # A load still running in its thread (or a predict that outlived the drain) must not hold the exit.
    sys.stdout.flush()
    os._exit(code)


if __name__ == "__main__":
    main()
