"""The serving gateway end to end over real sockets: replicas and the gateway are uvicorn servers on 127.0.0.1:0
in this process, the caller is httpx. The route table and the control plane's callables are small stand-ins
(the table is what ``services.serving`` would build; ``activate`` starts a replica as the autoscaler would).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import socket
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import pytest
import uvicorn

from aicenter.core.serving.routing import (
    Endpoint,
    RevisionRoute,
    RouteTable,
    ServiceRoute,
    ServingProtocol,
    TokenInfo,
)
from aicenter.gateway.serving import GatewayMetrics, ServingGateway

KEY = "sk-live-123"
KEY_HASH = hashlib.sha256(KEY.encode()).hexdigest()
MEMBER_TOKEN = "tok-member"
OUTSIDER_TOKEN = "tok-outsider"
WORKSPACE_ID = 7
INFER = "/serve/team/clf/v2/models/clf/infer"


class Replica:
    """A stand-in model server: readiness, an echo of what reached it, a server-sent event stream; with a serve
    token, 401 for any request (probes included) that does not carry it, as the model server does."""

    def __init__(self, name: str, *, ready: bool = True, delay_s: float = 0.0, token: str = "") -> None:
        self.name = name
        self.ready = ready
        self.delay_s = delay_s
        self.token = token
        self.served = 0
        self.refused = 0
        self.proceed = asyncio.Event()  # the stream's second event waits for it

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        tokens = [v for k, v in scope["headers"] if k == b"x-aicenter-serve-token"]
        if self.token and tokens != [self.token.encode()]:  # exactly once: a second (a caller's) is refused too
            self.refused += 1
            await _answer(send, 401, {"error": "no valid serve token"})
            return
        path = scope["path"]
        if path in ("/v2/health/ready", "/healthz"):
            await _answer(send, 200 if self.ready else 503, {"ready": self.ready})
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.served += 1
        if path == "/v1/chat/completions":
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"text/event-stream")]})  # fmt: skip
            await send({"type": "http.response.body", "body": b"data: one\n\n", "more_body": True})
            await self.proceed.wait()
            await send({"type": "http.response.body", "body": b"data: two\n\n", "more_body": True})
            await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})
            return
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        await _answer(
            send,
            200,
            {"replica": self.name, "path": path, "query": scope["query_string"].decode(), "headers": headers,
             "body": len(body)},
        )  # fmt: skip


async def _answer(send: Any, status: int, payload: object) -> None:
    body = json.dumps(payload).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def until(condition: Callable[[], bool]) -> None:
    """Wait for something the gateway or a server does in the background (pytest's timeout bounds it)."""
    while True:
        if condition():
            return
        await asyncio.sleep(0.01)


@dataclass
class Served:
    server: uvicorn.Server
    task: asyncio.Task[None]
    port: int

    async def stop(self) -> None:
        self.server.should_exit = True
        await self.task


async def serve(app: Any, **options: Any) -> Served:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", lifespan="off", http="httptools", **options)
    server = uvicorn.Server(config)
    task = asyncio.get_running_loop().create_task(server.serve(sockets=[sock]))
    await until(lambda: server.started)
    return Served(server, task, sock.getsockname()[1])


@dataclass
class World:
    """The table the control plane would build, what it was asked, and the running servers."""

    table: RouteTable = field(default_factory=RouteTable)
    activations: list[int] = field(default_factory=list)
    on_activate: Callable[[int], Any] | None = None
    activated: asyncio.Event = field(default_factory=asyncio.Event)
    servers: list[Served] = field(default_factory=list)
    load_delay_s: float = 0.0  # a slow database read

    async def load_routes(self) -> RouteTable:
        if self.load_delay_s:
            await asyncio.sleep(self.load_delay_s)
        return self.table

    async def resolve_token(self, token: str) -> TokenInfo | None:
        return {
            MEMBER_TOKEN: TokenInfo(1, frozenset({WORKSPACE_ID, 9})),
            OUTSIDER_TOKEN: TokenInfo(2, frozenset({9})),
        }.get(token)

    async def activate(self, revision_id: int) -> None:
        self.activations.append(revision_id)
        self.activated.set()
        if self.on_activate is not None and len(self.activations) == 1:
            result = self.on_activate(revision_id)
            if asyncio.iscoroutine(result):
                await result

    async def replica(self, replica: Replica, job_id: int, **options: Any) -> Endpoint:
        served = await serve(replica, **options)
        self.servers.append(served)
        return Endpoint(job_id, "127.0.0.1", served.port, token=replica.token)


def service(*revisions: RevisionRoute, **kw: Any) -> RouteTable:
    svc = ServiceRoute(
        service_id=1, workspace="team", workspace_id=WORKSPACE_ID, name="clf", revisions=revisions,
        key_hashes=frozenset({KEY_HASH}), **kw,
    )  # fmt: skip
    return RouteTable({("team", "clf"): svc}, version=1)


@dataclass
class Harness:
    world: World
    gateway: ServingGateway
    client: httpx.AsyncClient

    async def set_table(self, table: RouteTable) -> None:
        self.world.table = table
        self.gateway.refresh_soon()
        await until(lambda: self.gateway.table is table)

    async def until_ready(self, *job_ids: int) -> None:
        await until(lambda: set(job_ids) <= self.gateway.ready_replicas())


@pytest.fixture
async def harness() -> AsyncIterator[Harness]:
    world = World()
    gateway = ServingGateway(
        load_routes=world.load_routes, resolve_token=world.resolve_token, activate=world.activate, refresh_s=0.2
    )
    await gateway.start()
    front = await serve(gateway)
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{front.port}", headers={"x-api-key": KEY}, timeout=8)
    try:
        yield Harness(world, gateway, client)
    finally:
        await client.aclose()
        await front.stop()
        await gateway.close()
        for served in world.servers:
            with contextlib.suppress(Exception):
                await served.stop()


async def test_the_path_is_rewritten_and_credentials_stay_behind(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,))))
    await harness.until_ready(11)
    reply = await harness.client.post(INFER + "?x=1", content=b"{}", headers={"authorization": "Bearer " + KEY})
    assert reply.status_code == 200, reply.text
    seen = reply.json()
    assert (seen["path"], seen["query"], seen["body"]) == ("/v2/models/clf/infer", "x=1", 2)
    assert "authorization" not in seen["headers"]
    assert "x-api-key" not in seen["headers"]
    assert seen["headers"]["x-forwarded-prefix"] == "/serve/team/clf"
    assert seen["headers"]["x-forwarded-for"] == "127.0.0.1"
    assert reply.headers["x-aicenter-revision"] == "1"


