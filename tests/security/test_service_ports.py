"""A service replica's published port serves the platform only: a caller without the replica's serve token gets
401 and reaches nothing, whatever serves behind the port (issue 14).

The port is published on the node, so more than the gateway reaches it: processes of the host, and a job running
on the host's network (the ``ray`` executor's ``sandbox_network: host``). Here plain httpx from the host stands in
for them. The replicas run through the real ``LocalExecutor`` as root, sandboxed:

- ``model``: the platform's model server (a tiny custom predictor), in its job's network namespace: the
  launcher's relay and the model server both check the token;
- ``custom``: a user's command that serves HTTP and checks nothing, in its namespace: the relay alone protects it;
- ``hostnet``: the model server on the host's network (no namespace, no relay): it checks the token itself.

Through the real serving gateway, with the tokens the route table derives (``jobs.serve_token``), everything is
served; a caller's own ``X-Aicenter-Serve-Token`` never reaches a replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import shutil
import socket
import sys
import textwrap
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import pytest_asyncio
import uvicorn

from aicenter.core.jobs.serving import SERVE_COMMAND, SERVE_TOKEN_HEADER
from aicenter.core.serving.routing import (
    Endpoint,
    RevisionRoute,
    RouteTable,
    ServiceRoute,
    ServingProtocol,
    TokenInfo,
)
from aicenter.executors import ReplicaHandle, ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import sandbox_support
from aicenter.gateway.serving import ServingGateway
from aicenter.runtime import netns
from aicenter.services import jobs

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="a job's network namespace needs a server running as root"),
    pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}"),
    pytest.mark.skipif(shutil.which("nsenter") is None, reason="nsenter (util-linux) is not installed"),
]

SRC = Path(__file__).resolve().parents[2] / "src"
SECRET = "the-secret-key-of-this-test-server"
NODE = "serving-node"
UID_BASE = 260_000
WORKSPACE = 4
KEY = "sk-service-key"
JOBS = {"model": 31, "custom": 32, "hostnet": 33}
PREDICTOR = textwrap.dedent(
    """
    class Predictor:
        def load(self, model_dir):
            pass

        def predict(self, inputs):
            return {"y": inputs["x"] * 2}
    """
)
# A user's command that serves anything to anybody: it records every request it got (path, the token header it
# carried, the body's digest) in its output dir, and answers with the same record.
CUSTOM = textwrap.dedent(
    """
    import hashlib, http.server, json, os

    LOG = os.path.join(os.environ["AICENTER_OUTPUT_DIR"], "served.jsonl")

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _serve(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            seen = {
                "path": self.path,
                "tokens": self.headers.get_all("X-Aicenter-Serve-Token") or [],
                "sha256": hashlib.sha256(body).hexdigest(),
            }
            with open(LOG, "a") as f:
                f.write(json.dumps(seen) + "\\n")
            out = json.dumps(seen).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(out)))
            self.end_headers()
            self.wfile.write(out)

        do_GET = do_POST = _serve

        def log_message(self, *args):
            pass

    address = (os.environ["AICENTER_SERVE_BIND"], int(os.environ["PORT"]))
    print("listening", flush=True)
    http.server.ThreadingHTTPServer(address, Handler).serve_forever()
    """
)
INFER = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP64", "data": [1.5, -2]}]}


@dataclass
class Replica:
    name: str
    job_id: int
    port: int
    token: str
    handle: ReplicaHandle
    output: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def served(self) -> list[dict[str, Any]]:
        log = self.output / "served.jsonl"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


@dataclass
class World:
    replicas: dict[str, Replica]
    gateway: str  # the gateway's base URL


def _plan(jobs_root: Path, name: str, port: int, node: str) -> ReplicaPlan:
    job_id = JOBS[name]
    job = jobs_root / str(job_id)
    dirs = {d: job / d for d in ("code", "output", "model")}
    for d in dirs.values():
        d.mkdir(parents=True, exist_ok=True)
    if name == "custom":
        (dirs["code"] / "server.py").write_text(CUSTOM)
        command = f"exec {shlex.quote(sys.executable)} server.py"
        serving: dict[str, object] = {"service": name, "revision": 1, "runtime": "command", "ready_path": "/ready"}
    else:
        (dirs["code"] / "predictor.py").write_text(PREDICTOR)
        command = SERVE_COMMAND
        serving = {"service": name, "revision": 1, "runtime": "python", "entry": "predictor.py:Predictor"}
    plan = ReplicaPlan(
        job_id=job_id,
        task="server",
        replica=0,
        attempt=0,
        node=node,
        command=command,
        env={
            "AICENTER_CODE_DIR": str(dirs["code"]),
            "AICENTER_OUTPUT_DIR": str(dirs["output"]),
            "AICENTER_MODEL_DIR": str(dirs["model"]),
            "PYTHONPATH": str(SRC),  # this tree's model server (the sandbox binds it read-only)
        },
        run_dir=job / "runs" / "0" / "server-0",
        workdir=dirs["code"],
        python_bin=Path(sys.executable).parent,
        workspace_id=WORKSPACE,
    )
    token = jobs.serve_token(SECRET, job_id, 0)
    return jobs.service_plan(plan, ports=(port,), publish_host="127.0.0.1", serving=serving, token=token)


async def _until_ready(executor: LocalExecutor, replica: Replica, path: str) -> None:
    """Polls the replica's readiness with its token; fails with its log if it exits first."""
    async with httpx.AsyncClient(timeout=2) as client:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                answer = await client.get(f"{replica.url}{path}", headers={SERVE_TOKEN_HEADER: replica.token})
                if answer.status_code == 200:
                    return
            if (await executor.status(replica.handle)).state is not ReplicaState.RUNNING:
                break
            await asyncio.sleep(0.05)
    log = b"".join([c async for c in executor.logs(replica.handle)]).decode(errors="replace")
    pytest.fail(f"replica {replica.name} never became ready: {log}")


