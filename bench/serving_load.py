"""The load side of bench/serving.py: a raw asyncio HTTP/1.1 keep-alive client, the small ONNX model, quantiles.

One client for every target (the gateway, a replica's published port, Ray Serve's proxy), so that differences
between them are the servers' and not the client's. It is asyncio streams on uvloop with TCP_NODELAY, one
connection per worker, ``Content-Length`` and chunked replies: about a tenth of httpx's own cost per request, so
on a small host the client takes as little as it can of the CPU it shares with the servers.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections import Counter
from collections.abc import Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

__all__ = [
    "BODY",
    "ClientError",
    "Connection",
    "SteadyLoad",
    "Target",
    "burst",
    "closed_loop",
    "interleaved_latency",
    "quantiles",
    "run_async",
    "throughput",
    "write_model",
]

T = TypeVar("T")
# The request every target gets: one 1x3 FP32 tensor, the V2 JSON form (no binary extension).
BODY = json.dumps({"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}).encode()
REQUEST_TIMEOUT_S = 120.0  # a request held by the activator while a replica starts still answers well within this


class ClientError(Exception):
    """A request that got no HTTP answer (refused, reset, closed, timed out)."""


def write_model(directory: Path, scale: float = 2.0, offset: float = 1.0) -> None:
    """``model.onnx`` computing Y = scale * X + offset on a [batch, 3] FP32 input ``X`` (two graph nodes)."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "scale"], ["T"]), helper.make_node("Add", ["T", "offset"], ["Y"])],
        "affine",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3])],
        [
            helper.make_tensor("scale", TensorProto.FLOAT, [], [scale]),
            helper.make_tensor("offset", TensorProto.FLOAT, [], [offset]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    directory.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(directory / "model.onnx"))


def quantiles(samples: list[float], scale: float = 1000.0, digits: int = 3) -> dict[str, Any]:
    """n, p50, p99 and max of ``samples`` (seconds) in milliseconds (``scale``); None where there are none."""
    if not samples:
        return {"n": 0, "p50": None, "p99": None, "max": None}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] * scale, digits)

    return {"n": len(ordered), "p50": at(0.5), "p99": at(0.99), "max": round(ordered[-1] * scale, digits)}


