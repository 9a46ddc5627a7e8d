"""The SSH server inside a notebook's sandbox: shells, commands, SFTP and local forwarding to its loopback.

    python -m aicenter.runtime.notebook_ssh --listen HOST:PORT --host-key FILE --authorized-keys FILE \\
        --activity FILE --workdir DIR

It runs as the notebook's uid inside the notebook's sandbox (mount, PID and network namespaces), so whatever a
client does here it does as the notebook itself: the sandbox is the boundary, not this server. Clients reach it
through the platform's SSH gateway (ProxyJump), which has already checked who they are; this server checks again
against the owner's keys (``--authorized-keys``, re-read when the file changes, so a key added while the notebook
runs works at once). Any user name is accepted: there is one account here.

- session: an interactive shell with a pty, or a command with or without a pty; exit status, stderr (without a
  pty), window changes, signals and EOF are passed through; cwd is ``--workdir``; the environment is this
  process's own (the notebook's AICENTER_* variables) plus TERM and what the client sends.
- SFTP (asyncssh's server, rooted at ``/``, starting in ``--workdir``). OpenSSH's scp speaks SFTP too.
- local forwarding (``ssh -L``, VS Code's tunnels) to localhost only: in the sandbox's own network namespace that
  is the notebook's loopback and nothing else. Remote, agent and X11 forwarding are refused.
- activity: input from a client on any channel writes the time (epoch seconds) to ``--activity`` (at most every
  5 s, tmp + rename), which the idle culler reads.

Prints ``ready`` on stdout once listening. It keeps serving if its parent or stdout goes away: the sandbox is
stopped as a whole.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import logging
import os
import shutil
import signal
import struct
import sys
import termios
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

import asyncssh

__all__ = ["LOOPBACK", "Activity", "AuthorizedKeys", "main", "serve"]

LOOPBACK = frozenset({"localhost", "127.0.0.1", "::1", "ip6-localhost"})
ACTIVITY_EVERY_S = 5.0
# Once a pty's shell has exited, how long its last output may take to reach the client. A background job that
# keeps the pty open would otherwise hold the session forever (sshd closes it too).
PTY_DRAIN_S = 1.0
_SFTP_VERSION = 3  # what OpenSSH's sftp speaks; asyncssh's default for servers


class Activity:
    """Writes the time of the latest client input to a file, at most every ``every_s`` seconds."""

    def __init__(self, path: Path | None, every_s: float = ACTIVITY_EVERY_S) -> None:
        self.path = path
        self.every_s = every_s
        self._last = float("-inf")

    def touch(self) -> None:
        if self.path is None:
            return
        now = time.monotonic()
        if now - self._last < self.every_s:
            return
        self._last = now
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        # Never let the activity file break a session: a full disk loses a heartbeat, not the user's shell.
        with contextlib.suppress(OSError):
            tmp.write_text(f"{time.time():.3f}\n", encoding="ascii")
            os.replace(tmp, self.path)


class AuthorizedKeys:
    """The public keys in an authorized_keys file, re-read whenever the file is replaced or changes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int, int] | None = None
        self._keys: frozenset[bytes] = frozenset()

    def _reload(self) -> None:
        try:
            st = self.path.stat()
        except OSError:
            self._stamp, self._keys = None, frozenset()
            return
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if stamp == self._stamp:
            return
        keys: set[bytes] = set()
        with contextlib.suppress(OSError):
            for line in self.path.read_text(encoding="utf-8", errors="replace").splitlines():
                parts = line.split()
                if len(parts) < 2 or line.lstrip().startswith("#"):
                    continue
                with contextlib.suppress(asyncssh.KeyImportError, ValueError):
                    keys.add(bytes(asyncssh.import_public_key(f"{parts[0]} {parts[1]}").public_data))
        self._stamp, self._keys = stamp, frozenset(keys)

    def allows(self, key: asyncssh.SSHKey) -> bool:
        self._reload()
        return bytes(key.public_data) in self._keys


class _TargetForwarder(asyncssh.SSHForwarder):
    """The TCP side of a forwarded connection, which holds what the target sends until the channel is open.

    The target may speak first (an SSH server sends its banner on accept). asyncssh's own forwarder keeps bytes
    that arrive before it has a peer in a buffer it never flushes, and drops those that arrive before the peer (the
    channel) is connected; the client then reads the key exchange without the banner ("banner line contains
    invalid characters", seen under load through the gateway).
    """

    def __init__(self) -> None:
        super().__init__()
        self._early: list[bytes] = []
        self._early_eof = False
        self._open = False

    def data_received(self, data: bytes, datatype: int | None = None) -> None:
        if self._open:
            super().data_received(data, datatype)
        else:
            self._early.append(data)

    def eof_received(self) -> bool:
        if self._open:
            return super().eof_received()
        self._early_eof = True
        return True  # half-open until the channel is there to pass the EOF on

    def channel_open(self) -> None:
        self._open = True
        early, self._early = b"".join(self._early), []
        if early:
            super().data_received(early)
        if self._early_eof:
            super().eof_received()


