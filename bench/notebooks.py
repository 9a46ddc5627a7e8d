"""Notebook benchmarks against one real ``aicenter up`` (as root: every notebook in its bubblewrap sandbox); prints
one JSON object.

Sections (``SECTIONS``; run the ones named on the command line, default all), all against the same server:

* ``create``: for each of ``--notebooks`` notebooks in turn (each stopped and deleted before the next, so the
  machine is quiet), seconds from ``POST /api/v1/notebooks`` to the first 200 of ``GET /notebooks/<id>/api/status``
  through the platform's proxy (polled every 50 ms); p50, p99, min, max, and where the time goes from the job's
  own timestamps (submitted -> scheduled -> launched -> the command started -> JupyterLab answers). Goal: p50 <= 3 s.
* ``proxy``: on one running notebook, (a) ``GET .../api/status`` straight to JupyterLab's published port (its
  token) and through the proxy (a bearer token), ``--requests`` each, interleaved, keep-alive clients; (b) a
  kernel execute round trip (``execute_request`` of ``1`` until that request's ``status: idle``) over one open
  WebSocket each way, ``--executes`` each after 10 warm-up ones, interleaved. p50/p99 and the p50 difference.
  Goal: <= 2 ms added at p50.
* ``ssh``: a fresh ed25519 key registered, ``ssh -F cfg notebook-<id> true`` (both hops, both authentications,
  an exec) ``--ssh`` times; p50/p99. Also once: an interactive shell's first prompt (``ssh -tt``, until ``$ ``).

    python bench/notebooks.py [create] [proxy] [ssh] [--notebooks 10] [--requests 300] [--executes 100] [--ssh 10]

Measured here (2 CPUs, load ~1, JupyterLab 4.6.6, as root: sandboxed): create-to-answer p50 2.41 s, p99 3.30 s
(min 2.33, max 3.30; JupyterLab's own start, bare, p50 2.49 s: the platform's part is ~0.15 s); proxy adds 1.84 ms
at p50 to GET api/status (1.07 -> 2.90 ms) and 0.78 ms to a kernel execute (47.5 -> 48.3 ms; ~47 ms is JupyterLab's
own, a bare one measures the same); ssh notebook-<id> true p50 0.34 s, p99 0.39 s; interactive prompt 0.26 s.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import ClientConnection, connect

from aicenter.config import Settings
from aicenter.core.ssh import ssh_config
from aicenter.services.jobs import notebook_token

ADMIN_PASSWORD = "bench-admin-Passw0rd"
GOALS = {"create_p50_s": 3.0, "proxy_added_p50_ms": 2.0}
POLL_S = 0.05
DEADLINE_S = 120.0
SPEC = {"name": "bench", "resources": {"cpu": 1, "memory": "1Gi"}}


def _pct(values: list[float], q: float, digits: int = 3) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))], digits)


def _summary(values: list[float], digits: int = 3) -> dict[str, float]:
    return {
        "n": len(values),
        "p50": _pct(values, 0.5, digits),
        "p99": _pct(values, 0.99, digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
    }


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _stamp(text: str | None) -> float | None:
    return datetime.fromisoformat(text).timestamp() if text else None


# ------------------------------------------------------------------------------------------------- server


@dataclass
class Bench:
    """One ``aicenter up`` on a temporary home (production settings, its host registered as the only node)."""

    home: Path
    port: int = field(default_factory=_free_port)
    proc: subprocess.Popen[bytes] | None = None
    token: str = ""
    ready_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith("AICENTER_")}
        env.update(
            AICENTER_ADMIN_PASSWORD=ADMIN_PASSWORD,
            AICENTER_SSH_PORT="0",  # a free port for the SSH gateway
            AICENTER_METRICS_SAMPLE_INTERVAL_S="0",  # no sampler: a quiet machine
        )
        aicenter = shutil.which("aicenter") or str(Path(sys.executable).with_name("aicenter"))
        log = (self.home.parent / "server.log").open("wb")
        began = time.perf_counter()
        self.proc = subprocess.Popen(
            [aicenter, "up", "--home", str(self.home), "--port", str(self.port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        while time.perf_counter() - began < DEADLINE_S:
            if self.proc.poll() is not None:
                raise RuntimeError(f"aicenter up exited:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        else:
            raise RuntimeError(f"aicenter up was not ready within {DEADLINE_S} s:\n{self.log()}")
        self.ready_s = time.perf_counter() - began
        login = httpx.post(
            f"{self.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}, timeout=30
        )
        login.raise_for_status()
        self.token = login.json()["token"]

    def log(self) -> str:
        path = self.home.parent / "server.log"
        return path.read_text(errors="replace")[-3000:] if path.exists() else ""

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=30)

    def stop(self) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()


def _wait_status(http: httpx.Client, notebook_id: int, *wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        got: dict[str, Any] = http.get(f"/api/v1/notebooks/{notebook_id}").json()
        if got["status"] in wanted:
            return got
        time.sleep(0.1)
    raise RuntimeError(f"notebook {notebook_id} never became {wanted}: {got}")


def _create(http: httpx.Client) -> int:
    created = http.post("/api/v1/notebooks", json={"spec": {**SPEC, "name": f"bench-{uuid.uuid4().hex[:6]}"}})
    if created.status_code != 201:
        raise RuntimeError(f"create: {created.status_code} {created.text}")
    notebook_id: int = created.json()["id"]
    return notebook_id


def _wait_lab(http: httpx.Client, notebook_id: int) -> dict[int, float]:
    """Poll the proxy until JupyterLab answers 200; when (perf_counter) each answer code was first seen."""
    deadline = time.monotonic() + DEADLINE_S
    first: dict[int, float] = {}
    last = ""
    while time.monotonic() < deadline:
        answer = http.get(f"/notebooks/{notebook_id}/api/status")
        first.setdefault(answer.status_code, time.perf_counter())
        if answer.status_code == 200:
            return first
        last = f"{answer.status_code} {answer.text[:200]}"
        time.sleep(POLL_S)
    raise RuntimeError(f"JupyterLab of notebook {notebook_id} did not answer within {DEADLINE_S} s: {last}")


def _remove(http: httpx.Client, notebook_id: int) -> None:
    http.post(f"/api/v1/notebooks/{notebook_id}/stop")
    _wait_status(http, notebook_id, "stopped", "failed", "cancelled", "succeeded")
    answer = http.delete(f"/api/v1/notebooks/{notebook_id}")
    if answer.status_code >= 300:
        raise RuntimeError(f"delete: {answer.status_code} {answer.text}")


def _launcher_started(bench: Bench, notebook_id: int, attempt: int) -> float | None:
    """When the launcher started JupyterLab's command (status.json in the replica's run dir), epoch seconds."""
    path = bench.home / "jobs" / str(notebook_id) / "runs" / str(attempt) / "notebook-0" / "status.json"
    try:
        return _stamp(json.loads(path.read_text()).get("started_at"))
    except (OSError, ValueError):
        return None


# ------------------------------------------------------------------------------------------------- sections


# The phases of create-to-answer, each (name, from mark, to mark); marks are epoch seconds on this machine's clock.
PHASES = [
    ("api (POST until the job row's submitted_at)", "posted", "submitted"),
    ("scheduling (submitted -> scheduled event)", "submitted", "scheduled"),
    ("launch (scheduled -> command started in the sandbox, status.json)", "scheduled", "command_started"),
    ("jupyterlab start (command started -> first 200 through the proxy)", "command_started", "answered"),
    ("running event after command start (the reconciler noticing)", "command_started", "running"),
    ("proxy answered non-404 (endpoint known) -> 200", "endpoint_known", "answered"),
]


def _bare_lab(runs: int) -> dict[str, Any]:
    """JupyterLab's own start, outside any sandbox and without the platform: the notebook's command line
    (``aicenter.runtime.notebook.jupyter_argv``) until ``api/status`` answers 200 (polled every 50 ms)."""
    from aicenter.runtime.notebook import jupyter_argv

    times = []
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="aicenter-bench-lab-") as tmp:
            root, config = Path(tmp) / "work", Path(tmp) / "config"
            root.mkdir()
            config.mkdir()
            token = uuid.uuid4().hex * 2
            (config / "jupyter_server_config.json").write_text(json.dumps({"IdentityProvider": {"token": token}}))
            port = _free_port()
            env = {**os.environ, "JUPYTER_CONFIG_DIR": str(config), "JUPYTER_DATA_DIR": str(Path(tmp) / "data"),
                   "JUPYTER_RUNTIME_DIR": str(Path(tmp) / "runtime"), "HOME": str(root)}  # fmt: skip
            began = time.perf_counter()
            lab = subprocess.Popen(
                # As root here (in a sandbox it runs as the workspace's uid), JupyterLab wants --allow-root.
                [*jupyter_argv("127.0.0.1", port, "/notebooks/1/", str(root), str(config)), "--allow-root"],
                env=env,
                cwd=root,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                url = f"http://127.0.0.1:{port}/notebooks/1/api/status"
                while time.perf_counter() - began < DEADLINE_S:
                    try:
                        if httpx.get(url, headers={"Authorization": f"token {token}"}, timeout=5).status_code == 200:
                            break
                    except httpx.TransportError:
                        pass
                    time.sleep(POLL_S)
                times.append(time.perf_counter() - began)
            finally:
                lab.send_signal(signal.SIGINT)  # by pid: the process this function started
                try:
                    lab.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    lab.kill()
                    lab.wait()
    return {"runs": runs, "seconds": _summary(times)}


def section_create(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    totals: list[float] = []
    phases: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
    runs = []
    with bench.http() as http:
        for _ in range(args.notebooks):
            wall = time.time()
            began = time.perf_counter()
            notebook_id = _create(http)
            first = _wait_lab(http, notebook_id)
            total = time.perf_counter() - began
            totals.append(total)
            detail = http.get(f"/api/v1/notebooks/{notebook_id}").json()
            events = {e["to_status"]: _stamp(e["at"]) for e in reversed(detail["events"])}  # the first of each
            replica = detail["replicas"][-1]
            endpoint_known = min((t for code, t in first.items() if code != 404), default=None)
            marks: dict[str, float | None] = {
                "posted": wall,
                "submitted": _stamp(detail["submitted_at"]),
                "scheduled": events.get("scheduled"),
                "command_started": _launcher_started(bench, notebook_id, replica["attempt"]),
                "running": events.get("running"),
                "endpoint_known": None if endpoint_known is None else wall + endpoint_known - began,
                "answered": wall + total,
            }
            run: dict[str, Any] = {
                "id": notebook_id,
                "total_s": round(total, 3),
                "proxy_codes_seen": sorted(first),
                "events": [e["to_status"] for e in detail["events"]],
            }
            for name, start, end in PHASES:
                t0, t1 = marks[start], marks[end]
                if t0 is not None and t1 is not None:
                    run[name] = round(t1 - t0, 3)
                    phases[name].append(t1 - t0)
            runs.append(run)
            _remove(http, notebook_id)
    return {
        "notebooks": args.notebooks,
        "poll_s": POLL_S,
        "seconds": _summary(totals),
        "phases_p50_s": {name: _pct(v, 0.5) for name, v in phases.items() if v},
        "bare_jupyterlab_start (no sandbox, no platform)": _bare_lab(3),
        "runs": runs,
        "goal_p50_s": GOALS["create_p50_s"],
        "met": _pct(totals, 0.5) <= GOALS["create_p50_s"],
    }


def _execute_message(session: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "username": "bench", "session": session, "msg_type": "execute_request",
              "version": "5.3", "date": ""}  # fmt: skip
    content = {"code": "1", "silent": False, "store_history": False, "user_expressions": {}, "allow_stdin": False,
               "stop_on_error": True}  # fmt: skip
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell",
               "buffers": []}  # fmt: skip
    return msg_id, json.dumps(message)


async def _round_trip(ws: ClientConnection, session: str) -> float:
    msg_id, message = _execute_message(session)
    began = time.perf_counter()
    await ws.send(message)
    while True:
        reply = json.loads(await asyncio.wait_for(ws.recv(), 30))
        if (
            reply.get("parent_header", {}).get("msg_id") == msg_id
            and reply.get("msg_type") == "status"
            and reply["content"]["execution_state"] == "idle"
        ):
            return time.perf_counter() - began


async def _executes(direct_url: str, direct: dict[str, str], proxy_url: str, proxy: dict[str, str], n: int) -> Any:
    times: dict[str, list[float]] = {"direct": [], "proxy": []}
    async with (
        connect(direct_url, additional_headers=direct, max_size=None) as d,
        connect(proxy_url, additional_headers=proxy, max_size=None) as p,
    ):
        sessions = {"direct": uuid.uuid4().hex, "proxy": uuid.uuid4().hex}
        for _ in range(10):  # warm-up: the kernel's first executions, both connections' buffers
            await _round_trip(d, sessions["direct"])
            await _round_trip(p, sessions["proxy"])
        for _ in range(n):
            times["direct"].append(await _round_trip(d, sessions["direct"]))
            times["proxy"].append(await _round_trip(p, sessions["proxy"]))
    return times


def _compare(times: dict[str, list[float]], goal_ms: float) -> dict[str, Any]:
    ms = {k: [t * 1000 for t in v] for k, v in times.items()}
    added = _pct(ms["proxy"], 0.5) - _pct(ms["direct"], 0.5)
    return {
        "direct_ms": {"p50": _pct(ms["direct"], 0.5), "p99": _pct(ms["direct"], 0.99)},
        "proxy_ms": {"p50": _pct(ms["proxy"], 0.5), "p99": _pct(ms["proxy"], 0.99)},
        "added_p50_ms": round(added, 3),
        "added_p99_ms": round(_pct(ms["proxy"], 0.99) - _pct(ms["direct"], 0.99), 3),
        "goal_added_p50_ms": goal_ms,
        "met": added <= goal_ms,
    }


@dataclass
class Running:
    """One running notebook and how to reach it straight (its published port and JupyterLab token)."""

    id: int
    port: int
    ssh_port: int
    lab_token: str


def _running(bench: Bench, http: httpx.Client) -> Running:
    notebook_id = _create(http)
    _wait_lab(http, notebook_id)
    detail = http.get(f"/api/v1/notebooks/{notebook_id}").json()
    jupyter_port, ssh_port = detail["replicas"][-1]["ports"][:2]
    secret = Settings(home=bench.home).resolve_secret_key()
    return Running(notebook_id, jupyter_port, ssh_port, notebook_token(secret, notebook_id, detail["restart_count"]))


def section_proxy(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    with bench.http() as http:
        nb = _running(bench, http)
        try:
            path = f"/notebooks/{nb.id}/api/status"
            direct_base = f"http://127.0.0.1:{nb.port}"
            lab_auth = {"Authorization": f"token {nb.lab_token}"}
            times: dict[str, list[float]] = {"direct": [], "proxy": []}
            with httpx.Client(base_url=direct_base, headers=lab_auth, timeout=30) as direct:
                for client in (direct, http):  # warm-up: connections open, the proxy's endpoint cached
                    for _ in range(10):
                        client.get(path).raise_for_status()
                for _ in range(args.requests):
                    for name, client in (("direct", direct), ("proxy", http)):
                        began = time.perf_counter()
                        answer = client.get(path)
                        elapsed = time.perf_counter() - began
                        answer.raise_for_status()
                        times[name].append(elapsed)
            started = http.post(f"/notebooks/{nb.id}/api/kernels", json={"name": "python3"})
            started.raise_for_status()
            kernel = started.json()["id"]
            channels = f"/notebooks/{nb.id}/api/kernels/{kernel}/channels"
            ws_times = asyncio.run(
                _executes(
                    f"ws://127.0.0.1:{nb.port}{channels}",
                    lab_auth,
                    f"{bench.url.replace('http://', 'ws://')}{channels}",
                    {"Authorization": f"Bearer {bench.token}"},
                    args.executes,
                )
            )
            return {
                "http_get_api_status": {"requests": args.requests, **_compare(times, GOALS["proxy_added_p50_ms"])},
                "kernel_execute": {"executes": args.executes, **_compare(ws_times, GOALS["proxy_added_p50_ms"])},
            }
        finally:
            _remove(http, nb.id)


def _prompt_once(cmd: list[str]) -> float:
    """Seconds from starting an interactive ``ssh -tt`` to the shell's first prompt (output ending in '$ '/'# ')."""
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    assert proc.stdin is not None
    seen = b""
    try:
        while time.perf_counter() - began < 60:
            ready, _, _ = select.select([proc.stdout], [], [], 1)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                seen += chunk
                if seen.rstrip(b" ").endswith((b"$", b"#")):
                    return time.perf_counter() - began
        raise RuntimeError(f"no prompt: {seen[-300:]!r}")
    finally:
        try:
            proc.stdin.write(b"exit\n")
            proc.stdin.flush()
            proc.wait(timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()


def section_ssh(bench: Bench, args: argparse.Namespace) -> dict[str, Any]:
    tmp = bench.home.parent / "ssh"
    tmp.mkdir(exist_ok=True)
    key = tmp / "bench_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "bench", "-f", str(key)], check=True)
    with bench.http() as http:
        added = http.post("/api/v1/ssh-keys", json={"public_key": key.with_suffix(".pub").read_text()})
        if added.status_code != 201:
            raise RuntimeError(f"ssh key: {added.status_code} {added.text}")
        nb = _running(bench, http)
        try:
            access = http.get(f"/api/v1/notebooks/{nb.id}/ssh").json()
            known = tmp / "known_hosts"
            known.write_text("".join(f"{line}\n" for line in access["known_hosts"]))
            config = tmp / "config"
            config.write_text(
                ssh_config(
                    alias=access["host_alias"],
                    gateway_host=access["gateway_host"],
                    gateway_port=access["gateway_port"],
                    user="admin",
                    identity_file=str(key),
                    known_hosts_file=str(known),
                )
            )
            base = ["ssh", "-F", str(config), "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes"]
            times: list[float] = []
            failures: list[str] = []
            for _ in range(args.ssh):
                began = time.perf_counter()
                done = subprocess.run([*base, access["host_alias"], "true"], capture_output=True, text=True, timeout=60)
                if done.returncode == 0:
                    times.append(time.perf_counter() - began)
                else:  # counted and shown, not timed: a bench reports what happens rather than stopping
                    failures.append(f"exit {done.returncode}: {done.stderr.strip()[-200:]}")
            if not times:
                raise RuntimeError(f"every ssh failed: {failures[:3]}")
            prompt = _prompt_once([*base, "-tt", access["host_alias"]])
            return {
                "ssh_true_s": _summary(times),
                "ssh_failures": {"count": len(failures), "first": failures[:2]},
                "interactive_prompt_s (once)": round(prompt, 3),
                "hops": "ssh -> gateway (ProxyJump, asyncssh in aicenter up) -> notebook's SSH agent in the sandbox",
            }
        finally:
            _remove(http, nb.id)


SECTIONS: dict[str, Callable[[Bench, argparse.Namespace], dict[str, Any]]] = {
    "create": section_create,
    "proxy": section_proxy,
    "ssh": section_ssh,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sections", nargs="*", help=f"Sections to run: {', '.join(SECTIONS)} (default: all).")
    parser.add_argument("--notebooks", type=int, default=10, help="create: notebooks created one after another.")
    parser.add_argument("--requests", type=int, default=300, help="proxy: GET api/status each way.")
    parser.add_argument("--executes", type=int, default=100, help="proxy: kernel execute round trips each way.")
    parser.add_argument("--ssh", type=int, default=10, help="ssh: timed `ssh notebook-<id> true`.")
    args = parser.parse_args()
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        parser.error(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")

    load_before = os.getloadavg()[0]
    result: dict[str, Any] = {
        "benchmark": "notebooks",
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "load_avg_1m_before": round(load_before, 2),
        },
        "jupyterlab": version("jupyterlab"),
        "conditions": (
            "one `aicenter up` (SQLite, production settings, metrics sampler off, this host its only node) on "
            f"127.0.0.1; {'as root: each notebook in a bubblewrap sandbox' if os.geteuid() == 0 else 'not root'}; "
            f"client and server share the {os.cpu_count()} CPUs; notebook spec {json.dumps(SPEC['resources'])}"
        ),
    }
    tmp = Path(tempfile.mkdtemp(prefix="aicenter-bench-notebooks-"))
    bench = Bench(tmp / "home")
    try:
        bench.start()
        result["server_ready_s"] = round(bench.ready_s, 2)
        for name in args.sections or list(SECTIONS):
            began = time.perf_counter()
            load = os.getloadavg()[0]
            result[name] = SECTIONS[name](bench, args)
            # Other work on the machine shows here: the 1-minute load average before and after the section.
            result[name]["load_avg_1m_before_after"] = [round(load, 2), round(os.getloadavg()[0], 2)]
            result[name]["section_s"] = round(time.perf_counter() - began, 1)
    finally:
        if bench.proc is not None:
            result["server_exit_code"] = bench.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