async def _until(condition: Callable[[], bool]) -> None:
    """Wait for something a server does in the background (pytest's timeout bounds it)."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.01)


def _table(world: dict[str, Replica]) -> RouteTable:
    """The route table as ``services.serving.load_route_table`` builds it: each endpoint with its serve token."""
    services = {}
    for number, (name, replica) in enumerate(world.items(), start=1):
        command = name == "custom"
        endpoint = Endpoint(
            replica.job_id, "127.0.0.1", replica.port, token=jobs.serve_token(SECRET, replica.job_id, 0)
        )
        revision = RevisionRoute(
            revision_id=number,
            number=1,
            traffic=100,
            protocol=ServingProtocol.COMMAND if command else ServingProtocol.V2,
            ready_path="/ready" if command else "/v2/health/ready",
            endpoints=(endpoint,),
        )
        services[("team", name)] = ServiceRoute(
            service_id=number,
            workspace="team",
            workspace_id=WORKSPACE,
            name=name,
            revisions=(revision,),
            key_hashes=frozenset({hashlib.sha256(KEY.encode()).hexdigest()}),
        )
    return RouteTable(services, 1)


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def world(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[World]:
    home = tmp_path_factory.mktemp("service-ports")
    home.chmod(0o755)
    jobs_root = home / "jobs"
    isolated = LocalExecutor(jobs_root, node_name=NODE, sandbox="bwrap", sandbox_uid_base=UID_BASE)
    host = LocalExecutor(jobs_root, node_name=NODE, sandbox="bwrap", sandbox_uid_base=UID_BASE, sandbox_network="host")
    executors = {"model": isolated, "custom": isolated, "hostnet": host}
    replicas: dict[str, Replica] = {}
    gateway = front = None
    try:
        for name, executor in executors.items():
            (port,) = await executor.allocate_ports(NODE, 1)
            plan = _plan(jobs_root, name, port, NODE)
            handle = await executor.launch(plan)
            output = Path(plan.env["AICENTER_OUTPUT_DIR"])
            replicas[name] = Replica(name, plan.job_id, port, plan.env["AICENTER_SERVE_TOKEN"], handle, output)
        for name, replica in replicas.items():
            await _until_ready(executors[name], replica, "/ready" if name == "custom" else "/v2/health/ready")

        async def no_token(raw: str) -> TokenInfo | None:
            return None

        async def no_activation(revision_id: int) -> None:
            return None

        table = _table(replicas)

        async def routes() -> RouteTable:
            return table

        gateway = ServingGateway(load_routes=routes, resolve_token=no_token, activate=no_activation, refresh_s=0.2)
        await gateway.start()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        front = uvicorn.Server(uvicorn.Config(gateway, log_level="warning", lifespan="off", http="httptools"))
        serving = asyncio.get_running_loop().create_task(front.serve(sockets=[sock]))
        await _until(lambda: front.started)
        yield World(replicas, f"http://127.0.0.1:{sock.getsockname()[1]}")
        front.should_exit = True
        await serving
    finally:
        if gateway is not None:
            await gateway.close()
        for name, replica in replicas.items():
            await executors[name].stop(replica.handle, grace_s=2.0)
        for job_id in JOBS.values():
            netns.release(netns.job_netns_name(str(jobs_root), job_id))


def _attacks(replica: Replica) -> list[httpx.Response]:
    """What a host process, or a job on the host's network, tries on a replica's port."""
    out = []
    with httpx.Client(base_url=replica.url, timeout=10) as client:
        for headers in ({}, {SERVE_TOKEN_HEADER: "0" * 64}, {SERVE_TOKEN_HEADER: jobs.serve_token(SECRET, 99, 0)}):
            out.append(client.get("/ready?attack", headers=headers))
            out.append(client.post(f"/v2/models/{replica.name}/infer?attack", json=INFER, headers=headers))
        # The token of another attempt of the same replica (a restarted one's) is no better.
        stale = {SERVE_TOKEN_HEADER: jobs.serve_token(SECRET, replica.job_id, 1)}
        out.append(client.post(f"/v2/models/{replica.name}/infer?attack", json=INFER, headers=stale))
    return out


def test_the_token_is_not_kept_at_rest(world: World) -> None:
    """The launcher rewrote each plan without it once read: it lives on in the replica and the launcher only."""
    for replica in world.replicas.values():
        plan = Path(replica.handle.run_dir) / "plan.json"
        assert replica.token not in plan.read_text()


@pytest.mark.parametrize("name", ["model", "custom", "hostnet"])
def test_a_caller_without_the_serve_token_gets_401_and_reaches_nothing(world: World, name: str) -> None:
    replica = world.replicas[name]
    before = replica.served()
    for answer in _attacks(replica):
        assert answer.status_code == 401, (answer.request.url, answer.text)
        assert "serve token" in answer.json()["error"]
    assert replica.served() == before  # the custom command saw none of it (the others record nothing)
    assert not [s for s in replica.served() if "attack" in s["path"]]


def test_the_first_request_decides_the_whole_connection(world: World) -> None:
    """A connection refused once is closed: a second request on it, with the right token, never reaches the
    replica. (The relay checks only a connection's first request; this is why that is enough.)"""
    replica = world.replicas["custom"]
    with socket.create_connection(("127.0.0.1", replica.port), timeout=10) as sock:
        sock.sendall(b"GET /first?attack HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.sendall(
            f"GET /second?attack HTTP/1.1\r\nHost: x\r\n{SERVE_TOKEN_HEADER}: {replica.token}\r\n\r\n".encode()
        )
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):
                answer += chunk
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert answer.count(b"HTTP/1.1") == 1
    assert not [s for s in replica.served() if "attack" in s["path"]]


async def test_through_the_gateway_every_replica_serves(world: World) -> None:
    async with httpx.AsyncClient(base_url=world.gateway, headers={"X-Api-Key": KEY}, timeout=10) as client:
        for name in ("model", "hostnet"):
            answer = await client.post(f"/serve/team/{name}/v2/models/{name}/infer", json=INFER)
            assert answer.status_code == 200, answer.text
            assert answer.json()["outputs"][0]["data"] == [3.0, -4.0]
        # A caller's own serve-token header is dropped: the replica gets the route table's, once.
        body = b"x" * 200_000
        forged = {SERVE_TOKEN_HEADER: "forged", "Content-Type": "application/octet-stream"}
        answer = await client.post("/serve/team/custom/v1/echo", content=body, headers=forged)
    assert answer.status_code == 200, answer.text
    custom = world.replicas["custom"]
    assert answer.json() == {"path": "/v1/echo", "tokens": [custom.token], "sha256": hashlib.sha256(body).hexdigest()}
    assert {tuple(s["tokens"]) for s in custom.served()} == {(custom.token,)}  # readiness probes included
