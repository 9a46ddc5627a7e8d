"""A sandboxed job's network: its replicas share a loopback of their own, and the API is their only door out.

The jobs run through the real ``LocalExecutor`` with ``sandbox="bwrap"`` as root (the production and CI case),
each in its job's network namespace. They try to reach PostgreSQL and Redis on the host's 127.0.0.1, a TCP
server the test listens with on the host's 127.0.0.1 (the platform's port, another job's port), and the host's
other addresses; they call a real HTTP server standing in for the API through ``AICENTER_API_URL``; two
replicas of one job talk over 127.0.0.1 while a replica of another job tries to join in. Each job writes what it
saw as JSON; the tests assert on that, then that no namespace is left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import http.server
import json
import os
import shlex
import shutil
import socket
import sys
import textwrap
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import psutil
import pytest
import pytest_asyncio

from aicenter.executors import ReplicaHandle, ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import sandbox_support
from aicenter.runtime import netns

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="a job's network namespace needs a server running as root"),
    pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="nsenter (util-linux) is not installed"),
]

NODE = "network-node"
UID_BASE = 250_000
WORKSPACE = 3
TOKEN = "job-token-of-job-1"  # checked to arrive unchanged
API_PREFIX = "/platform"
BODY_SIZE = 1 << 20  # ~1 MB through the relay, in one request
POSTGRES = ("127.0.0.1", 5432)
# Every line of the jobs' output: record what happened, as ("ok", value) or ("error", exception, errno name).
COMMON = textwrap.dedent(
    """
    import errno, hashlib, json, os, socket, sys, time, urllib.request

    seen = {"netns": os.readlink("/proc/self/ns/net")}

    def attempt(name, action):
        try:
            seen[name] = ["ok", action()]
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0) if exc.errno else None
            reason = getattr(exc, "reason", None)  # urllib wraps the socket's error
            if code is None and isinstance(reason, OSError) and reason.errno:
                code = errno.errorcode.get(reason.errno)
            seen[name] = ["error", type(exc).__name__, code]

    def connect(host, port):
        with socket.create_connection((host, int(port)), timeout=5) as sock:
            return sock.getpeername()[0]

    def save(name):
        with open(os.path.join(os.environ["AICENTER_OUTPUT_DIR"], name), "w") as f:
            json.dump(seen, f)
    """
)
# Replica 0 of job 1: probes the host and the API, then serves its peer on 127.0.0.1:<peer port>.
PROBE = COMMON + textwrap.dedent(
    """
    host_addresses, bystander_port, peer_port = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    api, token = os.environ["AICENTER_API_URL"], os.environ["AICENTER_TOKEN"]
    seen["api_url"] = api
    attempt("postgres", lambda: connect("127.0.0.1", 5432))
    attempt("redis", lambda: connect("127.0.0.1", 6379))
    attempt("bystander", lambda: connect("127.0.0.1", bystander_port))
    for address in host_addresses:
        attempt(f"host {address}", lambda: connect(address, bystander_port))

    def call(path, body=None):
        request = urllib.request.Request(api + path, data=body, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=30) as response:
            return json.loads(response.read())

    def stream():
        with urllib.request.urlopen(api + "/stream", timeout=30) as response:
            return [line.decode().strip() for line in response]

    body = hashlib.sha256(b"seed").digest() * (BODY_SIZE // 32)
    attempt("api_get", lambda: call("/whoami"))
    attempt("api_post", lambda: call("/upload", body))
    seen["sent_sha256"] = hashlib.sha256(body).hexdigest()
    attempt("api_stream", stream)

    server = socket.create_server(("127.0.0.1", peer_port))
    print("listening", flush=True)
    server.settimeout(120)
    conn, _ = server.accept()
    with conn:
        seen["peer_said"] = conn.recv(1024).decode()
        conn.sendall(b"hello replica 1, from replica 0")
    save("replica0.json")
    """
).replace("BODY_SIZE", str(BODY_SIZE))
# Replica 1 of job 1: reaches replica 0 over the namespace's loopback.
PEER = COMMON + textwrap.dedent(
    """
    peer_port = int(sys.argv[1])

    def talk():
        with socket.create_connection(("127.0.0.1", peer_port), timeout=10) as sock:
            sock.sendall(b"hello replica 0, from replica 1")
            return sock.recv(1024).decode()

    attempt("peer", talk)
    save("replica1.json")
    """
)
# Job 2: tries job 1's listening port from its own namespace, and the API URL it was given.
OTHER = COMMON + textwrap.dedent(
    """
    peer_port = int(sys.argv[1])
    attempt("peer_of_other_job", lambda: connect("127.0.0.1", peer_port))
    save("other.json")
    """
)


class _Api(http.server.BaseHTTPRequestHandler):
    """The platform's API for the job: tells what it received, and streams a chunked answer."""

    protocol_version = "HTTP/1.1"
    seen: list[dict[str, Any]]

    def _answer(self, data: dict[str, Any]) -> None:
        body = json.dumps(data).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == f"{API_PREFIX}/stream":
            self.send_response(200)
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                line = f"event {i}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        self.seen.append({"path": self.path, "auth": self.headers.get("Authorization")})
        self._answer({"path": self.path, "auth": self.headers.get("Authorization")})

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self._answer({"path": self.path, "length": len(body), "sha256": hashlib.sha256(body).hexdigest()})

    def log_message(self, format: str, *args: Any) -> None:
        return


@pytest.fixture(scope="module")
def api() -> Iterator[tuple[int, list[dict[str, Any]]]]:
    """A real HTTP server on the host's 127.0.0.1: the API the jobs may reach, through their relay only."""
    seen: list[dict[str, Any]] = []
    handler = type("Api", (_Api,), {"seen": seen})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1], seen
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def bystander() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on the host's 127.0.0.1 (the platform's port, another job's): records who got through."""
    server = socket.create_server(("127.0.0.1", 0))
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                conn, peer = server.accept()
            except OSError:
                return
            accepted.append(peer[0])
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    yield server.getsockname()[1], accepted
    server.shutdown(socket.SHUT_RDWR)
    server.close()


