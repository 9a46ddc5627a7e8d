"""A custom command revision end to end on a real ``aicenter up`` (every replica in its sandbox).

alice's own OpenAI-compatible server (stdlib ``http.server``, shipped as algorithm version ``chat:1``) answers
``/v1/chat/completions`` with what its model version holds (``persona:1`` says "alpha", ``persona:2`` "beta"),
streaming server-sent events when asked. alice deploys, updates and rolls back with the CLI's options (no spec
file); callers come through the gateway with a service key:

- a streamed answer arrives as it is produced: the server holds its last chunk until the client, having read the
  first one, releases it by another request (a gateway that buffered would deliver nothing before the server's
  own time-out, and the last chunk would say so);
- an update whose command never becomes ready fails with its reason (API and ``service get``) while the old
  revision answers every request of a steady load;
- a 0 % canary bound to an A/B header value is reached by that header and by ``X-Aicenter-Revision`` only;
- a steps rollout (50 %, then 100 %) under steady load fails no request and ends on the new revision, while the
  old one, bound to an A/B header value, still answers that value.
"""

from __future__ import annotations

import json
import textwrap
import time
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in
from tests.e2e.serving_support import SteadyLoad, revision_replicas, traffic, user_http, wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PASSWORD = "alice-Passw0rd-1"
CHAT = ("v1/chat/completions", {"model": "persona", "messages": [{"role": "user", "content": "hi"}]})

SERVER = textwrap.dedent(
    """\
    # A tiny OpenAI-compatible server: GET /health, POST /v1/chat/completions (streamed as server-sent events when
    # "stream" is true), POST /release (lets a stream named by "user" send its last chunk).
    import json
    import os
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from pathlib import Path

    ANSWER = (Path(os.environ["AICENTER_MODEL_DIR"]) / "answer.txt").read_text().strip()
    NEVER_READY = os.environ.get("NEVER_READY") == "1"
    RELEASES: dict[str, threading.Event] = {}
    LOCK = threading.Lock()


    def release(name: str) -> threading.Event:
        with LOCK:
            return RELEASES.setdefault(name, threading.Event())


    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _json(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _chunk(self, data: bytes) -> None:
            self.wfile.write(b"%x\\r\\n%s\\r\\n" % (len(data), data))
            self.wfile.flush()

        def _event(self, content: str) -> None:
            delta = {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": content}}]}
            self._chunk(b"data: " + json.dumps(delta).encode() + b"\\n\\n")

        def do_GET(self) -> None:
            if self.path == "/health":
                self._json(503 if NEVER_READY else 200, {"ready": not NEVER_READY})
            else:
                self._json(404, {"error": "no such path"})

        def do_POST(self) -> None:
            request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            if self.path == "/release":
                release(request["user"]).set()
                self._json(200, {"released": request["user"]})
                return
            if self.path != "/v1/chat/completions":
                self._json(404, {"error": "no such path"})
                return
            if not request.get("stream"):
                message = {"role": "assistant", "content": ANSWER}
                self._json(200, {"object": "chat.completion", "choices": [{"index": 0, "message": message}]})
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._event(ANSWER)
            released = release(request.get("user", "")).wait(30)
            self._event("after release" if released else "no release within 30 s")
            self._chunk(b"data: [DONE]\\n\\n")
            self._chunk(b"")


    ThreadingHTTPServer.daemon_threads = True
    server = ThreadingHTTPServer((os.environ.get("AICENTER_SERVE_BIND", "127.0.0.1"), int(os.environ["PORT"])), Handler)
    print("serving", ANSWER, "on", server.server_address, flush=True)
    server.serve_forever()
    """
)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("serving-custom")
    server = Server(tmp / "home", env={"AICENTER_SERVING_INTERVAL_S": "0.5"}).start()
    try:
        admin = signed_in(tmp, server, "admin", ADMIN_PASSWORD)
        admin.run("user", "create", "alice", "--password-stdin", stdin=f"{PASSWORD}\n")
        admin.run("workspace", "create", "lab", "--admin", "alice")
        alice = signed_in(tmp, server, "alice", PASSWORD)
        code = tmp / "chat"
        code.mkdir()
        (code / "server.py").write_text(SERVER)
        alice.json("algorithm", "push", str(code), "--name", "chat", "--workspace", "lab", "--no-progress")
        for answer in ("alpha", "beta"):  # persona:1, persona:2
            folder = tmp / f"persona-{answer}"
            folder.mkdir()
            (folder / "answer.txt").write_text(answer + "\n")
            alice.json("model", "push", str(folder), "--name", "persona", "--workspace", "lab", "--no-progress")
        token = httpx.post(f"{server.url}/api/v1/auth/login", json={"username": "alice", "password": PASSWORD})
        yield {"server": server, "alice": alice, "tokens": {"alice": token.json()["token"]}}
    finally:
        if server.proc is not None:
            server.stop()


