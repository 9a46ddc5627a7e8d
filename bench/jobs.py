"""Submit-to-first-output-line latency of a trivial job (``echo hello``): aicenter's REST API vs. Slurm's sbatch.

aicenter: a throwaway home, a real ``aicenter up`` (SQLite, the local executor on this host), then

* ``sequential``: 50 jobs one after the other, each waited for before the next is submitted;
* ``concurrent``: 200 submissions at once (one asyncio client, 200 requests in flight).

Latency = the timestamp the launcher wrote before the job's first output line (UTC, in the replica log) minus the
wall-clock time the submit request started. Each job asks for 10m CPU and 16Mi so that all 200 fit on one node
at once: the figure is the platform's path (API, scheduling controller, reconciler, launcher), not queueing.

Slurm: slurm-wlm on this host (tests/support/slurm.py's cluster: slurmctld + one slurmd, a generated
slurm.conf under a temp dir, munged on its own socket with a fresh key unless one runs), the same 50 + 200
``sbatch --wrap "echo hello" -o FILE``; latency = when FILE first holds the line (polled every 5 ms) minus when
sbatch was started. The partition oversubscribes its 2 cores (FORCE:100) for the same reason the aicenter jobs
ask for 10m CPU.

Prints one JSON document with p50/p99 per scenario and per system and the goals: p50 <= 150 ms, p99 <= 500 ms,
p50 <= 0.5x Slurm's p50. Every process it starts is stopped by pid at the end.

With ``--sandbox`` aicenter is measured a second time with every replica in its bubblewrap sandbox
(``AICENTER_SANDBOX=bwrap``, its own uid when run as root), and ``sandbox_cost_ms`` gives the difference (goal:
at most 20 ms more at p50).

    python bench/jobs.py [--sequential 50] [--concurrent 200] [--no-slurm] [--sandbox]
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
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

# The Slurm cluster is the tests' (one implementation for both); bench scripts run as ``python bench/jobs.py``.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.support.slurm import NodeSpec, SlurmCluster
from tests.support.waiting import wait_for

ADMIN_PASSWORD = "bench-admin-Passw0rd"
SPEC = {
    "name": "hello",
    "tasks": [{"name": "worker", "resources": {"cpu": "10m", "memory": "16Mi"}, "command": "echo hello"}],
}
GOALS = {"p50_ms": 150.0, "p99_ms": 500.0, "vs_slurm_p50": 0.5, "sandbox_p50_ms": 20.0}
POLL_S = 0.005
TIMEOUT_S = 600.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _summary(latencies_s: list[float]) -> dict[str, Any]:
    ms = [v * 1000 for v in latencies_s]
    return {
        "n": len(ms),
        "p50_ms": round(statistics.median(ms), 1),
        "p99_ms": round(_pct(ms, 0.99), 1),
        "max_ms": round(max(ms), 1),
    }


# -- aicenter ---------------------------------------------------------------------------------------------------


class Aicenter:
    def __init__(self, work: Path, sandbox: str = "off", env: dict[str, str] | None = None) -> None:
        self.home = work / f"home-{sandbox}"
        self.sandbox = sandbox
        self.extra_env = env or {}  # more AICENTER_* settings (bench/executors.py: the engine executors)
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = work / f"server-{sandbox}.log"

    def start(self) -> None:
        exe = Path(sys.executable).with_name("aicenter")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AICENTER_")}
        env["AICENTER_ADMIN_PASSWORD"] = ADMIN_PASSWORD
        env["AICENTER_SANDBOX"] = self.sandbox
        env.update(self.extra_env)
        self.proc = subprocess.Popen(
            [str(exe), "up", "--home", str(self.home), "--port", str(self.port)],
            env=env,
            stdout=self.log.open("wb"),
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"aicenter up did not start:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _first_stamp(text: str) -> float | None:
    """The epoch time of the first output line: the launcher prefixes ``2026-12-03T06:00:00.123456Z ``."""
    line = text.split("\n", 1)[0]
    if not line.endswith("hello"):
        return None
    return datetime.fromisoformat(line.split(" ", 1)[0].replace("Z", "+00:00")).timestamp()


async def _submit(client: httpx.AsyncClient) -> tuple[int, float]:
    started = time.time()
    response = await client.post("/api/v1/jobs", json={"spec": SPEC})
    response.raise_for_status()
    return int(response.json()["id"]), started


async def _first_line(client: httpx.AsyncClient, job_id: int, deadline: float) -> float:
    while time.monotonic() < deadline:
        response = await client.get(f"/api/v1/jobs/{job_id}/logs")
        if response.status_code == 200 and (stamp := _first_stamp(response.text)) is not None:
            return stamp
        await asyncio.sleep(POLL_S if response.status_code in (200, 409) else 0.05)
    raise TimeoutError(f"job {job_id} printed nothing within {TIMEOUT_S} s")


async def _aicenter_runs(url: str, token: str, sequential: int, concurrent: int) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=concurrent, max_keepalive_connections=concurrent)
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers, limits=limits, timeout=120) as client:
        await _first_line(client, (await _submit(client))[0], time.monotonic() + TIMEOUT_S)  # warm-up
        seq = []
        for _ in range(sequential):
            job_id, started = await _submit(client)
            seq.append(await _first_line(client, job_id, time.monotonic() + TIMEOUT_S) - started)
        submitted = await asyncio.gather(*(_submit(client) for _ in range(concurrent)))
        # Read each job's first line once all are submitted: polling 200 logs at 5 ms would load the server.
        deadline = time.monotonic() + TIMEOUT_S
        stamps = []
        for job_id, _ in submitted:
            stamps.append(await _first_line(client, job_id, deadline))
        conc = [stamp - started for stamp, (_, started) in zip(stamps, submitted, strict=True)]
    return {"sequential": _summary(seq), "concurrent": _summary(conc)}


def run_aicenter(work: Path, sequential: int, concurrent: int, sandbox: str = "off") -> dict[str, Any]:
    server = Aicenter(work, sandbox)
    server.start()
    try:
        login = httpx.post(
            f"{server.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}, timeout=30
        )
        login.raise_for_status()
        return asyncio.run(_aicenter_runs(server.url, login.json()["token"], sequential, concurrent))
    finally:
        server.stop()


# -- slurm ------------------------------------------------------------------------------------------------------


class Slurm(SlurmCluster):
    """The shared test cluster (tests/support/slurm.py) as the benchmark runs it: one 2-CPU node, oversubscribed."""

    def __init__(self, work: Path) -> None:
        memory_mib = min(4096, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 2)
        # Slurm's own scheduler settings (batch_sched_delay left as shipped), so that figures stay comparable.
        super().__init__(
            work / "slurm",
            nodes=(NodeSpec("node1", cpus=2, memory_mib=memory_mib),),
            partition="bench",
            partition_options="OverSubscribe=FORCE:100",
            scheduler_parameters="",
        )

    def sbatch(self, out: Path) -> float:
        return sbatch(self, out)


def sbatch(cluster: SlurmCluster, out: Path) -> float:
    """Submit ``echo hello`` writing to ``out``; returns when sbatch was started (epoch seconds)."""
    started = time.time()
    cluster.run("sbatch", "--quiet", "--wrap", "echo hello", "-o", str(out), "-c", "1")
    return started


def _has_line(path: Path) -> bool:
    try:
        return path.read_bytes().startswith(b"hello\n")
    except FileNotFoundError:
        return False


def run_slurm(work: Path, sequential: int, concurrent: int) -> dict[str, Any]:
    slurm = Slurm(work)
    try:
        slurm.start()
        return sbatch_runs(slurm, work / "slurm-out", sequential, concurrent)
    finally:
        slurm.stop()


def sbatch_runs(slurm: SlurmCluster, outs: Path, sequential: int, concurrent: int) -> dict[str, Any]:
    """A warm-up, ``sequential`` sbatch jobs one after the other, then ``concurrent`` at once (on ``slurm``)."""
    outs.mkdir()
    seq = []
    for i in range(-1, sequential):  # -1: warm-up
        path = outs / f"seq-{i}.out"
        started = sbatch(slurm, path)
        wait_for(lambda p=path: _has_line(p), f"sbatch output {path}", TIMEOUT_S)
        seen = time.time()
        if i >= 0:
            seq.append(seen - started)
    paths = [outs / f"conc-{i}.out" for i in range(concurrent)]
    with ThreadPoolExecutor(max_workers=32) as pool:
        starts = list(pool.map(lambda p: sbatch(slurm, p), paths))
    seen_at: dict[int, float] = {}
    deadline = time.monotonic() + TIMEOUT_S
    while len(seen_at) < concurrent and time.monotonic() < deadline:
        for i, path in enumerate(paths):
            if i not in seen_at and _has_line(path):
                seen_at[i] = time.time()
        time.sleep(POLL_S)
    conc = [seen_at[i] - starts[i] for i in sorted(seen_at)]
    result = {"sequential": _summary(seq), "concurrent": _summary(conc)}
    if len(seen_at) < concurrent:
        result["concurrent"]["missing"] = concurrent - len(seen_at)
    return result


# -- main -------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequential", type=int, default=50)
    parser.add_argument("--concurrent", type=int, default=200)
    parser.add_argument("--no-slurm", action="store_true", help="Measure aicenter only.")
    parser.add_argument(
        "--sandbox",
        action="store_true",
        help="Measure aicenter again with every replica in its bubblewrap sandbox (AICENTER_SANDBOX=bwrap).",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aicenter-bench-jobs-"))
    report: dict[str, Any] = {"benchmark": "jobs", "goals": GOALS}
    try:
        report["aicenter"] = run_aicenter(work, args.sequential, args.concurrent)
        if args.sandbox:
            sandboxed = run_aicenter(work, args.sequential, args.concurrent, sandbox="bwrap")
            report["aicenter_sandboxed"] = sandboxed
            report["sandbox_cost_ms"] = {
                scenario: {
                    "p50": round(sandboxed[scenario]["p50_ms"] - report["aicenter"][scenario]["p50_ms"], 1),
                    "p99": round(sandboxed[scenario]["p99_ms"] - report["aicenter"][scenario]["p99_ms"], 1),
                    "goal_p50": GOALS["sandbox_p50_ms"],
                }
                for scenario in ("sequential", "concurrent")
            }
        if not args.no_slurm:
            try:
                report["slurm"] = run_slurm(work, args.sequential, args.concurrent)
            except (RuntimeError, subprocess.CalledProcessError, OSError) as exc:
                detail = getattr(exc, "stderr", b"") or b""
                text = detail.decode(errors="replace") if isinstance(detail, bytes) else str(detail)
                report["slurm"] = {"error": f"{exc} {text}".strip()}
        met: dict[str, Any] = {}
        for scenario in ("sequential", "concurrent"):
            ours = report["aicenter"][scenario]
            met[scenario] = {
                "p50": ours["p50_ms"] <= GOALS["p50_ms"],
                "p99": ours["p99_ms"] <= GOALS["p99_ms"],
            }
            theirs = report.get("slurm", {}).get(scenario)
            if theirs:
                ratio = ours["p50_ms"] / theirs["p50_ms"] if theirs["p50_ms"] else None
                met[scenario]["vs_slurm_p50_ratio"] = round(ratio, 3) if ratio is not None else None
                met[scenario]["vs_slurm"] = ratio is not None and ratio <= GOALS["vs_slurm_p50"]
        report["met"] = met
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