async def test_each_replica_gets_its_own_serve_token_and_a_callers_is_dropped(harness: Harness) -> None:
    """Probes and requests carry the endpoint's token (replicas answer nothing else); one a caller sends is not
    passed on, whether it is a guess or the token itself."""
    replicas = [Replica("a", token="token-of-11"), Replica("b", token="token-of-12")]
    a = await harness.world.replica(replicas[0], 11)
    b = await harness.world.replica(replicas[1], 12)
    assert "token-of" not in repr(a)  # never in a log line
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a, b))))
    await harness.until_ready(11, 12)  # the readiness probes sent the tokens
    seen: dict[str, list[str]] = {}
    for forged in ("forged", "token-of-11", "token-of-12"):
        for _ in range(8):
            reply = await harness.client.post(INFER, content=b"{}", headers={"x-aicenter-serve-token": forged})
            assert reply.status_code == 200, reply.text
            answer = reply.json()
            seen.setdefault(answer["replica"], []).append(answer["headers"]["x-aicenter-serve-token"])
    assert {name: set(tokens) for name, tokens in seen.items()} == {"a": {"token-of-11"}, "b": {"token-of-12"}}
    assert [r.refused for r in replicas] == [0, 0]


async def test_unknown_stopped_and_foreign_paths(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,))))
    missing = await harness.client.get("/serve/team/nope/v2/models/nope")
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]
    assert (await harness.client.get("/serve/team/clf/v1/models")).status_code == 404  # V2 revisions: v2/ only
    assert (await harness.client.get("/serve/team/clf/v2/models/other/ready")).status_code == 404
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,)), stopped=True))
    stopped = await harness.client.post(INFER, content=b"{}")
    assert stopped.status_code == 503
    assert "stopped" in stopped.json()["error"]


async def test_a_request_after_refresh_soon_sees_the_new_table(harness: Harness) -> None:
    """A change made through this process (a deploy, a stop) asks for a reload: the next request waits for it
    instead of meeting the table of up to ``refresh_s`` ago (a slow reload makes the race certain here)."""
    a = await harness.world.replica(Replica("a"), 11)
    await harness.set_table(RouteTable())
    assert (await harness.client.post(INFER, content=b"{}")).status_code == 404
    harness.world.load_delay_s = 0.1  # under refresh_s (0.2), the longest a request waits for a reload
    harness.world.table = table = service(RevisionRoute(101, 1, 100, endpoints=(a,)))
    harness.gateway.refresh_soon()
    reply = await harness.client.post(INFER, content=b"{}")
    assert harness.gateway.table is table
    assert reply.status_code == 200, reply.text
    assert reply.json()["replica"] == "a"


