"""REST API throughput and latency of a real `aicenter up` server, on SQLite and on PostgreSQL.

For each backend (and each ``--workers`` count) the benchmark makes a throwaway home (and, for PostgreSQL, a
throwaway database), migrates it and seeds 10,000 audit events through the service layer, starts
``aicenter up``, and drives it from a separate load process with 64 concurrent keep-alive connections for
``--duration`` seconds per scenario:

* ``get_one``: ``GET /api/v1/users/me`` (bearer token, one row read);
* ``list_page``: ``GET /api/v1/audit-events?limit=50`` (the newest 50 of 10,000 rows).

It prints one JSON document: requests per second, p50 and p99 latency per scenario per backend. The load process
is a minimal asyncio HTTP/1.1 client (not httpx) so that it takes as little as possible of the CPU it shares with
the server; it still shares it. Goal: >= 1,000 req/s and p99 <= 50 ms for ``get_one``.

    python bench/api.py [--duration 10] [--backend sqlite --backend postgres] [--workers 1 --workers 2]
    python bench/api.py --profile      # also samples the server with py-spy during get_one and prints hot frames
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

ROWS = 10_000
ADMIN_PASSWORD = "bench-admin-Passw0rd"
PG_ADMIN_DSN = os.environ.get("AICENTER_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres")
SCENARIOS = {
    "get_one": "/api/v1/users/me",
    "list_page": "/api/v1/audit-events?limit=50",
}
GOAL = {"scenario": "get_one", "min_req_per_s": 1000, "max_p99_ms": 50}


# ------------------------------------------------------------------------------------------------- load client


async def _connection_loop(
    host: str, port: int, request: bytes, stop_at: float, record_after: float, out: list[float], errors: Counter[str]
) -> None:
    """One keep-alive connection sending ``request`` back to back; latencies after ``record_after`` go to ``out``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        while (start := time.perf_counter()) < stop_at:
            writer.write(request)
            status_line = await reader.readline()
            length = 0
            while (line := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.partition(b":")
                if name.lower() == b"content-length":
                    length = int(value)
            if length:
                await reader.readexactly(length)
            if not status_line:
                errors["closed"] += 1
                return
            code = status_line.split(b" ", 2)[1].decode()
            if code != "200":
                errors[code] += 1
            elif start >= record_after:
                out.append(time.perf_counter() - start)
    finally:
        writer.close()


async def _load(url: str, path: str, token: str, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {token}\r\n"
        "Accept: application/json\r\nConnection: keep-alive\r\n\r\n"
    ).encode()
    latencies: list[float] = []
    errors: Counter[str] = Counter()
    now = time.perf_counter()
    record_after, stop_at = now + warmup, now + warmup + duration
    await asyncio.gather(
        *(
            _connection_loop(host, int(port), request, stop_at, record_after, latencies, errors)
            for _ in range(concurrency)
        )
    )
    latencies.sort()
    n = len(latencies)
    return {
        "requests": n,
        "req_per_s": round(n / duration, 1),
        "p50_ms": round(1000 * latencies[n // 2], 2) if n else None,
        "p99_ms": round(1000 * latencies[min(n - 1, int(n * 0.99))], 2) if n else None,
        "mean_ms": round(1000 * statistics.fmean(latencies), 2) if n else None,
        "errors": dict(errors),
    }


def _client_main(argv: list[str]) -> None:
    url, path, token, concurrency, duration, warmup = argv
    result = asyncio.run(_load(url, path, token, int(concurrency), float(duration), float(warmup)))
    print(json.dumps(result))


def run_load(url: str, path: str, token: str, concurrency: int, duration: float, warmup: float) -> dict[str, Any]:
    """Run the load in its own process, so that its CPU use is not the server's and its GIL is its own."""
    out = subprocess.run(
        [sys.executable, __file__, "--client", url, path, token, str(concurrency), str(duration), str(warmup)],
        capture_output=True,
        text=True,
        timeout=duration + warmup + 120,
        check=True,
    )
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# ------------------------------------------------------------------------------------------------- server


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _env(home: Path, database_url: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AICENTER_")}
    env.update(AICENTER_HOME=str(home), AICENTER_ADMIN_PASSWORD=ADMIN_PASSWORD, AICENTER_REGISTER_HOST="false")
    if database_url:
        env["AICENTER_DATABASE_URL"] = database_url
    return env


async def _seed(home: Path, database_url: str | None) -> str:
    """Migrate, bootstrap, write ROWS audit events through the service, and return an admin API token."""
    from sqlalchemy import select

    from aicenter.app import create_app
    from aicenter.config import Settings
    from aicenter.core.roles import TokenKind
    from aicenter.db.models import User
    from aicenter.services import audit, auth
    from aicenter.services.context import Actor

    settings = Settings(home=home, database_url=database_url, admin_password=ADMIN_PASSWORD, register_host=False)
    app = create_app(settings, run_controllers=False)
    async with app.router.lifespan_context(app):
        db = app.state.ctx.db
        async with db.write() as session:
            admin = (await session.scalars(select(User).where(User.username == "admin"))).one()
            actor = Actor(admin.id, admin.username, True, client_address="127.0.0.1")
            for i in range(ROWS):
                audit.record(session, actor, "bench.event", "node", i, details={"i": i})
            issued = await auth.issue_token(session, admin, name="bench", kind=TokenKind.API, ttl_s=24 * 3600)
    return issued.secret


class Server:
    def __init__(self, home: Path, database_url: str | None, workers: int) -> None:
        self.home, self.database_url, self.workers = home, database_url, workers
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> float:
        aicenter = shutil.which("aicenter") or str(Path(sys.executable).with_name("aicenter"))
        args = [aicenter, "up", "--home", str(self.home), "--port", str(self.port), "--workers", str(self.workers)]
        began = time.perf_counter()
        self.proc = subprocess.Popen(
            args, env=_env(self.home, self.database_url), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        import httpx

        while time.perf_counter() - began < 120:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"aicenter up exited: {self.proc.stderr.read().decode() if self.proc.stderr else ''}"
                )
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return time.perf_counter() - began
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("aicenter up was not ready within 120 s")

    def pids(self) -> list[int]:
        """The server process and its workers (children)."""
        assert self.proc is not None
        import psutil

        parent = psutil.Process(self.proc.pid)
        return [parent.pid, *(c.pid for c in parent.children(recursive=True))]

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


# ------------------------------------------------------------------------------------------------- profiling


def profile(server: Server, token: str, concurrency: int, duration: float) -> dict[str, Any]:
    """Sample the server with py-spy while ``get_one`` runs; return the hottest frames, inclusive and own."""
    py_spy = shutil.which("py-spy")
    if py_spy is None:
        return {"error": "py-spy is not installed (pip install py-spy)"}
    pid = server.pids()[-1]  # with several workers: one of them
    out = server.home / "profile.txt"
    spy = subprocess.Popen(
        [py_spy, "record", "--pid", str(pid), "--format", "raw", "-o", str(out), "-r", "200", "--nonblocking"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    time.sleep(1.0)
    load = run_load(server.url, SCENARIOS["get_one"], token, concurrency, duration, 0.5)
    spy.send_signal(signal.SIGINT)
    spy.wait(timeout=60)
    if not out.exists():
        return {"error": (spy.stderr.read().decode() if spy.stderr else "")[-500:]}
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    for line in out.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        n = int(count_text)
        # "function (path/file.py:line)" -> "function (file.py)": one entry per function, whatever the line.
        frames = [f"{f.split(' (', 1)[0]} ({f.rsplit('/', 1)[-1].split(':', 1)[0]})" for f in stack.split(";")]
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n

    def share(counter: Counter[str]) -> list[dict[str, Any]]:
        return [{"frame": f, "pct": round(100 * n / total, 1)} for f, n in counter.most_common(25)]

    return {"samples": total, "load_during_profile": load, "inclusive": share(inclusive), "own": share(own)}


# ------------------------------------------------------------------------------------------------- main


def _pg_database() -> tuple[str, str]:
    import asyncpg

    name = f"aicenter_bench_{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    asyncio.run(create())
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return name, f"{base}/{name}"


def _drop_pg_database(name: str) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN)
        try:
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await conn.close()

    asyncio.run(drop())


def bench_backend(backend: str, workers: int, args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix=f"aicenter-bench-{backend}-") as tmp:
        home = Path(tmp)
        pg_name, database_url = _pg_database() if backend == "postgres" else (None, None)
        try:
            token = asyncio.run(_seed(home, database_url))
            server = Server(home, database_url, workers)
            ready_s = server.start()
            entry: dict[str, Any] = {"backend": backend, "workers": workers, "ready_s": round(ready_s, 2)}
            try:
                for name, path in SCENARIOS.items():
                    entry[name] = {
                        "path": path,
                        **run_load(server.url, path, token, args.concurrency, args.duration, 1),
                    }
                if args.profile:
                    entry["profile_get_one"] = profile(server, token, args.concurrency, min(args.duration, 10))
            finally:
                entry["exit_code"] = server.stop()
            return entry
        finally:
            if pg_name:
                _drop_pg_database(pg_name)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--client":
        _client_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=10.0, help="Seconds of measured load per scenario.")
    parser.add_argument("--concurrency", type=int, default=64, help="Concurrent keep-alive connections.")
    parser.add_argument("--backend", action="append", choices=["sqlite", "postgres"], help="Default: both.")
    parser.add_argument("--workers", action="append", type=int, help="Server processes (default: 1 and 2).")
    parser.add_argument("--profile", action="store_true", help="Sample the server with py-spy during get_one.")
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    results = [
        bench_backend(b, w, args) for b in (args.backend or ["sqlite", "postgres"]) for w in (args.workers or [1, 2])
    ]
    for entry in results:
        one = entry["get_one"]
        entry["goal_met"] = bool(
            one["req_per_s"] >= GOAL["min_req_per_s"]
            and one["p99_ms"] is not None
            and one["p99_ms"] <= GOAL["max_p99_ms"]
        )
    print(
        json.dumps(
            {
                "benchmark": "api",
                "rows": ROWS,
                "concurrency": args.concurrency,
                "duration_s": args.duration,
                "machine": {"cpus": os.cpu_count(), "load_avg_1m_before": round(load_before, 2)},
                "note": "server and load client share this machine's CPUs; the client is one asyncio process "
                "with raw HTTP/1.1 keep-alive connections, and still takes a share of the CPU",
                "goal": GOAL,
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
