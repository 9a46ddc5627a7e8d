"""SSH into a notebook through the gateway, with the system OpenSSH client: real ``ssh``, ``sftp``, ``ssh -L``.

The notebook's agent runs as a real subprocess (python -m aicenter.runtime.notebook_ssh) on 127.0.0.x, outside a
sandbox here: what the sandbox adds (its own network namespace and uid) is the launcher's business, not this
server's. The gateway runs in this process on its own event loop thread, with a tiny ``resolve`` in place of
the notebook service. Clients use an ssh config file as users do (ProxyJump, known_hosts with both host keys):
OpenSSH passes neither ``-i`` nor ``-o`` options to the jump hop, only the config file.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import asyncssh
import pytest

from aicenter.core.ssh import GATEWAY_ALIAS, ssh_config
from aicenter.gateway.ssh import GATEWAY_HINT, MAX_KEYS_PER_CONNECTION, GatewayUser, SshGateway
from aicenter.runtime.sshfiles import write_authorized_keys, write_host_key

HOST = "127.0.0.83"  # the agent and the gateway; the client's forwarded ports too
T = TypeVar("T")
NOTEBOOKS = ("notebook-1", "notebook-2", "notebook-9")
SRC = Path(__file__).resolve().parents[3] / "src"


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", path.name, "-f", str(path)], check=True)
    return path.with_suffix(".pub").read_text().strip()


@dataclass
class Env:
    root: Path
    workdir: Path
    activity_file: Path
    authorized: Path
    agent_port: int
    gateway: SshGateway
    keys: dict[str, str]  # who -> public line
    activity: list[str] = field(default_factory=list)

    def config(self, who: str) -> Path:
        """An ssh config for ``who``'s key as ``aicenter notebook ssh-config`` writes it (core.ssh), one block per
        notebook name the tests use, plus what keeps the test hermetic (its own known_hosts, no prompts)."""
        path = self.root / f"ssh_config_{who}"
        if not path.exists():
            blocks = [
                ssh_config(
                    alias=alias,
                    gateway_host=HOST,
                    gateway_port=self.gateway.port,
                    user=who,
                    identity_file=str(self.root / who),
                )
                for alias in NOTEBOOKS
            ]
            path.write_text(
                "\n".join(blocks)
                + f"\nHost *\n  UserKnownHostsFile {self.root / 'known_hosts'}\n  GlobalKnownHostsFile /dev/null\n"
                "  StrictHostKeyChecking yes\n  BatchMode yes\n  ControlMaster no\n  ConnectTimeout 10\n"
            )
        return path

    def ssh(
        self, *args: str, who: str = "alice", stdin: str | None = None, timeout: float = 30
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(self.config(who)), *args],
            input=stdin if stdin is not None else "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )


class _LoopThread:
    """An event loop on its own thread: the gateway serves while the tests block on subprocesses."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=30)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        self.loop.close()


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    root = tmp_path_factory.mktemp("ssh")
    workdir = root / "work"
    workdir.mkdir()
    keys = {who: _keygen(root / who) for who in ("alice", "mallory", "stranger", "alice2")}
    host_key = root / "agent_host_key"
    agent_public = write_host_key(host_key)
    authorized = root / "authorized_keys"
    write_authorized_keys(authorized, [keys["alice"]])
    activity_file = root / "activity"
    agent_port = _free_port(HOST)
    agent = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aicenter.runtime.notebook_ssh",
            "--listen",
            f"{HOST}:{agent_port}",
            "--host-key",
            str(host_key),
            "--authorized-keys",
            str(authorized),
            "--activity",
            str(activity_file),
            "--activity-every",
            "0",
            "--workdir",
            str(workdir),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SRC), "FOO": "from-the-notebook", "SHELL": "/bin/bash"},
    )
    assert agent.stdout is not None
    assert agent.stdout.readline().strip() == "ready"

    registered = {
        asyncssh.import_public_key(keys["alice"]).get_fingerprint(): GatewayUser(1, "alice"),
        asyncssh.import_public_key(keys["alice2"]).get_fingerprint(): GatewayUser(1, "alice"),
        asyncssh.import_public_key(keys["mallory"]).get_fingerprint(): GatewayUser(2, "mallory"),
    }
    # alice owns notebook-1; mallory "owns" notebook-2, which points at alice's agent (a resolver gone wrong):
    # the agent must still refuse her key.
    notebooks = {("alice", "notebook-1"), ("mallory", "notebook-2")}

    async def authenticate(key: asyncssh.SSHKey) -> GatewayUser | None:
        return registered.get(key.get_fingerprint())

    async def resolve(user: GatewayUser, host: str, port: int) -> tuple[str, int] | None:
        return (HOST, agent_port) if (user.username, host) in notebooks and port == 22 else None

    activity: list[str] = []
    loop = _LoopThread()
    gateway = SshGateway(
        host_key_path=root / "home" / "ssh" / "gateway_host_key",
        authenticate=authenticate,
        resolve=resolve,
        on_activity=activity.append,
        activity_every_s=0.0,
    )
    loop.run(gateway.start(HOST, 0))
    (root / "known_hosts").write_text(
        f"[{HOST}]:{gateway.port} {gateway.host_public_key}\nnotebook-1 {agent_public}\nnotebook-2 {agent_public}\n"
    )
    try:
        yield Env(root, workdir, activity_file, authorized, agent_port, gateway, keys, activity)
    finally:
        loop.run(gateway.close())
        loop.stop()
        agent.terminate()
        agent.wait(timeout=10)