async def test_traffic_split_pinning_and_ab_header(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    b = await harness.world.replica(Replica("b"), 12)
    await harness.set_table(
        service(
            RevisionRoute(101, 1, 80, endpoints=(a,)),
            RevisionRoute(102, 2, 20, endpoints=(b,), header_value="beta"),
            RevisionRoute(103, 3, 0, endpoints=(b,)),
            ab_header="x-variant",
        )
    )
    await harness.until_ready(11, 12)
    replies = await asyncio.gather(*(harness.client.post(INFER, content=b"{}") for _ in range(300)))
    numbers = [r.headers["x-aicenter-revision"] for r in replies]
    assert all(r.status_code == 200 for r in replies)
    # 80 % of 300 = 240 (binomial sd ~7): bounds at about 5 sd; revision 3 takes no unpinned traffic.
    assert 200 <= numbers.count("1") <= 275
    assert numbers.count("3") == 0
    pinned = await harness.client.post(INFER, content=b"{}", headers={"x-aicenter-revision": "3"})
    assert pinned.headers["x-aicenter-revision"] == "3"
    nowhere = await harness.client.post(INFER, content=b"{}", headers={"x-aicenter-revision": "9"})
    assert nowhere.status_code == 404
    assert "error" in nowhere.json()
    ab = [await harness.client.post(INFER, content=b"{}", headers={"x-variant": "beta"}) for _ in range(10)]
    assert {r.headers["x-aicenter-revision"] for r in ab} == {"2"}


async def test_least_outstanding_sends_fewer_requests_to_a_slow_replica(harness: Harness) -> None:
    fast, slow = Replica("fast"), Replica("slow", delay_s=0.2)
    a = await harness.world.replica(fast, 11)
    b = await harness.world.replica(slow, 12)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a, b))))
    await harness.until_ready(11, 12)

    async def caller() -> None:
        for _ in range(10):
            assert (await harness.client.post(INFER, content=b"{}")).status_code == 200

    await asyncio.gather(*(caller() for _ in range(4)))
    assert fast.served + slow.served == 40
    assert slow.served < fast.served


async def test_a_dead_replica_costs_no_request(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    b = await harness.world.replica(Replica("b"), 12)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a, b))))
    await harness.until_ready(11, 12)
    await harness.world.servers[1].stop()  # b dies; the table still lists it
    replies = await asyncio.gather(*(harness.client.post(INFER, content=b"{}") for _ in range(30)))
    assert [r.status_code for r in replies] == [200] * 30
    assert {r.json()["replica"] for r in replies} == {"a"}
    assert 12 not in harness.gateway.ready_replicas()


async def test_a_replica_closing_idle_connections_costs_no_request(harness: Harness) -> None:
    # uvicorn closes a kept-alive connection after timeout_keep_alive idle seconds: every pooled one goes stale
    a = await harness.world.replica(Replica("a"), 11, timeout_keep_alive=0.05)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,))))
    await harness.until_ready(11)
    for _ in range(5):
        assert (await harness.client.post(INFER, content=b"{}")).status_code == 200
        await asyncio.sleep(0.1)  # longer than the replica keeps the connection
    # a stale connection is not the replica's failure: it was never taken for down, nothing was held for it
    assert harness.world.activations == []
    assert harness.gateway.ready_replicas() == {11}


async def test_activator_holds_from_zero_until_a_replica_is_ready(harness: Harness) -> None:
    world = harness.world
    cold = Replica("cold", ready=False)  # listening, model not loaded yet

    async def scale_up(revision_id: int) -> None:
        endpoint = await world.replica(cold, 21)
        world.table = service(RevisionRoute(revision_id, 1, 100, endpoints=(endpoint,), max_replicas=2))
        asyncio.get_running_loop().call_later(0.3, setattr, cold, "ready", True)

    world.on_activate = scale_up
    await harness.set_table(service(RevisionRoute(101, 1, 100, max_replicas=2)))
    replies = await asyncio.gather(*(harness.client.post(INFER, content=b"{}") for _ in range(5)))
    assert [r.status_code for r in replies] == [200] * 5
    assert {r.json()["replica"] for r in replies} == {"cold"}
    assert world.activations[0] == 101
    load = harness.gateway.take_load()[101]
    assert load.requests == 5
    assert load.held == 0
    assert load.peak_concurrency == 5