class _ActivityForwarder(asyncssh.SSHForwarder):
    """The channel side of a forwarded TCP connection: notes client input, then forwards as usual."""

    def __init__(self, peer: _TargetForwarder, on_input: Callable[[], None]) -> None:
        super().__init__(peer)
        self._target = peer
        self._on_input = on_input

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._target.channel_open()

    def data_received(self, data: bytes, datatype: int | None = None) -> None:
        self._on_input()
        super().data_received(data, datatype)


async def open_forward(host: str, port: int, on_input: Callable[[], None]) -> asyncssh.SSHTCPSession[bytes]:
    """Connect to ``host:port`` and return the session that forwards a direct-tcpip channel to it."""
    loop = asyncio.get_running_loop()
    try:
        _, peer = await loop.create_connection(_TargetForwarder, host, port)
    except OSError as exc:
        raise asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, f"{host}:{port}: {exc.strerror}") from None
    # A forwarder is what asyncssh's own forward_connection hands back as the channel's session.
    return cast("asyncssh.SSHTCPSession[bytes]", _ActivityForwarder(peer, on_input))


class _Session(asyncssh.SSHServerProcess[bytes]):
    """A session channel (shell, command or SFTP) that notes client input before the usual handling."""

    def __init__(self, handler: Callable[[Any], Awaitable[None]], sftp: Any, activity: Activity) -> None:
        super().__init__(handler, sftp, _SFTP_VERSION, False)
        self._activity = activity

    def data_received(self, data: bytes, datatype: int | None) -> None:
        self._activity.touch()
        super().data_received(data, datatype)


class _SftpServer(asyncssh.SFTPServer):
    """asyncssh's SFTP server, rooted at ``/`` (the sandbox is the boundary), that ends with exit status 0.

    asyncssh closes an SFTP channel without an exit status; OpenSSH's ssh then exits 255, and scp (which speaks
    SFTP since OpenSSH 9.0) reports a failed copy although every byte arrived. sshd sends 0 when sftp-server exits.
    """

    def exit(self) -> None:
        with contextlib.suppress(Exception):  # the channel may be gone already (the client dropped)
            cast("asyncssh.SSHServerChannel[bytes]", self.channel).exit(0)


def _shell() -> str:
    shell = os.environ.get("SHELL", "")
    if shell and os.path.isabs(shell) and os.access(shell, os.X_OK):
        return shell
    return shutil.which("bash", path="/bin:/usr/bin") or "/bin/sh"