def test_host_key_is_private_and_kept(env: Env) -> None:
    path = env.gateway.host_key_path
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    again = SshGateway(host_key_path=path, authenticate=None, resolve=None)  # type: ignore[arg-type]
    assert again.host_public_key == env.gateway.host_public_key
    assert env.gateway.host_public_key.startswith("ssh-ed25519 ")


def test_command_runs_in_the_workdir_with_the_notebook_environment(env: Env) -> None:
    done = env.ssh("notebook-1", "pwd; echo $FOO; echo to-stderr >&2; exit 3")
    assert done.returncode == 3, done.stderr
    assert done.stdout.splitlines() == [str(env.workdir), "from-the-notebook"]
    assert "to-stderr" in done.stderr
    assert "to-stderr" not in done.stdout  # without a pty stderr stays separate


def test_client_environment_and_stdin_reach_the_command(env: Env) -> None:
    done = env.ssh("-o", "SetEnv=AICENTER_PROBE=42", "notebook-1", "echo $AICENTER_PROBE; wc -c", stdin="12345")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["42", "5"]  # the client's EOF ended wc's input


def test_a_shell_without_a_pty_reads_its_stdin(env: Env) -> None:
    done = env.ssh("-T", "notebook-1", stdin="cd /; pwd\necho $FOO\nexit 6\n")
    assert done.returncode == 6, done.stderr
    assert done.stdout.split() == ["/", "from-the-notebook"]
    assert done.stderr == ""  # no "no job control" noise: the shell is not forced interactive


def test_interactive_shell_with_a_pty(env: Env) -> None:
    done = env.ssh("-tt", "notebook-1", stdin="tty\necho pty-$((6*7))\nexit 5\n")
    assert done.returncode == 5, done.stderr
    assert "pty-42" in done.stdout
    assert "/dev/pts/" in done.stdout


def test_window_changes_reach_the_pty(env: Env) -> None:
    async def sizes() -> str:
        async with asyncssh.connect(
            HOST,
            env.agent_port,
            username="alice",
            client_keys=[str(env.root / "alice")],
            known_hosts=None,
            agent_path=None,
        ) as conn:
            process = await conn.create_process(
                "stty size; read line; stty size", term_type="xterm", term_size=(100, 30)
            )
            assert (await process.stdout.readline()).strip() == "30 100"
            process.change_terminal_size(120, 40)
            process.stdin.write("go\n")
            result = await process.stdout.read()
            await process.wait()
            return str(result)

    # known_hosts=None: this test talks to the agent directly; the host keys are checked by every other test.
    assert asyncio.run(sizes()).split()[-2:] == ["40", "120"]


