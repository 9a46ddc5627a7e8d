"""What the serving gateway adds to an inference request; prints one JSON object.

Three processes on this host: a trivial upstream (a raw ASGI app answering a 40-byte JSON body, uvicorn with
httptools, 1 worker), the gateway in front of it (``ServingGateway`` on uvicorn with httptools, 1 worker, a
static route table with one service, one revision, one replica, an API key), and this one, the client. The client
is the gateway's own keep-alive HTTP/1.1 client (``UpstreamPool``), the leanest at hand, so the difference
between the two paths is the gateway's and not the client's.

* ``latency``: ``--requests`` sequential POSTs of a small JSON body on one keep-alive connection, direct and
  through the gateway, interleaved in blocks of 100; p50/p99 of each and the p50/p99 differences.
* ``throughput``: ``--seconds`` of ``c`` concurrent connections each sending back to back (c = 16 and 64),
  direct and through the gateway; requests/s.

    python bench/gateway_overhead.py [--requests 3000] [--seconds 3]

Measured here (2 shared CPUs, load ~1, uvloop, 2,000 requests, 2 s per run): direct p50 0.27 ms / p99 0.42 ms,
through the gateway p50 0.59 ms / p99 0.83 ms: the gateway adds 0.32 ms at p50 and 0.41 ms at p99 (goal <= 1 ms).
Requests/s direct vs through: 11,100 vs 2,620 at 16 connections, 8,000 vs 2,800 at 64 (three processes on two
cores: the gateway's throughput here is CPU-bound by sharing, not by waiting).
Adding the replica's serve token to each request (issue 14) changed nothing measurable: the gateway added
0.289 ms p50 / 0.682 ms p99 before and 0.271 / 0.701 ms after, run back to back (load ~1.4, 2,000 requests).

With 2 shared cores the three processes compete for CPU, so throughput through the gateway is bounded by the
gateway process and the upstream sharing them; on a larger host each gets its own core.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

SRC = Path(__file__).resolve().parents[1] / "src"
sys.path.insert(0, str(SRC))

from aicenter.core.serving.routing import Endpoint, RevisionRoute, RouteTable, ServiceRoute  # noqa: E402
from aicenter.gateway.upstream import UpstreamError, UpstreamPool  # noqa: E402

KEY = "bench-key"
PATH = b"/v2/models/m/infer"
BODY = b'{"inputs":[{"name":"x","shape":[1],"datatype":"FP32","data":[1.0]}]}'


async def _trivial(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    body = b'{"model_name":"m","outputs":[]}' if scope["path"] != "/v2/health/ready" else b"{}"
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def _run_upstream(port: int) -> None:
    import uvicorn

    uvicorn.run(_trivial, host="127.0.0.1", port=port, http="httptools", log_level="warning", lifespan="off")


def _run_gateway(port: int, upstream: int) -> None:
    import uvicorn

    from aicenter.gateway.serving import ServingGateway

    # With a serve token, as every replica of the platform has: the gateway sends it with each request.
    endpoint = Endpoint(1, "127.0.0.1", upstream, token=hashlib.sha256(b"bench").hexdigest())
    revision = RevisionRoute(1, 1, 100, endpoints=(endpoint,))
    service = ServiceRoute(
        1, "ws", 1, "m", (revision,), key_hashes=frozenset({hashlib.sha256(KEY.encode()).hexdigest()})
    )
    table = RouteTable({("ws", "m"): service}, version=1)

    async def load() -> RouteTable:
        return table

    async def resolve(token: str) -> None:
        return None

    async def activate(revision_id: int) -> None:
        return None

    gateway = ServingGateway(load_routes=load, resolve_token=resolve, activate=activate)

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await gateway.start()
                    await send({"type": "lifespan.startup.complete"})
                else:
                    await gateway.close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        await gateway(scope, receive, send)

    uvicorn.run(app, host="127.0.0.1", port=port, http="httptools", log_level="warning")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(*args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    return subprocess.Popen([sys.executable, __file__, *args], env=env)


async def _wait_up(pool: UpstreamPool, port: int, target: bytes, headers: list[tuple[bytes, bytes]]) -> None:
    for _ in range(400):
        with contextlib.suppress(UpstreamError, OSError):  # not up yet
            reply = await pool.request("127.0.0.1", port, "POST", target, headers, BODY)
            await reply.read()
            if reply.status == 200:
                return
        await asyncio.sleep(0.05)
    raise RuntimeError(f"nothing answers on port {port}")


def _quantiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(ordered[len(ordered) // 2] * 1000, 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000, 3),
    }


async def _one(pool: UpstreamPool, port: int, target: bytes, headers: list[tuple[bytes, bytes]]) -> float:
    start = time.perf_counter()
    reply = await pool.request("127.0.0.1", port, "POST", target, headers, BODY)
    await reply.read()
    if reply.status != 200:
        raise RuntimeError(f"status {reply.status}")
    return time.perf_counter() - start


async def _bench(upstream: int, gateway: int, requests: int, seconds: float) -> dict[str, Any]:
    direct = (upstream, PATH, [(b"content-type", b"application/json")])
    through = (gateway, b"/serve/ws/m" + PATH, [(b"content-type", b"application/json"), (b"x-api-key", KEY.encode())])
    pool = UpstreamPool()
    await _wait_up(pool, *direct)
    await _wait_up(pool, *through)
    for path in (direct, through):  # warm up both (imports, pools, caches)
        for _ in range(200):
            await _one(pool, *path)
    samples: dict[str, list[float]] = {"direct": [], "gateway": []}
    for _ in range(max(1, requests // 100)):
        for name, path in (("direct", direct), ("gateway", through)):
            for _ in range(100):
                samples[name].append(await _one(pool, *path))
    latency = {name: _quantiles(values) for name, values in samples.items()}
    latency["added_p50_ms"] = round(latency["gateway"]["p50_ms"] - latency["direct"]["p50_ms"], 3)
    latency["added_p99_ms"] = round(latency["gateway"]["p99_ms"] - latency["direct"]["p99_ms"], 3)

    async def load(path: tuple[int, bytes, list[tuple[bytes, bytes]]], concurrency: int) -> float:
        stop = time.perf_counter() + seconds
        done = 0

        async def worker() -> None:
            nonlocal done
            while time.perf_counter() < stop:
                await _one(clients, *path)
                done += 1

        clients = UpstreamPool(max_idle=concurrency)
        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
        await clients.close()
        return round(done / elapsed, 1)

    throughput = {}
    for concurrency in (16, 64):
        throughput[f"c{concurrency}"] = {
            "direct_rps": await load(direct, concurrency),
            "gateway_rps": await load(through, concurrency),
        }
    await pool.close()
    return {"latency": latency, "throughput": throughput}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--role", choices=["bench", "upstream", "gateway"], default="bench")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--upstream", type=int, default=0)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    if args.role == "upstream":
        _run_upstream(args.port)
        return
    if args.role == "gateway":
        _run_gateway(args.port, args.upstream)
        return
    upstream_port, gateway_port = _free_port(), _free_port()
    procs = [
        _spawn("--role", "upstream", "--port", str(upstream_port)),
        _spawn("--role", "gateway", "--port", str(gateway_port), "--upstream", str(upstream_port)),
    ]
    try:
        result = asyncio.run(_bench(upstream_port, gateway_port, args.requests, args.seconds))
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(10)
    result["host"] = {"cpus": os.cpu_count(), "python": platform.python_version(), "load": os.getloadavg()[0]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
