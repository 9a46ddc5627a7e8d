"""SSH into notebooks: the known_hosts file the CLI keeps, the ``ssh`` command line, the ``~/.ssh/config`` block.

Every connection goes through the platform's SSH gateway (a jump host) to the notebook's alias
(``notebook-<id>``). The server gives the host keys of both, and the CLI writes them to its own known_hosts file,
``$AICENTER_HOME/ssh/known_hosts``, so that the first connection is verified rather than trusted on sight.

Why a ``ProxyCommand`` rather than ``-J``: OpenSSH runs the jump hop as a second ``ssh`` that gets only ``-F``,
``-v`` and the host, never the ``-o`` options of the command line (ssh.c builds it that way), so with ``-J`` the
gateway would be checked against ``~/.ssh/known_hosts`` and, being absent there, asked about interactively. A
ProxyCommand is the same jump (``ssh -W``) with the options spelled out for both hops.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from aicenter.cli.config import home_dir

if TYPE_CHECKING:
    from aicenter.client import NotebookSsh

__all__ = ["known_hosts_path", "ssh_argv", "ssh_config_block", "write_known_hosts"]

_HOST_LINE = re.compile(r"^(\s*)Host\s+\S", re.IGNORECASE)
_KNOWN_HOSTS_OPTION = re.compile(r"^(\s*)UserKnownHostsFile\b.*$", re.IGNORECASE)


def known_hosts_path() -> Path:
    """``$AICENTER_HOME/ssh/known_hosts`` (default ``~/.aicenter/ssh/known_hosts``)."""
    return home_dir() / "ssh" / "known_hosts"


def _hosts_of(line: str) -> str | None:
    """The host field of a known_hosts line (after a ``@cert-authority``/``@revoked`` marker); None for a comment."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    if fields[0].startswith("@"):
        return f"{fields[0]} {fields[1]}" if len(fields) > 1 else None
    return fields[0]


def write_known_hosts(lines: Iterable[str], path: Path | None = None) -> Path:
    """Merge ``lines`` into the CLI's known_hosts file and return its path.

    Lines for the hosts given replace the file's lines for those hosts (a notebook's key may change between
    starts); the other notebooks' lines stay, so ``ssh-config`` of one notebook does not break another's. The
    directory is 0700 and the file 0600, written atomically (ssh refuses neither, but they are the user's).
    """
    path = path or known_hosts_path()
    new = [line.strip() for line in lines if line.strip()]
    replaced = {h for h in map(_hosts_of, new) if h is not None}
    path.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    try:
        old = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        old = []
    kept = [line for line in old if line.strip() and _hosts_of(line) not in replaced]
    text = "".join(f"{line}\n" for line in [*kept, *new])
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o600)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def ssh_argv(ssh: str, info: NotebookSsh, known_hosts: Path, extra: Sequence[str] = ()) -> list[str]:
    """The ``ssh`` command line that reaches the notebook through the gateway, both hops checked strictly
    against ``known_hosts``; ``extra`` (options, then a remote command) goes last, as ssh reads it. An ``-i KEY``
    among ``extra`` is given to the gateway hop too: the gateway knows the user by the same key."""
    options, command = _split(extra)
    checked = ["-o", f"UserKnownHostsFile={known_hosts}", "-o", "StrictHostKeyChecking=yes"]
    identities = [arg for i, arg in enumerate(options) if arg == "-i" or (i > 0 and options[i - 1] == "-i")]
    identities += [arg for arg in options if arg.startswith("-i") and len(arg) > 2]
    jump = [ssh, *checked, *identities, "-p", str(info.gateway_port), "-l", info.user, "-W", "[%h]:%p"]
    # ssh expands %h and %p in a ProxyCommand and runs it with the user's shell: shlex.join quotes the paths and
    # "[%h]:%p" (a shell would glob the brackets).
    proxy = shlex.join([*jump, info.gateway_host])
    return [ssh, *checked, "-o", f"ProxyCommand={proxy}", *options, f"{info.user}@{info.host_alias}", *command]


_TAKES_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")  # ssh's options that take an argument (ssh(1) SYNOPSIS)


def _split(extra: Sequence[str]) -> tuple[list[str], list[str]]:
    """``extra`` as (options, remote command): ssh reads options before the destination and the command after
    it, so ``-L 8888:localhost:8888 nvidia-smi`` becomes ``-L 8888:localhost:8888 <host> nvidia-smi``."""
    options: list[str] = []
    rest = list(extra)
    while rest and rest[0].startswith("-") and rest[0] != "--":
        arg = rest.pop(0)
        options.append(arg)
        if len(arg) == 2 and arg[1] in _TAKES_VALUE and rest:
            options.append(rest.pop(0))
    if rest and rest[0] == "--":
        rest.pop(0)
    return options, rest


def ssh_config_block(config: str, known_hosts: Path, gateway_host: str | None = None) -> str:
    """The server's ``~/.ssh/config`` block, pointing at the CLI's known_hosts file.

    An existing ``UserKnownHostsFile`` is set to it, and a ``Host`` block without one gets it (the server cannot
    know where this CLI keeps its files, ``$AICENTER_HOME``). A ``ProxyJump`` hop is a second ssh that matches
    the gateway's own ``Host`` entry, not the notebook's: unless the block has one for ``gateway_host``, a
    ``Host <gateway_host>`` block with the file is added, else the gateway would be checked against
    ``~/.ssh/known_hosts`` (and asked about, which VS Code and PyCharm cannot answer).
    """
    value = str(known_hosts)
    quoted = f'"{value}"' if " " in value else value
    out: list[str] = []
    lines = config.rstrip("\n").splitlines()
    blocks_with_option = _blocks_with_option(lines)
    block = -1
    names_gateway = False
    for line in lines:
        match = _KNOWN_HOSTS_OPTION.match(line)
        if match:
            out.append(f"{match.group(1)}UserKnownHostsFile {quoted}")
            continue
        out.append(line)
        host = _HOST_LINE.match(line)
        if host:
            block += 1
            names_gateway = names_gateway or gateway_host in line.split()[1:]
            if block not in blocks_with_option:
                indent = host.group(1) + "    "
                out.append(f"{indent}UserKnownHostsFile {quoted}")
    if gateway_host and not names_gateway:
        out += [f"Host {gateway_host}", f"    UserKnownHostsFile {quoted}"]
    return "\n".join(out) + "\n"


def _blocks_with_option(lines: Sequence[str]) -> set[int]:
    """Indexes of the ``Host`` blocks that set ``UserKnownHostsFile`` themselves."""
    found: set[int] = set()
    block = -1
    for line in lines:
        if _HOST_LINE.match(line):
            block += 1
        elif _KNOWN_HOSTS_OPTION.match(line) and block >= 0:
            found.add(block)
    return found
