"""The SSH gateway: the one SSH port of the platform, a ProxyJump host in front of the notebooks' agents.

A client runs ``ssh -J gateway notebook-42``: OpenSSH authenticates to the gateway with the user's key, then asks
it for a direct-tcpip channel to ``notebook-42:22`` and speaks SSH to the notebook's in-sandbox agent
(runtime/notebook_ssh.py) through it, end to end: the gateway never sees the inner session's keys or data.

What the gateway allows:

- public-key authentication only, by a key some user registered (``authenticate``, one lookup per connection);
- direct-tcpip channels to the targets ``resolve`` maps for that user (their own running notebooks), to the
  notebook's agent address; anything else is refused as "administratively prohibited";
- nothing else: no shell (a session gets a one-line hint and exit status 1), no remote, agent or X11 forwarding.

The gateway has no database access per byte: ``authenticate`` and ``resolve`` run once per connection and per
channel, and ``on_activity`` (throttled per target) tells the platform that a notebook is in use.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import asyncssh

from aicenter.runtime.notebook_ssh import open_forward
from aicenter.runtime.sshfiles import public_host_key, write_host_key

__all__ = ["GATEWAY_HINT", "MAX_KEYS_PER_CONNECTION", "GatewayUser", "SshGateway", "gateway_host_key_path"]

log = logging.getLogger(__name__)

GATEWAY_HINT = (
    "this is the aicenter SSH gateway; connect to a notebook with ProxyJump: aicenter notebook ssh-config NAME\n"
)
ACTIVITY_EVERY_S = 10.0
# Distinct keys one connection may try: each costs a lookup. sshd's MaxAuthTries is 6; an agent holding many
# keys offers them all, so a little more room.
MAX_KEYS_PER_CONNECTION = 10


@dataclass(frozen=True, slots=True)
class GatewayUser:
    """Who a connection authenticated as."""

    user_id: int
    username: str


Authenticate = Callable[[asyncssh.SSHKey], Awaitable[GatewayUser | None]]
Resolve = Callable[[GatewayUser, str, int], Awaitable[tuple[str, int] | None]]
OnActivity = Callable[[str], Any]  # may return an awaitable, which is run as a task


def gateway_host_key_path(home: Path) -> Path:
    """Where the gateway's host key lives under the server's home."""
    return Path(home) / "ssh" / "gateway_host_key"


class _Throttle:
    """Calls ``on_activity(target)`` at most every ``every_s`` seconds per target."""

    def __init__(self, on_activity: OnActivity | None, every_s: float) -> None:
        self._on_activity = on_activity
        self._every_s = every_s
        self._last: dict[str, float] = {}
        self._tasks: set[asyncio.Task[Any]] = set()

    def __call__(self, target: str) -> None:
        if self._on_activity is None:
            return
        now = time.monotonic()
        if now - self._last.get(target, float("-inf")) < self._every_s:
            return
        self._last[target] = now
        try:
            result = self._on_activity(target)
        except Exception:  # a failing hook must never cut a user's connection
            log.exception("ssh gateway: on_activity(%s) failed", target)
            return
        if inspect.isawaitable(result):
            task = asyncio.ensure_future(result)
            self._tasks.add(task)
            task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("ssh gateway: on_activity failed: %r", task.exception())


class _GatewayConnection(asyncssh.SSHServer):
    """One client connection: who it is (after auth), and what it may open."""

    def __init__(self, gateway: SshGateway) -> None:
        self._gateway = gateway
        # Key fingerprint -> owner, looked up once per connection (a client offers a key, then signs with it).
        self._seen: dict[str, GatewayUser | None] = {}
        self._candidate: GatewayUser | None = None
        self.user: GatewayUser | None = None

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        fingerprint = key.get_fingerprint("sha256")
        if fingerprint not in self._seen and len(self._seen) >= MAX_KEYS_PER_CONNECTION:
            self._candidate = None
            return False
        if fingerprint not in self._seen:
            try:
                self._seen[fingerprint] = await self._gateway.authenticate(key)
            except Exception:
                log.exception("ssh gateway: authenticate failed")
                self._seen[fingerprint] = None
        # asyncssh validates the key of every attempt, the signed one last: the owner of the key validated last
        # before auth_completed is the one whose signature was verified.
        self._candidate = self._seen[fingerprint]
        return self._candidate is not None

    def auth_completed(self) -> None:
        self.user = self._candidate
        if self.user is not None:
            log.info("ssh gateway: %s signed in", self.user.username)

    def session_requested(self) -> Callable[..., Awaitable[None]]:
        return _hint

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Awaitable[asyncssh.SSHTCPSession[bytes]]:
        user = self.user
        if user is None:  # pragma: no cover - asyncssh opens no channel before authentication
            raise asyncssh.ChannelOpenError(asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, "not authenticated")
        return self._gateway.open_channel(user, dest_host, dest_port)


async def _hint(stdin: asyncssh.SSHReader[bytes], stdout: asyncssh.SSHWriter[bytes], stderr: Any) -> None:
    stderr.write(GATEWAY_HINT.encode())
    cast("asyncssh.SSHServerChannel[bytes]", stdout.channel).exit(1)


class SshGateway:
    """An asyncssh server that forwards each authenticated user to their own notebooks' agents only.

    Args:
        host_key_path: the ed25519 host key, generated there (0600, its directory 0700) on first start and reused.
        authenticate: the owner of a client key, or None to refuse it (called once per key per connection).
        resolve: ``(user, host, port)`` of a direct-tcpip request (``notebook-42``, 22) to the agent's address,
            or None to refuse (the client sees "administratively prohibited").
        on_activity: called with the requested host when a client sends bytes on a forwarded channel, at most
            every ``activity_every_s`` seconds per host; may be a coroutine function.
    """

    def __init__(
        self,
        *,
        host_key_path: Path,
        authenticate: Authenticate,
        resolve: Resolve,
        on_activity: OnActivity | None = None,
        activity_every_s: float = ACTIVITY_EVERY_S,
        login_timeout_s: float = 30.0,
    ) -> None:
        self.host_key_path = Path(host_key_path)
        self.authenticate = authenticate
        self.resolve = resolve
        self._activity = _Throttle(on_activity, activity_every_s)
        self._login_timeout_s = login_timeout_s
        self._server: asyncssh.SSHAcceptor | None = None
        self._host_public_key = ""

    @property
    def port(self) -> int:
        """The port the gateway listens on (once started)."""
        if self._server is None:
            raise RuntimeError("the SSH gateway is not started")
        return int(self._server.sockets[0].getsockname()[1])

    @property
    def host_public_key(self) -> str:
        """The host key's public line (``ssh-ed25519 AAAA...``), for clients' known_hosts."""
        if not self._host_public_key:
            self._host_public_key = _ensure_host_key(self.host_key_path)
        return self._host_public_key

    async def start(self, host: str = "127.0.0.1", port: int = 2222, *, reuse_port: bool = False) -> None:
        """Listen on ``host:port`` (port 0: any free port, see ``port``); ``reuse_port``: share it with the
        server's other worker processes, each running a gateway (the kernel spreads connections over them)."""
        self._host_public_key = _ensure_host_key(self.host_key_path)
        self._server = await asyncssh.create_server(
            lambda: _GatewayConnection(self),
            host,
            port,
            server_host_keys=[str(self.host_key_path)],
            encoding=None,
            password_auth=False,
            kbdint_auth=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            login_timeout=self._login_timeout_s,
            reuse_address=True,
            reuse_port=reuse_port,
        )

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    async def open_channel(self, user: GatewayUser, host: str, port: int) -> asyncssh.SSHTCPSession[bytes]:
        """The forwarding session of one direct-tcpip channel, if ``resolve`` lets ``user`` reach ``host:port``."""
        try:
            target = await self.resolve(user, host, port)
        except Exception:
            log.exception("ssh gateway: resolve(%s, %s:%s) failed", user.username, host, port)
            target = None
        if target is None:
            log.info("ssh gateway: %s refused %s:%s", user.username, host, port)
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED, f"{host}:{port} is not a running notebook of yours"
            )
        return await open_forward(target[0], target[1], lambda: self._activity(host))


def _ensure_host_key(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(OSError):  # not ours to change (a shared, pre-made directory): leave it
        os.chmod(path.parent, 0o700)
    if path.exists():
        with contextlib.suppress(OSError):
            os.chmod(path, 0o600)
        return public_host_key(path)
    return write_host_key(path)