def _text(value: str | bytes) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _controlling_tty() -> None:
    """In the child, before exec: a new session whose controlling terminal is the pty on stdin (job control)."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _exit_status(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode  # killed by signal N: 128+N, as shells report it


class _AgentServer(asyncssh.SSHServer):
    def __init__(self, agent: Agent) -> None:
        self._agent = agent

    def begin_auth(self, username: str) -> bool:
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self._agent.keys.allows(key)

    def session_requested(self) -> _Session:
        return _Session(self._agent.run_process, _SftpServer, self._agent.activity)

    def connection_requested(
        self, dest_host: str, dest_port: int, orig_host: str, orig_port: int
    ) -> Awaitable[asyncssh.SSHTCPSession[bytes]]:
        if dest_host.lower().strip("[]") not in LOOPBACK:
            raise asyncssh.ChannelOpenError(
                asyncssh.OPEN_ADMINISTRATIVELY_PROHIBITED,
                f"forwarding to {dest_host} refused: only the notebook's own localhost is reachable",
            )
        return open_forward(dest_host.strip("[]"), dest_port, self._agent.activity.touch)


class Agent:
    """The server: its settings, keys and activity file, and what runs a session's process."""

    def __init__(
        self,
        *,
        host_key: Path,
        authorized_keys: Path,
        activity: Path | None,
        workdir: Path,
        activity_every_s: float = ACTIVITY_EVERY_S,
    ) -> None:
        self.host_key = asyncssh.read_private_key(str(host_key))
        self.keys = AuthorizedKeys(authorized_keys)
        self.activity = Activity(activity, activity_every_s)
        self.workdir = workdir
        self._server: asyncssh.SSHAcceptor | None = None

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncssh.create_server(
            lambda: _AgentServer(self),
            host,
            port,
            server_host_keys=[self.host_key],
            encoding=None,
            password_auth=False,
            kbdint_auth=False,
            agent_forwarding=False,
            x11_forwarding=False,
            allow_scp=False,
            reuse_address=True,
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    def environment(self, process: asyncssh.SSHServerProcess[bytes]) -> dict[str, str]:
        env = dict(os.environ)
        for name, value in process.env.items():
            env[_text(name)] = _text(value)
        term = process.term_type
        if term:
            env["TERM"] = _text(term)
        env.setdefault("SHELL", _shell())
        return env

    async def run_process(self, process: asyncssh.SSHServerProcess[bytes]) -> None:
        """Run the client's command (or an interactive shell) with a pty if one was asked for, else with pipes."""
        shell = _shell()
        command = process.command
        if command is not None:
            argv = [shell, "-c", _text(command)]
        elif process.term_type:
            # Interactive (reads ~/.bashrc), not a login shell: /etc/profile resets PATH for non-root users
            # on Debian-like images, which would hide the notebook's own environment (its venv, conda).
            argv = [shell, "-i"]
        else:
            argv = [shell]  # `ssh -T host < script`: the shell reads commands from stdin, as sshd's does
        env = self.environment(process)
        try:
            if process.term_type:
                status = await self._run_pty(process, argv, env)
            else:
                status = await self._run_pipes(process, argv, env)
        except OSError as exc:
            process.stderr.write(f"aicenter notebook ssh: cannot start {argv[0]}: {exc}\r\n".encode())
            status = 127
        process.exit(status)
        # Runs the redirections' clean-ups (their queues' final flush), which only wait_closed awaits.
        await process.wait_closed()

    async def _run_pipes(self, process: asyncssh.SSHServerProcess[bytes], argv: list[str], env: dict[str, str]) -> int:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.workdir,
            env=env,
            start_new_session=True,
        )
        process.set_redirect_pid(proc.pid)  # signals from the client go to the command
        # send_eof=False: the channel's EOF must wait for both streams (stderr after an EOF would be lost), and
        # process.exit() sends it.
        await process.redirect(stdin=proc.stdin, stdout=proc.stdout, stderr=proc.stderr, send_eof=False)
        # All output first, then the status: the client must see every byte before the exit status.
        await process.stdout.drain()
        await process.stderr.drain()
        return _exit_status(await proc.wait())

    async def _run_pty(self, process: asyncssh.SSHServerProcess[bytes], argv: list[str], env: dict[str, str]) -> int:
        master, slave = os.openpty()
        # The client's size before the shell starts (asyncssh sets it on redirect, after the spawn: a command that
        # asks at once, like `stty size`, would read 0 0).
        width, height, pixwidth, pixheight = process.term_size
        with contextlib.suppress(OSError):
            fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", height, width, pixwidth, pixheight))
        try:
            proc = await asyncio.create_subprocess_exec(
                *argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                cwd=self.workdir,
                env=env,
                preexec_fn=_controlling_tty,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        process.set_redirect_pid(proc.pid)
        # Separate descriptors for the two directions: asyncssh closes each when its side ends. A tty target
        # gets the client's window size at once and on every change (asyncssh's redirect handles ttys).
        await process.redirect(stdin=os.dup(master), stdout=master, send_eof=False)
        returncode = await proc.wait()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.stdout.drain(), PTY_DRAIN_S)
        return _exit_status(returncode)


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit():
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]") or "127.0.0.1", int(port)


async def serve(args: argparse.Namespace) -> None:
    os.chdir(args.workdir)  # SFTP's relative paths (its starting directory) are the process's cwd
    agent = Agent(
        host_key=args.host_key,
        authorized_keys=args.authorized_keys,
        activity=args.activity,
        workdir=args.workdir,
        activity_every_s=args.activity_every,
    )
    host, port = args.listen
    await agent.start(host, port)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    # A handler rather than SIG_IGN: an ignored signal stays ignored in the shells we start.
    loop.add_signal_handler(signal.SIGHUP, lambda: None)
    with contextlib.suppress(OSError, ValueError):
        print("ready", flush=True)
    await stop.wait()
    await agent.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m aicenter.runtime.notebook_ssh", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to listen on (port 0: any)")
    parser.add_argument("--host-key", type=Path, required=True, help="ed25519 host key, OpenSSH private format")
    parser.add_argument("--authorized-keys", type=Path, required=True, help="the owner's public keys")
    parser.add_argument("--activity", type=Path, default=None, help="file to write the last input time to")
    parser.add_argument(
        "--activity-every", type=float, default=ACTIVITY_EVERY_S, help="seconds between activity writes"
    )
    parser.add_argument("--workdir", type=Path, required=True, help="where shells and SFTP start")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr, format="notebook-ssh %(levelname)s %(message)s")
    asyncssh.set_log_level(logging.WARNING)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
