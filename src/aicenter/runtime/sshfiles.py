"""The files a notebook's SSH agent reads, written by the server before it launches the notebook.

- the host key: ed25519, OpenSSH private format, 0600, generated once per notebook and kept, so that a client's
  known_hosts entry stays valid across restarts;
- authorized_keys: the owner's registered public keys, one per line, rewritten atomically whenever the owner
  adds or deletes a key (the agent re-reads it when its mtime changes).

Mount the directory that holds authorized_keys into the sandbox, not the file: the file is replaced by a rename,
and a bind mount of a single file keeps showing the old inode.

Stdlib and asyncssh only: the agent imports this inside the sandbox, where no server module is wanted.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import asyncssh

__all__ = ["public_host_key", "write_authorized_keys", "write_host_key"]


def write_host_key(path: Path, *, owner: tuple[int, int] | None = None) -> str:
    """Generate an ed25519 host key at ``path`` (0600) unless one is there; return its public line.

    ``owner`` (uid, gid): who the file belongs to, for an agent that runs under the workspace's uid (a server
    running as root passes it; the agent must be able to read its key). Applied to an existing key too.

    The key is written to a temporary name and linked into place, so two concurrent callers never leave a
    half-written key, and the first one's key wins.
    """
    path = Path(path)
    if not path.exists():
        key = asyncssh.generate_private_key("ssh-ed25519")
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(key.export_private_key("openssh"))
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
    if owner is not None:
        os.chown(path, *owner)
    return public_host_key(path)


def public_host_key(path: Path) -> str:
    """The public half of a host key file as one OpenSSH line (``ssh-ed25519 AAAA...``), for known_hosts."""
    key = asyncssh.read_private_key(str(path))
    return bytes(key.export_public_key("openssh")).decode().split("\n", 1)[0].strip()


def write_authorized_keys(path: Path, keys: list[str]) -> None:
    """Write ``keys`` (OpenSSH public key lines) to ``path`` atomically, mode 0644."""
    path = Path(path)
    lines = [k.strip() for k in keys if k.strip() and "\n" not in k.strip()]
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write("".join(f"{line}\n" for line in lines))
        os.chmod(tmp, 0o644)  # the umask may have narrowed it; the agent may run under another uid
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
