"""The API relay: where it forwards and what URL the job gets (pure), and bytes through it for real on loopback;
a service replica's published-port relay, which lets a connection through only when its first request carries
the serve token; the job namespace's lifetime (as root)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from aicenter.core.jobs.serving import SERVE_TOKEN_HEADER
from aicenter.runtime import netns, relay
from aicenter.runtime.relay import HEAD_LIMIT, Relay, relay_target
from aicenter.runtime.serve import TOKEN_HEADER

TOKEN = "9f" * 32


def test_the_job_url_names_the_relay_inside_and_keeps_the_path() -> None:
    assert relay_target("http://localhost:8000/platform/") == (("localhost", 8000), "http://127.0.0.1:8000/platform")
    assert relay_target("http://0.0.0.0:9000") == (("127.0.0.1", 9000), "http://127.0.0.1:9000")
    assert relay_target("https://api.example.org") == (("api.example.org", 443), "http://127.0.0.1:443")


def test_the_servers_own_socket_wins_over_a_public_url() -> None:
    assert relay_target("https://aicenter.example.org/", ("0.0.0.0", 8000)) == (
        ("127.0.0.1", 8000),
        "http://127.0.0.1:8000",
    )


def test_a_url_without_http_has_no_relay() -> None:
    with pytest.raises(ValueError, match="not an http"):
        relay_target("unix:///run/aicenter.sock")


def test_bytes_pass_both_ways_with_half_close() -> None:
    """An upstream that reads to EOF, then answers the digest: the client's half-close must reach it."""
    upstream = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = upstream.accept()
        with conn:
            digest = hashlib.sha256()
            while data := conn.recv(65536):
                digest.update(data)
            conn.sendall(digest.hexdigest().encode())

    threading.Thread(target=serve, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))
    relay = Relay(os.dup(listener.fileno()), upstream.getsockname())
    threading.Thread(target=relay.serve, daemon=True).start()
    body = os.urandom(3 << 20)
    with socket.create_connection(listener.getsockname()) as client:
        client.sendall(body)
        client.shutdown(socket.SHUT_WR)
        answer = b"".join(iter(lambda: client.recv(65536), b""))
    assert answer.decode() == hashlib.sha256(body).hexdigest()
    assert relay.close(5.0)
    listener.close()
    upstream.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")
def test_a_namespace_lives_while_someone_holds_it() -> None:
    name = netns.job_netns_name(f"unit-{os.getpid()}", 1)
    first = netns.enter(name, api_port=8123)
    try:
        second = netns.enter(name, api_port=8123)  # the same port again: SO_REUSEPORT, one per replica
        assert netns.exists(name)
        first.close()
        assert not netns.release(name)  # the second still holds it
        assert netns.exists(name)
        second.close()
        assert netns.release(name)
        assert not netns.exists(name)
        assert name not in os.listdir(netns.NETNS_DIR)
    finally:
        netns.release(name)


# -- the published-port relay's check ------------------------------------------------------------------------


@dataclass
class Checked:
    """A checking relay in front of an upstream that answers, per connection, the digest of all it received."""

    relay: Relay
    address: tuple[str, int]
    received: list[bytes] = field(default_factory=list)  # per upstream connection, everything it got