def _host_addresses() -> list[str]:
    """The host's own non-loopback IPv4 addresses (connecting to them sends nothing off the machine)."""
    return sorted(
        a.address
        for addresses in psutil.net_if_addrs().values()
        for a in addresses
        if a.family == socket.AF_INET and not a.address.startswith("127.")
    )


def _reachable_from_host(address: tuple[str, int]) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(address, timeout=2):
        return True
    return False


async def _wait_exited(executor: LocalExecutor, handle: ReplicaHandle) -> str:
    for _ in range(1200):
        status = await executor.status(handle)
        if status.state is ReplicaState.EXITED:
            break
        await asyncio.sleep(0.05)
    log = b"".join([c async for c in executor.logs(handle)]).decode(errors="replace")
    assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0), log
    return log


async def _wait_for_line(executor: LocalExecutor, handle: ReplicaHandle, line: str) -> None:
    for _ in range(1200):
        log = b"".join([c async for c in executor.logs(handle)]).decode(errors="replace")
        if line in log:
            return
        assert (await executor.status(handle)).state is ReplicaState.RUNNING, log
        await asyncio.sleep(0.05)
    pytest.fail(f"{line!r} never came: {log}")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(
    tmp_path_factory: pytest.TempPathFactory,
    api: tuple[int, list[dict[str, Any]]],
    bystander: tuple[int, list[str]],
) -> AsyncIterator[dict[str, Any]]:
    """Job 1 (two replicas) and job 2 run once; their observations, and the names of their namespaces."""
    home = tmp_path_factory.mktemp("network-home")
    home.chmod(0o755)
    jobs = home / "jobs"
    executor = LocalExecutor(jobs, node_name=NODE, sandbox="bwrap", sandbox_uid_base=UID_BASE)
    peer_port = (await executor.allocate_ports(NODE, 1))[0]
    api_port, _ = api
    bystander_port, _ = bystander

    def plan(job_id: int, replica: int, script: str, args: list[object]) -> ReplicaPlan:
        job = jobs / str(job_id)
        dirs = {d: job / d for d in ("code", "data", "output", "checkpoints")}
        for d in dirs.values():
            d.mkdir(parents=True, exist_ok=True)
        name = f"probe{replica}.py"
        (dirs["code"] / name).write_text(script)
        command = " ".join(shlex.quote(str(a)) for a in [sys.executable, name, *args])
        return ReplicaPlan(
            job_id=job_id,
            task="worker",
            replica=replica,
            attempt=0,
            node=NODE,
            command=command,
            env={
                "AICENTER_CODE_DIR": str(dirs["code"]),
                "AICENTER_DATA_DIR": str(dirs["data"]),
                "AICENTER_OUTPUT_DIR": str(dirs["output"]),
                "AICENTER_CHECKPOINT_DIR": str(dirs["checkpoints"]),
                # "localhost" and a trailing slash: the job is given the relay's address, the path kept.
                "AICENTER_API_URL": f"http://localhost:{api_port}{API_PREFIX}/",
                "AICENTER_TOKEN": TOKEN if job_id == 1 else "job-token-of-job-2",
            },
            run_dir=job / "runs" / "0" / f"worker-{replica}",
            workdir=dirs["code"],
            workspace_id=WORKSPACE,
        )

    names = [netns.job_netns_name(str(jobs), job_id) for job_id in (1, 2)]
    handles: list[ReplicaHandle] = []
    try:
        first = await executor.launch(plan(1, 0, PROBE, [json.dumps(_host_addresses()), bystander_port, peer_port]))
        handles.append(first)
        await _wait_for_line(executor, first, "listening")
        during = {"job 1": netns.exists(names[0])}
        other = await executor.launch(plan(2, 0, OTHER, [peer_port]))
        handles.append(other)
        await _wait_exited(executor, other)
        second = await executor.launch(plan(1, 1, PEER, [peer_port]))
        handles.append(second)
        await _wait_exited(executor, second)
        await _wait_exited(executor, first)
    finally:
        for handle in handles:
            await executor.stop(handle, grace_s=1.0)
    output = {job_id: jobs / str(job_id) / "output" for job_id in (1, 2)}
    result = {
        "replica0": json.loads((output[1] / "replica0.json").read_text()),
        "replica1": json.loads((output[1] / "replica1.json").read_text()),
        "other": json.loads((output[2] / "other.json").read_text()),
        "names": names,
        "during": during,
        "peer_port": peer_port,
    }
    try:
        yield result
    finally:
        for name in names:  # never leave a namespace behind, whatever the tests found
            netns.release(name)


