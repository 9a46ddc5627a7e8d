"""The API relay: where it forwards and what URL the job gets (pure), and bytes through it for real on loopback;
the job namespace's lifetime (as root)."""

from __future__ import annotations

import hashlib
import os
import socket
import threading

import pytest

from aicenter.runtime import netns
from aicenter.runtime.relay import Relay, relay_target


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