def test_sftp_put_and_get(env: Env) -> None:
    local = env.root / "upload.bin"
    local.write_bytes(os.urandom(300_000))
    back = env.root / "download.bin"
    batch = f"put {local} uploaded.bin\nget uploaded.bin {back}\nls\n"
    done = subprocess.run(
        ["sftp", "-F", str(env.config("alice")), "-b", "-", "notebook-1"],
        input=batch,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    assert (env.workdir / "uploaded.bin").read_bytes() == local.read_bytes()  # relative paths start in the workdir
    assert back.read_bytes() == local.read_bytes()
    # OpenSSH's scp speaks SFTP (since 9.0), so it works through the same subsystem.
    copied = subprocess.run(
        ["scp", "-F", str(env.config("alice")), str(local), "notebook-1:scp-copy.bin"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert copied.returncode == 0, copied.stderr
    assert (env.workdir / "scp-copy.bin").read_bytes() == local.read_bytes()


def test_local_forwarding_to_the_notebooks_loopback(env: Env) -> None:
    (env.workdir / "hello.txt").write_text("served from the notebook")
    http_port = _free_port("127.0.0.1")
    server = subprocess.Popen(
        [sys.executable, "-m", "http.server", str(http_port), "--bind", "127.0.0.1"],
        cwd=env.workdir,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    local_port = _free_port(HOST)
    env.activity.clear()
    env.activity_file.unlink(missing_ok=True)
    tunnel = subprocess.Popen(
        [
            "ssh",
            "-F",
            str(env.config("alice")),
            "-N",
            "-o",
            "ExitOnForwardFailure=yes",
            "-L",
            f"{HOST}:{local_port}:127.0.0.1:{http_port}",
            "notebook-1",
        ],
        stderr=subprocess.PIPE,
    )
    try:
        body = _get_when_up(f"http://{HOST}:{local_port}/hello.txt")
        assert body == b"served from the notebook"
    finally:
        tunnel.terminate()
        tunnel.wait(timeout=10)
        server.terminate()
        server.wait(timeout=10)
    assert "notebook-1" in env.activity  # the gateway saw the client's bytes
    assert float(env.activity_file.read_text()) == pytest.approx(time.time(), abs=60)  # and so did the agent


def _get_when_up(url: str, timeout_s: float = 20.0) -> bytes:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:  # noqa: S310 - a local test URL
                data: bytes = response.read()
                return data
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def test_an_unregistered_key_is_refused_at_the_gateway(env: Env) -> None:
    done = env.ssh("notebook-1", "true", who="stranger")
    assert done.returncode == 255
    assert "Permission denied (publickey)" in done.stderr


def test_a_notebook_resolve_refuses_is_prohibited(env: Env) -> None:
    for target in ("notebook-2", "notebook-9"):  # mallory's, and nobody's
        done = env.ssh(target, "true")
        assert done.returncode == 255
        assert "administratively prohibited" in done.stderr, done.stderr


def test_the_agent_refuses_keys_not_in_its_file(env: Env) -> None:
    # mallory passes the gateway, which forwards her to notebook-2 (here: alice's agent); the agent says no.
    done = env.ssh("notebook-2", "true", who="mallory")
    assert done.returncode == 255
    assert "Permission denied (publickey)" in done.stderr, done.stderr


def test_a_key_added_while_running_is_accepted(env: Env) -> None:
    assert env.ssh("notebook-1", "true", who="alice2").returncode == 255
    write_authorized_keys(env.authorized, [env.keys["alice"], env.keys["alice2"]])
    done = env.ssh("notebook-1", "echo in", who="alice2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "in"


def test_the_agent_forwards_only_to_loopback(env: Env) -> None:
    done = env.ssh("-W", "10.255.255.1:80", "notebook-1")
    assert done.returncode == 255
    assert "administratively prohibited" in done.stderr, done.stderr
    assert "only the notebook's own localhost" in done.stderr


def test_remote_forwarding_is_refused(env: Env) -> None:
    done = env.ssh("-N", "-o", "ExitOnForwardFailure=yes", "-R", "0:127.0.0.1:9", "notebook-1")
    assert done.returncode == 255
    assert "remote port forwarding failed" in done.stderr.lower(), done.stderr


def test_a_connection_may_try_only_a_few_keys(env: Env) -> None:
    """Each key a client offers costs a lookup: past MAX_KEYS_PER_CONNECTION, even a registered key is refused."""
    strangers = [asyncssh.generate_private_key("ssh-ed25519") for _ in range(MAX_KEYS_PER_CONNECTION)]
    alice = asyncssh.read_private_key(str(env.root / "alice"))

    async def sign_in(keys: list[asyncssh.SSHKey]) -> bool:
        try:
            async with asyncssh.connect(
                HOST, env.gateway.port, username="alice", client_keys=keys, known_hosts=None, agent_path=None
            ):
                return True
        except asyncssh.PermissionDenied:
            return False

    assert asyncio.run(sign_in([*strangers[:3], alice])) is True
    assert asyncio.run(sign_in([*strangers, alice])) is False


def test_the_gateway_has_no_shell(env: Env) -> None:
    done = env.ssh(GATEWAY_ALIAS)
    assert done.returncode == 1
    assert GATEWAY_HINT.strip() in done.stderr