def test_host_services_on_loopback_are_unreachable(world: dict[str, Any]) -> None:
    seen = world["replica0"]
    # Inside, 127.0.0.1 is the namespace's own loopback: nothing listens there, so the host's services are refused.
    assert seen["postgres"] == ["error", "ConnectionRefusedError", "ECONNREFUSED"]
    assert seen["redis"] == ["error", "ConnectionRefusedError", "ECONNREFUSED"]
    # From the host the same address answers: the namespace, not an idle port, is what refused the job.
    assert _reachable_from_host(POSTGRES)


def test_the_hosts_other_ports_are_unreachable(world: dict[str, Any], bystander: tuple[int, list[str]]) -> None:
    seen = world["replica0"]
    assert seen["bystander"] == ["error", "ConnectionRefusedError", "ECONNREFUSED"]
    assert bystander[1] == []  # nothing ever connected to the host's server


def test_the_hosts_own_addresses_have_no_route(world: dict[str, Any]) -> None:
    attempts = {k: v for k, v in world["replica0"].items() if k.startswith("host ")}
    assert attempts.keys() == {f"host {a}" for a in _host_addresses()}
    for name, seen in attempts.items():
        assert seen == ["error", "OSError", "ENETUNREACH"], name


def test_the_api_is_reached_through_the_relay(world: dict[str, Any], api: tuple[int, list[dict[str, Any]]]) -> None:
    seen = world["replica0"]
    api_port, requests = api
    assert seen["api_url"] == f"http://127.0.0.1:{api_port}{API_PREFIX}"
    assert seen["api_get"] == ["ok", {"path": f"{API_PREFIX}/whoami", "auth": f"Bearer {TOKEN}"}]
    assert {"path": f"{API_PREFIX}/whoami", "auth": f"Bearer {TOKEN}"} in requests  # the token arrived unchanged
    assert seen["api_post"] == [
        "ok",
        {"path": f"{API_PREFIX}/upload", "length": BODY_SIZE, "sha256": seen["sent_sha256"]},
    ]
    assert seen["api_stream"] == ["ok", ["event 0", "event 1", "event 2"]]


def test_replicas_of_one_job_share_a_loopback(world: dict[str, Any]) -> None:
    first, second = world["replica0"], world["replica1"]
    assert first["netns"] == second["netns"]
    assert second["peer"] == ["ok", "hello replica 1, from replica 0"]
    assert first["peer_said"] == "hello replica 0, from replica 1"
    assert world["during"] == {"job 1": True}


def test_another_job_cannot_reach_them(world: dict[str, Any]) -> None:
    other = world["other"]
    assert other["netns"] not in (world["replica0"]["netns"], os.readlink("/proc/self/ns/net"))
    assert other["peer_of_other_job"] == ["error", "ConnectionRefusedError", "ECONNREFUSED"]


async def test_no_namespace_is_left_once_the_replicas_ended(world: dict[str, Any]) -> None:
    for _ in range(200):  # each launcher removes its job's namespace as it exits, after its final record
        if not any(netns.exists(name) for name in world["names"]):
            break
        await asyncio.sleep(0.05)
    for name in world["names"]:
        assert not netns.exists(name)
        assert name not in os.listdir(netns.NETNS_DIR)