async def test_activator_timeout_and_full_queue_answer_503(harness: Harness) -> None:
    world = harness.world
    await harness.set_table(service(RevisionRoute(101, 1, 100, activation_timeout_s=0.5, max_held=1)))
    first = asyncio.create_task(harness.client.post(INFER, content=b"{}"))
    await world.activated.wait()  # the first request is held
    full = await harness.client.post(INFER, content=b"{}")
    assert full.status_code == 503
    assert full.headers["retry-after"] == "1"
    assert "error" in full.json()
    timed_out = await first
    assert timed_out.status_code == 503
    assert timed_out.headers["retry-after"] == "1"
    assert "became ready" in timed_out.json()["error"]
    assert world.activations[0] == 101


async def test_keys_and_tokens(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    table = service(RevisionRoute(101, 1, 100, endpoints=(a,)))
    await harness.set_table(table)
    await harness.until_ready(11)
    client = harness.client

    async def status(**headers: str) -> int:
        reply = await client.post(INFER, content=b"{}", headers=headers)
        return reply.status_code

    client.headers.pop("x-api-key")
    assert await status() == 401
    assert await status(authorization="Bearer " + MEMBER_TOKEN) == 200
    assert await status(authorization="Bearer " + OUTSIDER_TOKEN) == 403
    assert await status(authorization="Bearer nobody") == 403
    assert await status(**{"x-api-key": KEY}) == 200
    svc = table.services["team", "clf"]
    await harness.set_table(RouteTable({("team", "clf"): replace(svc, key_hashes=frozenset())}, version=2))
    revoked = await client.post(INFER, content=b"{}", headers={"x-api-key": KEY})
    assert revoked.status_code == 403
    assert KEY not in revoked.text


async def test_bodies_over_the_limit_get_413(harness: Harness) -> None:
    a = await harness.world.replica(Replica("a"), 11)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,)), max_body_bytes=100))
    await harness.until_ready(11)
    assert (await harness.client.post(INFER, content=b"x" * 100)).status_code == 200
    declared = await harness.client.post(INFER, content=b"x" * 101)
    assert declared.status_code == 413
    assert "100" in declared.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        for _ in range(5):
            yield b"x" * 30

    assert (await harness.client.post(INFER, content=chunks())).status_code == 413


async def test_a_stream_passes_through_as_it_is_produced(harness: Harness) -> None:
    llm = Replica("llm")
    a = await harness.world.replica(llm, 11)
    await harness.set_table(
        service(RevisionRoute(101, 1, 100, protocol=ServingProtocol.COMMAND, ready_path="/healthz", endpoints=(a,)))
    )
    await harness.until_ready(11)
    request = harness.client.build_request("POST", "/serve/team/clf/v1/chat/completions", json={"stream": True})
    reply = await harness.client.send(request, stream=True)
    assert reply.status_code == 200
    assert reply.headers["content-type"] == "text/event-stream"
    pieces = reply.aiter_raw()
    first = await asyncio.wait_for(anext(pieces), 10)  # the replica sends the rest only after this arrived
    assert first == b"data: one\n\n"
    llm.proceed.set()
    rest = b"".join([piece async for piece in pieces])
    await reply.aclose()
    assert rest == b"data: two\n\ndata: [DONE]\n\n"


async def test_metrics_and_load(harness: Harness) -> None:
    from prometheus_client import Counter, Histogram

    requests = Counter("t_requests", "", ["service", "revision", "code"], registry=None)
    duration = Histogram("t_duration", "", ["service", "revision"], registry=None)
    harness.gateway._metrics = GatewayMetrics(requests, duration)
    a = await harness.world.replica(Replica("a"), 11)
    await harness.set_table(service(RevisionRoute(101, 1, 100, endpoints=(a,))))
    await harness.until_ready(11)
    harness.gateway.take_load()
    for _ in range(3):
        await harness.client.post(INFER, content=b"{}")
    await harness.client.post("/serve/team/clf/v1/nothing")
    assert requests.labels("team/clf", "1", "200")._value.get() == 3
    assert requests.labels("team/clf", "1", "404")._value.get() == 1
    load = harness.gateway.take_load()[101]
    assert (load.requests, load.errors, load.held, dict(load.in_flight)) == (3, 0, 0, {11: 0})
    assert load.latency_p50_s is not None
    assert load.latency_p99_s is not None


async def test_a_caller_that_leaves_is_no_longer_held(harness: Harness) -> None:
    await harness.set_table(service(RevisionRoute(101, 1, 100, activation_timeout_s=60)))
    with pytest.raises(httpx.ReadTimeout):
        await harness.client.post(INFER, content=b"{}", timeout=httpx.Timeout(5, read=0.3))
    assert harness.world.activations[0] == 101

    def held() -> int:
        load = harness.gateway.take_load().get(101)
        return load.held if load is not None else 0

    await until(lambda: held() == 0)  # without the disconnect watch it would stay held for 60 s