@pytest.fixture(scope="module")
def checked() -> Iterator[Checked]:
    upstream = socket.create_server(("127.0.0.1", 0))
    received: list[bytes] = []

    def one(conn: socket.socket) -> None:
        with conn:
            data = b"".join(iter(lambda: conn.recv(65536), b""))
            received.append(data)
            conn.sendall(hashlib.sha256(data).hexdigest().encode())

    def serve() -> None:
        while True:
            try:
                conn, _ = upstream.accept()
            except OSError:
                return
            threading.Thread(target=one, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    listener = socket.create_server(("127.0.0.1", 0))
    checking = Relay(os.dup(listener.fileno()), upstream.getsockname(), token=TOKEN, head_timeout_s=0.5)
    threading.Thread(target=checking.serve, daemon=True).start()
    yield Checked(checking, listener.getsockname(), received)
    assert checking.close(5.0)
    listener.close()
    upstream.shutdown(socket.SHUT_RDWR)
    upstream.close()


def _exchange(address: tuple[str, int], *parts: bytes, pause_s: float = 0.0) -> bytes:
    """Send ``parts`` (``pause_s`` apart), half-close, and read the answer to its end."""
    with socket.create_connection(address, timeout=10) as client:
        for part in parts:
            client.sendall(part)
            if pause_s:
                time.sleep(pause_s)  # a slow client, on purpose: the relay must cut it
        client.shutdown(socket.SHUT_WR)
        return b"".join(iter(lambda: client.recv(65536), b""))


def _head(*headers: str) -> bytes:
    lines = ["POST /v1/chat/completions HTTP/1.1", "Host: replica", "Content-Length: 1048576", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def test_the_header_is_spelled_alike_everywhere() -> None:
    assert relay.SERVE_TOKEN_HEADER == TOKEN_HEADER == SERVE_TOKEN_HEADER


def test_a_request_with_the_token_is_forwarded_byte_for_byte(checked: Checked) -> None:
    head = _head("Accept: */*", f"X-Aicenter-Serve-Token:  {TOKEN} ")  # any case, any blanks around the value
    body = os.urandom(1 << 20)
    # The head in pieces (the split inside the blank line too), the body in the head's last piece and after.
    parts = [head[:20], head[20:-3], head[-3:] + body[:1000], body[1000:]]
    answer = _exchange(checked.address, *parts)
    assert answer.decode() == hashlib.sha256(head + body).hexdigest()
    assert head + body in checked.received


def test_after_the_first_request_the_connection_is_relayed_plainly(checked: Checked) -> None:
    """Keep-alive: only the gateway gets a connection through, and it sends the token with every request."""
    first = _head(f"x-aicenter-serve-token: {TOKEN}").replace(b"1048576", b"0")
    second = b"GET /v1/models HTTP/1.1\r\nHost: replica\r\n\r\n"
    assert _exchange(checked.address, first, second).decode() == hashlib.sha256(first + second).hexdigest()


@pytest.mark.parametrize(
    "headers",
    [
        (),
        ("X-Aicenter-Serve-Token: " + "0" * 64,),
        ("X-Aicenter-Serve-Token: " + TOKEN[:-1],),
        ("X-Aicenter-Serve-Token: ",),
        ("X-Aicenter-Serve-Tokens: " + TOKEN,),  # another header
        ("X-Other: X-Aicenter-Serve-Token: " + TOKEN,),  # inside another header's value
    ],
)
def test_a_request_without_the_token_gets_401_and_reaches_nothing(checked: Checked, headers: tuple[str, ...]) -> None:
    before = len(checked.received)
    answer = _exchange(checked.address, _head(*headers) + os.urandom(1 << 16))
    status, _, rest = answer.partition(b"\r\n")
    assert status == b"HTTP/1.1 401 Unauthorized"
    assert b"Connection: close" in rest
    assert rest.endswith(b'{"error": "this port serves the platform only: the request has no valid serve token"}')
    assert len(checked.received) == before


def test_the_token_in_a_later_request_of_the_connection_does_not_count(checked: Checked) -> None:
    before = len(checked.received)
    second = _head(f"X-Aicenter-Serve-Token: {TOKEN}").replace(b"1048576", b"0")
    answer = _exchange(checked.address, _head().replace(b"1048576", b"0") + second)
    assert answer.startswith(b"HTTP/1.1 401 ")
    assert len(checked.received) == before


def test_an_oversized_head_is_refused(checked: Checked) -> None:
    before = len(checked.received)
    filler = [f"X-Filler-{i}: {'a' * 1000}" for i in range(HEAD_LIMIT // 1000 + 1)]
    answer = _exchange(checked.address, _head(*filler, f"X-Aicenter-Serve-Token: {TOKEN}"))
    assert answer.startswith(b"HTTP/1.1 431 ")
    # Nor does a head without an end, however long it goes on.
    assert _exchange(checked.address, b"GET / HTTP/1.1\r\n" + b"a" * (2 * HEAD_LIMIT)).startswith(b"HTTP/1.1 431 ")
    assert len(checked.received) == before


def test_a_head_trickling_in_is_cut_at_the_deadline(checked: Checked) -> None:
    """A slowloris: a byte now and then keeps no read waiting long, but the whole head has a deadline."""
    before = len(checked.received)
    head = _head(f"X-Aicenter-Serve-Token: {TOKEN}")
    pieces = [head[i : i + 1] for i in range(len(head))]
    # A byte every 50 ms for 0.75 s, against the relay's deadline of 0.5 s; then it waits for the answer.
    answer = _exchange(checked.address, *pieces[:15], pause_s=0.05)
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert len(checked.received) == before


def test_connections_waiting_for_their_head_are_bounded(checked: Checked, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past ``MAX_CHECKING`` waiting connections, one more is closed at once, unanswered."""
    monkeypatch.setattr(relay, "MAX_CHECKING", 2)
    idle = [socket.create_connection(checked.address, timeout=10) for _ in range(2)]
    try:
        with socket.create_connection(checked.address, timeout=10) as extra:
            assert extra.recv(1024) == b""
    finally:
        for sock in idle:
            assert sock.recv(1024).startswith(b"HTTP/1.1 408 ")  # they are cut in their turn
            sock.close()