def _chat(base: str, headers: dict[str, str]) -> tuple[str, str]:
    """The revision that answered and what it said (a non-streamed completion)."""
    answer = httpx.post(f"{base}/{CHAT[0]}", json=CHAT[1], headers=headers, timeout=60)
    assert answer.status_code == 200, answer.text
    return answer.headers["x-aicenter-revision"], answer.json()["choices"][0]["message"]["content"]


def _stream(base: str, key: str) -> list[tuple[str, str]]:
    """A streamed completion, as what happened in order: each event read, and the release sent after the first."""
    name = uuid.uuid4().hex
    events: list[tuple[str, str]] = []
    headers = {"X-Api-Key": key}
    body = {**CHAT[1], "stream": True, "user": name}
    with httpx.stream("POST", f"{base}/{CHAT[0]}", json=body, headers=headers, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events.append(("revision", response.headers["x-aicenter-revision"]))
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            data = line.removeprefix("data: ")
            if data == "[DONE]":
                events.append(("done", ""))
                continue
            events.append(("chunk", json.loads(data)["choices"][0]["delta"]["content"]))
            if len(events) == 2:  # the first chunk is here: only now may the server send the rest
                released = httpx.post(f"{base}/release", json={"user": name}, headers=headers, timeout=60)
                events.append(("released", str(released.status_code)))
    return events


def test_custom_command_streams_fails_safely_ab_header_and_steps(world: dict[str, Any]) -> None:
    server: Server = world["server"]
    alice = user_http(world, "alice")
    deploy_started = time.monotonic()
    cli = world["alice"]
    deployed = cli.json(
        "service", "deploy", "persona:1", "--name", "assist", "--workspace", "lab",
        "--algorithm", "chat:1", "--command", "python -u server.py", "--ready-path", "/health",
        "--cpu", "500m", "--memory", "256Mi", "--min-replicas", "1", "--max-replicas", "1",
        "--ab-header", "X-Variant", "--header-value", "a",
    )  # fmt: skip
    sid, path = deployed["id"], deployed["url"]
    assert (path, deployed["runtime"], deployed["ab_header"]) == ("/serve/lab/assist", "command", "x-variant")
    wait("ready", lambda: alice.get(f"/api/v1/services/{sid}").json()["status"] == "ready")
    ready_s = time.monotonic() - deploy_started
    key = alice.post(f"/api/v1/services/{sid}/keys", json={"name": "app"}).json()["key"]
    base = server.url + path
    headers = {"X-Api-Key": key}
    assert _chat(base, headers) == ("1", "alpha")

    # a. Streamed: the first chunk reaches the client while the server still holds the last one.
    events = _stream(base, key)
    assert events == [
        ("revision", "1"),
        ("chunk", "alpha"),
        ("released", "200"),
        ("chunk", "after release"),
        ("done", ""),
    ], events

    # b. A command that never becomes ready: revision 2 fails with its reason, revision 1 answers throughout.
    with SteadyLoad(server.url, path, key, CHAT) as load:
        update_started = time.monotonic()
        cli.run("service", "update", "assist", "-w", "lab", "--env", "NEVER_READY=1", "--ready-timeout", "5")
        failed = wait(
            "revision 2 failed",
            lambda: next(
                (r for r in alice.get(f"/api/v1/services/{sid}").json()["revisions"] if r["state"] == "failed"), None
            ),
            60,
        )
        failed_s = time.monotonic() - update_started
        wait("its replica stopped", lambda: revision_replicas(alice, sid) == [("ready", 1), ("failed", 0)], 60)
        mark = len(load.served)
        wait("requests after the failure", lambda: len(load.served) >= mark + 5, 30)
    assert (failed["number"], failed["message"]) == (2, "revision 2 failed: not ready after 5 s")
    assert load.failures == [], load.failures[:5]
    assert set(load.revisions) == {"1"}, load.revisions
    during_failure = load.statuses.get(200, 0)
    shown = cli.run("service", "get", "assist", "--workspace", "lab").stdout
    assert "failed" in shown
    assert "not ready after 5 s" in shown, shown
    assert alice.get(f"/api/v1/services/{sid}").json()["status"] == "ready"

    # d. A/B by header: revision 3 (persona:2, header value "b") takes 0 % of the traffic, only what names it.
    cli.run("service", "update", "assist", "persona:2", "-w", "lab", "--header-value", "b", "--canary", "0")
    wait("revision 3 ready", lambda: revision_replicas(alice, sid)[2] == ("ready", 1))
    assert traffic(alice, sid) == [100, 0, 0]
    assert _chat(base, headers) == ("1", "alpha")
    assert _chat(base, {**headers, "X-Variant": "b"}) == ("3", "beta")
    assert _chat(base, {**headers, "X-Variant": "a"}) == ("1", "alpha")
    assert _chat(base, {**headers, "X-Aicenter-Revision": "3"}) == ("3", "beta")
    assert _chat(base, {**headers, "X-Aicenter-Revision": "1"}) == ("1", "alpha")
    failed_pin = httpx.post(f"{base}/{CHAT[0]}", json=CHAT[1], headers={**headers, "X-Aicenter-Revision": "2"})
    assert failed_pin.status_code == 404, failed_pin.text  # a failed revision is not routed to
    cli.run("service", "rollback", "assist", "-w", "lab")
    gone = httpx.post(f"{base}/{CHAT[0]}", json=CHAT[1], headers={**headers, "X-Aicenter-Revision": "3"})
    assert gone.status_code == 404, gone.text  # the rollback is routed from the very next request
    assert _chat(base, {**headers, "X-Variant": "b"}) == ("1", "alpha")  # no revision holds "b" any more

    # c. Steps (50 %, then 100 %) under steady load: no request fails, the traffic ends on revision 4.
    seen: list[list[int]] = []

    def rolled_out() -> bool:
        now = traffic(alice, sid)
        if not seen or seen[-1] != now:
            seen.append(now)
        # Revision 1 stays, for its A/B header value only ("a"): it keeps its replica and takes no traffic.
        return now == [0, 0, 0, 100] and revision_replicas(alice, sid)[3] == ("ready", 1)

    with SteadyLoad(server.url, path, key, CHAT) as load:
        cli.run("service", "update", "assist", "persona:2", "-w", "lab", "--header-value", "b", "--steps", "50",
                "--step-interval", "3")  # fmt: skip
        steps_started = time.monotonic()
        wait("steps rolled out", rolled_out, show=lambda: (seen, alice.get(f"/api/v1/services/{sid}").json()))
        steps_s = time.monotonic() - steps_started
        mark = len(load.served)
        wait("requests after the rollout", lambda: len(load.served) >= mark + 10, 30)
    assert load.failures == [], load.failures[:5]
    assert [50, 0, 0, 50] in seen, seen  # the step between
    assert seen[-1] == [0, 0, 0, 100], seen
    assert {"1", "4"} <= set(load.revisions), load.revisions
    assert set(load.served[mark + 2 :]) == {"4"}, load.served[mark:]  # (two requests may have been in flight)
    assert traffic(alice, sid) == [0, 0, 0, 100]  # and it stayed there
    assert _chat(base, headers) == ("4", "beta")
    assert _chat(base, {**headers, "X-Variant": "a"}) == ("1", "alpha")
    figures = {
        "custom_command_ready_s": round(ready_s, 3),
        "never_ready_failed_after_s": round(failed_s, 1),  # ready_timeout_s 5, the controller ticks every 0.5 s
        "requests_ok_during_failed_update": during_failure,
        "steps_50_100_rolled_out_s": round(steps_s, 1),  # step_interval_s 3
        "requests_ok_during_steps": load.statuses.get(200, 0),
    }
    print(json.dumps(figures))