def run_async(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on a fresh uvloop loop (the servers' own loop; asyncio's where uvloop is missing)."""
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop comes with uvicorn[standard]
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coro)


@dataclass(frozen=True)
class Target:
    """Where requests go: ``name`` labels the figures; ``headers`` carry credentials (a service key)."""

    name: str
    host: str
    port: int
    path: str
    headers: tuple[tuple[str, str], ...] = ()

    def request(self, body: bytes = BODY) -> bytes:
        lines = [f"POST {self.path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Content-Type: application/json"]
        lines += [f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in self.headers)]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


@dataclass(slots=True)
class Reply:
    status: int
    headers: dict[bytes, bytes]
    body: bytes


async def _read_reply(reader: asyncio.StreamReader) -> Reply:
    status_line = await reader.readline()
    if not status_line:
        raise ClientError("the server closed the connection")
    status = int(status_line.split(b" ", 2)[1])
    headers: dict[bytes, bytes] = {}
    while (line := await reader.readline()) not in (b"\r\n", b"\n", b""):
        name, _, value = line.partition(b":")
        headers[name.strip().lower()] = value.strip()
    if headers.get(b"transfer-encoding", b"").lower() == b"chunked":
        chunks = []
        while size := int((await reader.readline()).split(b";")[0], 16):
            chunks.append(await reader.readexactly(size))
            await reader.readexactly(2)
        while (await reader.readline()) not in (b"\r\n", b"\n", b""):  # trailers
            pass
        return Reply(status, headers, b"".join(chunks))
    return Reply(status, headers, await reader.readexactly(int(headers.get(b"content-length", b"0"))))


class Connection:
    """One keep-alive connection to a target, opened on first use and again after the server closed it."""

    def __init__(self, target: Target, body: bytes = BODY) -> None:
        self.target, self.payload = target, target.request(body)
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def send(self) -> Reply:
        try:
            return await asyncio.wait_for(self._send(), REQUEST_TIMEOUT_S)
        except (OSError, EOFError, ValueError, TimeoutError, ClientError) as exc:
            self.close()
            raise ClientError(f"{type(exc).__name__}: {exc}") from None

    async def _send(self) -> Reply:
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.target.host, self.target.port)
            sock = self.writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        assert self.reader is not None
        self.writer.write(self.payload)
        reply = await _read_reply(self.reader)
        if reply.headers.get(b"connection", b"").lower() == b"close":
            self.close()
        return reply

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


async def interleaved_latency(targets: list[Target], count: int, block: int = 100) -> dict[str, list[float]]:
    """``count`` sequential requests per target on one connection each, the targets taking turns in blocks of
    ``block`` (a busy moment on the host hits all of them alike), after 200 warm-up requests each."""
    conns = {t.name: Connection(t) for t in targets}
    samples: dict[str, list[float]] = {t.name: [] for t in targets}
    for conn in conns.values():
        for _ in range(200):
            await conn.send()
    for _ in range(max(1, count // block)):
        for name, conn in conns.items():
            for _ in range(block):
                began = time.perf_counter()
                reply = await conn.send()
                samples[name].append(time.perf_counter() - began)
                if reply.status != 200:
                    raise ClientError(f"{name}: status {reply.status}: {reply.body[:200]!r}")
    for conn in conns.values():
        conn.close()
    return samples


async def closed_loop(target: Target, concurrency: int, seconds: float, warmup_s: float = 1.0) -> dict[str, Any]:
    """``concurrency`` connections sending back to back for ``warmup_s`` + ``seconds``; the latency of every 200
    answered after the warm-up, and every non-200 or failed request counted (see :func:`throughput`)."""
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    now = time.perf_counter()
    record_after, stop_at = now + warmup_s, now + warmup_s + seconds

    async def worker() -> None:
        conn = Connection(target)
        while (began := time.perf_counter()) < stop_at:
            try:
                reply = await conn.send()
            except ClientError as exc:
                errors[str(exc)[:80]] += 1
                continue
            if reply.status != 200:
                errors[str(reply.status)] += 1
            elif began >= record_after:
                latencies.append(time.perf_counter() - began)
        conn.close()

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return {"seconds": seconds, "latencies": latencies, "errors": errors}


def throughput(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Requests/s and latency (ms) over several :func:`closed_loop` runs of one target: the 200s answered in the
    measured windows over their total length (the last ones finish just past a window: negligible)."""
    latencies = [x for run in runs for x in run["latencies"]]
    seconds = sum(run["seconds"] for run in runs)
    errors: Counter[str] = sum((run["errors"] for run in runs), Counter())
    return {
        "rps": round(len(latencies) / seconds, 1),
        "rps_per_run": [round(len(run["latencies"]) / run["seconds"], 1) for run in runs],
        "latency_ms": quantiles(latencies),
        "errors": dict(errors),
    }


async def burst(target: Target, count: int) -> dict[str, Any]:
    """``count`` requests at once, each on a new connection; statuses, failures and when the answers came."""
    statuses: Counter[str] = Counter()
    failures: list[str] = []
    times: list[float] = []
    began = time.perf_counter()

    async def one() -> None:
        conn = Connection(target)
        try:
            reply = await conn.send()
        except ClientError as exc:
            failures.append(str(exc))
            return
        finally:
            conn.close()
        statuses[str(reply.status)] += 1
        times.append(time.perf_counter() - began)
        if reply.status != 200:
            failures.append(f"{reply.status} {reply.body[:200]!r}")

    await asyncio.gather(*(one() for _ in range(count)))
    return {
        "requests": count,
        "statuses": dict(statuses),
        "failed": len(failures),
        "failures": failures[:5],
        "answered_after_s": quantiles(times, scale=1.0),
    }


@dataclass
class SteadyLoad:
    """``connections`` clients each sending a request, then pausing ``pause_s``, until stopped (a thread with its
    own loop, so the caller drives the platform meanwhile); every status, serving revision and failure counted."""

    target: Target
    connections: int = 4
    pause_s: float = 0.01
    statuses: Counter[str] = field(default_factory=Counter)
    revisions: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)
    unanswered: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    async def _client(self) -> None:
        conn = Connection(self.target)
        while not self._stop.is_set():
            began = time.perf_counter()
            try:
                reply = await conn.send()
            except ClientError as exc:
                self.unanswered += 1
                self.failures.append(str(exc))
            else:
                self.latencies.append(time.perf_counter() - began)
                self.statuses[str(reply.status)] += 1
                self.revisions[reply.headers.get(b"x-aicenter-revision", b"?").decode()] += 1
                if reply.status != 200:
                    self.failures.append(f"{reply.status} {reply.body[:200]!r}")
            await asyncio.sleep(self.pause_s)
        conn.close()

    async def _main(self) -> None:
        await asyncio.gather(*(self._client() for _ in range(self.connections)))

    def __enter__(self) -> SteadyLoad:
        self._thread = threading.Thread(target=run_async, args=(self._main(),), name="steady-load", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=REQUEST_TIMEOUT_S + 10)

    def summary(self) -> dict[str, Any]:
        """The counts (once stopped)."""
        return {
            "connections": self.connections,
            "pause_s": self.pause_s,
            "requests": sum(self.statuses.values()) + self.unanswered,
            "statuses": dict(self.statuses),
            "by_revision": dict(self.revisions),
            "failed": len(self.failures),
            "failures": self.failures[:5],
            "latency_ms": quantiles(self.latencies),
        }
