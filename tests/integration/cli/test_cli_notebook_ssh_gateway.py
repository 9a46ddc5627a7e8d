"""``aicenter notebook ssh`` end to end through a real jump host: the system's OpenSSH client, started by the CLI,
goes through an asyncssh gateway (direct-tcpip to ``notebook-<id>``, as the platform's gateway does) to an asyncssh
server standing in for the notebook's SSH agent, both hops verified against the CLI's known_hosts file.

The notebook's ``/ssh`` answer is monkeypatched to describe these two servers (the endpoint belongs to the
gateway's side); everything the CLI does with it runs for real.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import typer

from aicenter.client import Client, NotebookSsh
from tests.integration.cli.conftest import Run
from tests.integration.cli.test_cli import as_json

pytestmark = pytest.mark.skipif(shutil.which("ssh") is None, reason="no OpenSSH client here")

SSH_TIMEOUT_S = 30  # a stuck prompt fails the test instead of hanging it; a connection here takes ~0.2 s


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Servers:
    gateway_port: int
    gateway_key: asyncssh.SSHKey
    notebook_key: asyncssh.SSHKey
    client_key_file: Path
    aliases: dict[str, int]  # notebook-<id> -> the port of the server standing in for it
    notebook_port: int


class _Gateway(asyncssh.SSHServer):
    """Jump host: forwards ``direct-tcpip`` to a known alias on port 22 and nothing else."""

    def __init__(self, aliases: dict[str, int]) -> None:
        self._aliases = aliases
        self._conn: asyncssh.SSHServerConnection | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn

    def connection_requested(self, dest_host: str, dest_port: int, orig_host: str, orig_port: int) -> Any:
        port = self._aliases.get(dest_host)
        if port is None or dest_port != 22 or self._conn is None:
            return False
        return self._conn.forward_connection("127.0.0.1", port)


async def _notebook_shell(process: asyncssh.SSHServerProcess[str]) -> None:
    process.stdout.write(f"notebook ran: {process.command}\n")
    process.exit(0)


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    tmp = tmp_path_factory.mktemp("ssh-gateway")
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp / "id_ed25519"
    key_file.write_bytes(client_key.export_private_key())
    key_file.chmod(0o600)
    authorized = asyncssh.import_authorized_keys(client_key.export_public_key().decode())
    gateway_key = asyncssh.generate_private_key("ssh-ed25519")
    notebook_key = asyncssh.generate_private_key("ssh-ed25519")
    aliases: dict[str, int] = {}
    gateway_port, notebook_port = _port(), _port()
    loop = asyncio.new_event_loop()
    ready = threading.Event()

    async def serve() -> list[asyncssh.SSHAcceptor]:
        common: dict[str, Any] = {"authorized_client_keys": authorized, "password_auth": False}
        gateway = await asyncssh.listen(
            "127.0.0.1",
            gateway_port,
            server_host_keys=[gateway_key],
            server_factory=lambda: _Gateway(aliases),
            **common,
        )
        notebook = await asyncssh.listen(
            "127.0.0.1", notebook_port, server_host_keys=[notebook_key], process_factory=_notebook_shell, **common
        )
        return [gateway, notebook]

    acceptors: list[asyncssh.SSHAcceptor] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        acceptors.extend(loop.run_until_complete(serve()))
        ready.set()
        loop.run_forever()

    thread = threading.Thread(target=run, name="ssh-gateway", daemon=True)
    thread.start()
    assert ready.wait(30)
    yield Servers(gateway_port, gateway_key, notebook_key, key_file, aliases, notebook_port)

    async def close() -> None:
        for acceptor in acceptors:
            acceptor.close()
            await acceptor.wait_closed()

    asyncio.run_coroutine_threadsafe(close(), loop).result(30)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(30)


def _public(key: asyncssh.SSHKey) -> str:
    return key.export_public_key().decode().strip()


def _answer(monkeypatch: pytest.MonkeyPatch, servers: Servers, *, gateway_key: asyncssh.SSHKey | None = None) -> None:
    def notebook_ssh(self: Client, notebook_id: int) -> NotebookSsh:
        alias = f"notebook-{notebook_id}"
        servers.aliases[alias] = servers.notebook_port
        return NotebookSsh(
            user="admin",
            gateway_host="127.0.0.1",
            gateway_port=servers.gateway_port,
            host_alias=alias,
            known_hosts=[
                f"[127.0.0.1]:{servers.gateway_port} {_public(gateway_key or servers.gateway_key)}",
                f"{alias} {_public(servers.notebook_key)}",
            ],
            config=f"Host {alias}\n    User admin\n    ProxyJump admin@127.0.0.1:{servers.gateway_port}\n",
        )

    monkeypatch.setattr(Client, "notebook_ssh", notebook_ssh)


def _run_ssh_in_place_of_exec(monkeypatch: pytest.MonkeyPatch) -> None:
    def execv(path: str, argv: list[str]) -> None:
        done = subprocess.run(
            [path, *argv[1:]],
            capture_output=True,
            text=True,
            check=False,
            timeout=SSH_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
        typer.echo(done.stdout)
        typer.echo(done.stderr, err=True)
        raise typer.Exit(done.returncode)

    monkeypatch.setattr("os.execv", execv)


def _notebook(cli: Run, name: str) -> None:
    result = cli("node", "create", "ssh-gw-node", "--cpu", "8", "--memory", "16Gi")
    assert result.exit_code == 0 or "already" in result.output, result.output
    as_json(cli("notebook", "create", name, "--cpu", "1", "--memory", "256Mi", "-o", "json"))


def test_ssh_through_the_gateway_checks_both_host_keys(
    admin_cli: Run, servers: Servers, monkeypatch: pytest.MonkeyPatch
) -> None:
    _notebook(admin_cli, "gw-nb")
    _answer(monkeypatch, servers)
    _run_ssh_in_place_of_exec(monkeypatch)
    options = ("-i", str(servers.client_key_file), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes")
    result = admin_cli("notebook", "ssh", "gw-nb", "--", *options, "echo", "hello")
    assert result.exit_code == 0, result.output
    assert "notebook ran: echo hello" in result.stdout


def test_a_wrong_gateway_key_is_refused(admin_cli: Run, servers: Servers, monkeypatch: pytest.MonkeyPatch) -> None:
    """The jump hop is checked against the CLI's file too, never trusted on first sight."""
    _notebook(admin_cli, "gw-nb-bad")
    _answer(monkeypatch, servers, gateway_key=asyncssh.generate_private_key("ssh-ed25519"))
    _run_ssh_in_place_of_exec(monkeypatch)
    options = ("-i", str(servers.client_key_file), "-o", "BatchMode=yes")
    result = admin_cli("notebook", "ssh", "gw-nb-bad", "--", *options, "echo", "hello")
    assert result.exit_code != 0
    assert "notebook ran" not in result.stdout
    assert f"Host key for [127.0.0.1]:{servers.gateway_port} has changed" in result.stderr, result.stderr
    assert "Host key verification failed" in result.stderr


def test_the_printed_config_reaches_the_notebook(
    admin_cli: Run, servers: Servers, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What VS Code and PyCharm do with the block: ``ssh <alias>`` through ProxyJump, both hops verified."""
    _notebook(admin_cli, "gw-config")
    _answer(monkeypatch, servers)
    printed = admin_cli("notebook", "ssh-config", "gw-config")
    assert printed.exit_code == 0, printed.output
    alias = next(line.split()[1] for line in printed.stdout.splitlines() if line.startswith("Host notebook-"))
    config = tmp_path / "config"  # ~/.ssh/config stand-in; the user's key settings below, as theirs would be
    key = servers.client_key_file
    config.write_text(printed.stdout + f"Host *\n    IdentityFile {key}\n    IdentitiesOnly yes\n    BatchMode yes\n")
    done = subprocess.run(
        ["ssh", "-F", str(config), alias, "echo", "configured"],
        capture_output=True,
        text=True,
        check=False,
        timeout=SSH_TIMEOUT_S,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    assert "notebook ran: echo configured" in done.stdout
