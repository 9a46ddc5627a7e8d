"""The OpenSSH client configuration that reaches a notebook through the gateway (``aicenter notebook ssh-config``).

Pure text: the server or the CLI fills in the gateway's address, the user and both host keys. The output is
exercised with the system ``ssh``, ``sftp`` and ``scp`` in tests/integration/gateway/test_ssh_gateway.py.
"""

from __future__ import annotations

__all__ = ["GATEWAY_ALIAS", "KNOWN_HOSTS_FILE", "known_hosts_lines", "ssh_config"]

GATEWAY_ALIAS = "aicenter-gateway"
KNOWN_HOSTS_FILE = "~/.aicenter/ssh/known_hosts"
"""Where ``aicenter notebook ssh-config`` keeps the host keys it trusts, and what the config it prints names."""


def _host_pattern(host: str, port: int) -> str:
    """How known_hosts names ``host:port``: bare on port 22, else ``[host]:port``."""
    return host if port == 22 else f"[{host}]:{port}"


def ssh_config(
    *,
    alias: str,
    gateway_host: str,
    gateway_port: int,
    user: str,
    identity_file: str | None = None,
    known_hosts_file: str | None = None,
    gateway_alias: str = GATEWAY_ALIAS,
) -> str:
    """``Host`` blocks for ``~/.ssh/config``: the gateway, and the notebook ``alias`` (e.g. ``notebook-42``) as a
    ProxyJump through it.

    ``HostKeyAlias`` pins the notebook's host key under its alias whatever the target is called; the gateway
    resolves the alias to the notebook's agent. ``identity_file`` adds ``IdentityFile`` + ``IdentitiesOnly``
    to both blocks (OpenSSH passes no ``-i`` option to a jump host, only the config). ``known_hosts_file`` adds
    ``UserKnownHostsFile`` to both, for the same reason (``KNOWN_HOSTS_FILE`` is where the CLI writes them).
    """
    identity = f"  IdentityFile {identity_file}\n  IdentitiesOnly yes\n" if identity_file else ""
    if known_hosts_file:
        identity += f"  UserKnownHostsFile {known_hosts_file}\n"
    return (
        f"Host {gateway_alias}\n"
        f"  HostName {gateway_host}\n"
        f"  Port {gateway_port}\n"
        f"  User {user}\n"
        f"{identity}"
        f"\n"
        f"Host {alias}\n"
        f"  ProxyJump {gateway_alias}\n"
        f"  User {user}\n"
        f"  HostKeyAlias {alias}\n"
        f"{identity}"
    )


def known_hosts_lines(
    *, gateway_host: str, gateway_port: int, gateway_key: str, alias: str, notebook_key: str
) -> list[str]:
    """The two ``known_hosts`` lines: the gateway's key under its address, the notebook's under its alias.

    Keys are OpenSSH public key lines (``ssh-ed25519 AAAA...``); a trailing comment is dropped.
    """

    def bare(key: str) -> str:
        return " ".join(key.split()[:2])

    return [f"{_host_pattern(gateway_host, gateway_port)} {bare(gateway_key)}", f"{alias} {bare(notebook_key)}"]
