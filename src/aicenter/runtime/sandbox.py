"""A replica's sandbox: the ``bwrap`` (bubblewrap) command line that shows a job only what it needs.

bubblewrap is the sandbox Flatpak runs every desktop application in: a small setuid-free C program, packaged
by every distribution (Debian ``bubblewrap``), that builds namespaces and mounts from its command line and then
execs the command. Nothing here runs a daemon or keeps state: ``bwrap_argv`` is pure, ``probe`` tries bwrap once.

What a sandboxed replica sees (``SandboxSpec``):

- a fresh root (a tmpfs) with the system read-only (``/usr``, ``/bin``, ``/lib*``, ...; symlinks kept as
  symlinks on merged-/usr systems) and a chosen few files of ``/etc`` (name resolution, users, TLS roots, the
  dynamic linker's cache, the time zone): not the whole ``/etc``, where a server's config may live;
- its Python (the interpreter's prefix, a venv image) and its code and inputs read-only; its output and
  checkpoint dirs, and its metrics file, read-write; each at the same path as on the host, so the
  ``AICENTER_*_DIR`` variables need no translation. Nothing else of the host: not ``$AICENTER_HOME``, the
  database, the store, other jobs' directories;
- a private ``/tmp`` and ``/dev/shm`` (tmpfs, 1777: PyTorch's data loaders share tensors through ``/dev/shm``),
  a minimal ``/dev`` (null, zero, random, tty, pts) plus the accelerator device nodes it was given, by path;
- its own PID namespace with a new ``/proc`` (other replicas and the server are invisible and cannot be
  signalled), its own IPC and UTS namespaces and, where the kernel has it, cgroup namespace;
- as root, its job's network namespace (``netns``: ``nsenter --net=PATH`` runs bwrap inside it, see
  ``aicenter.runtime.netns``): loopback shared with the job's other replicas on the node, for DDP/MPI
  rendezvous, and nothing of the host; the platform's API is reached through the launcher's relay
  (``api_upstream``, ``aicenter.runtime.relay``) at ``AICENTER_API_URL``, the job's only door to the platform.
  Without a namespace (an unprivileged server, ``AICENTER_SANDBOX_NETWORK=host``) it shares the host's network;
- no capabilities and ``no_new_privs`` (bwrap always sets it: setuid binaries inside cannot raise privileges).

Identity. A server running as root (production, CI) gives each workspace its own Unix uid/gid
(``uid_base + workspace id``): bwrap runs as root to build the mounts (root can open the bind sources under a
0700 home), then ``setpriv`` switches to the job's uid, clears the supplementary groups and empties the
capability bounding set before it execs the command; the job's files are owned by that uid and the server,
root, reads them afterwards. bwrap's own ``--uid`` would only rename root inside a user namespace: the process
would still be the host's uid 0 to the kernel's permission checks. A server running as an ordinary user
builds the sandbox in an unprivileged user namespace (when the kernel allows it) and the job keeps that user's
uid, as today, with ``--cap-drop ALL``.

Not used, on purpose:

- ``--die-with-parent``: bwrap's parent is the launcher, which already outlives the server; the replica must
  keep running through a server restart and be adopted again (``aicenter.runtime.files``). The launcher kills
  what is left of the sandbox when the command exits.
- ``--new-session``: it guards against a job pushing keystrokes into a controlling terminal (TIOCSTI). The
  launcher has none (it runs in its own session, stdin ``/dev/null``, output on pipes), and keeping the
  sandbox in the launcher's process group is what lets a stop reach every process inside.
- ``--setenv``/``--clearenv``: the environment (the job token among it) reaches the command through ``execve``,
  as the launcher's ``env``; an argument list is readable by every local user in ``/proc/<pid>/cmdline``, an
  environment only by the process's owner. The launcher's environment is scrubbed already (``child_env``).

This module is imported by the launcher, so it uses the standard library only, and its records are NamedTuples
rather than dataclasses: ``dataclasses`` imports ``inspect``, ~7 ms of every sandboxed launch's start here.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import PurePosixPath
from typing import Any, NamedTuple

__all__ = [
    "ETC_FILES",
    "SYSTEM_PATHS",
    "SandboxSpec",
    "SandboxSupport",
    "bwrap_argv",
    "probe",
    "signal_sandbox",
]

# The system, read-only. On a merged-/usr system most of these are symlinks into /usr and stay symlinks.
SYSTEM_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# What of /etc a job needs: name resolution, users and groups (``id``, ``getpwuid`` in Python), TLS roots, the
# dynamic linker's configuration, the time zone, and the alternatives symlinks that /usr/bin tools point into.
ETC_FILES = (
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/passwd",
    "/etc/group",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/alternatives",
    "/etc/mime.types",
)
# The sandbox's private tmpfs mounts (S108 is about shared host temp dirs; these are the sandbox's own).
TMP = "/tmp"  # noqa: S108
SHM = "/dev/shm"  # noqa: S108
# Mount points the argv creates itself; bind destinations below them need no parent directories made.
_MOUNTED = ("/", TMP, "/proc", "/dev", SHM, "/etc")
SETPRIV = "/usr/bin/setpriv"
NSENTER = "/usr/bin/nsenter"


class SandboxSpec(NamedTuple):
    """What one replica's sandbox shows and who the command runs as (immutable, like a frozen dataclass).

    Attributes:
        read_only: Host paths bound read-only at the same path (code, inputs, the Python prefix, helpers).
        read_write: Host paths bound read-write at the same path (output, checkpoints, the metrics file).
        devices: Device nodes bound into ``/dev`` (e.g. ``/dev/nvidia0``, ``/dev/nvidiactl``).
        workdir: The command's working directory (inside the sandbox, which is the same path as outside).
        uid: The Unix uid the command runs as (only when bwrap runs as root); None keeps the caller's.
        gid: The Unix gid the command runs as, with ``uid``.
        bwrap: The bubblewrap executable.
        system: System paths bound read-only (symlinks are recreated as symlinks).
        etc: Files and directories of ``/etc`` bound read-only when they exist.
        netns: The network namespace the sandbox runs in (its file, ``/run/netns/<name>``); None keeps the
            caller's network. bwrap itself never unshares the network: the job's replicas share this one.
        api_upstream: The API's ``(host, port)`` that the launcher relays the namespace's API socket to.
        published: ``(host, port)`` pairs the launcher listens on in the node's network and relays into the
            namespace's 127.0.0.1 at the same port: a notebook's JupyterLab and SSH agent, reached by the
            platform's proxy and SSH gateway (``aicenter.runtime.replica_network``).
        publish_token: A service replica's serve token: the relays of ``published`` let a connection through
            only when its first request carries it; None for a notebook's ports (JupyterLab has its own token).
    """

    read_only: tuple[str, ...] = ()
    read_write: tuple[str, ...] = ()
    devices: tuple[str, ...] = ()
    workdir: str = "/"
    uid: int | None = None
    gid: int | None = None
    bwrap: str = "bwrap"
    system: tuple[str, ...] = SYSTEM_PATHS
    etc: tuple[str, ...] = ETC_FILES
    netns: str | None = None
    api_upstream: tuple[str, int] | None = None
    published: tuple[tuple[str, int], ...] = ()
    publish_token: str | None = None

    def to_json(self) -> dict[str, Any]:
        """A JSON object for the launcher's plan."""
        return {
            "read_only": list(self.read_only),
            "read_write": list(self.read_write),
            "devices": list(self.devices),
            "workdir": self.workdir,
            "uid": self.uid,
            "gid": self.gid,
            "bwrap": self.bwrap,
            "system": list(self.system),
            "etc": list(self.etc),
            "netns": self.netns,
            "api_upstream": None if self.api_upstream is None else list(self.api_upstream),
            "published": [list(p) for p in self.published],
            "publish_token": self.publish_token,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SandboxSpec:
        """The spec ``to_json`` wrote."""
        uid, gid = data.get("uid"), data.get("gid")
        netns, upstream = data.get("netns"), data.get("api_upstream")
        return cls(
            read_only=tuple(str(p) for p in data.get("read_only") or ()),
            read_write=tuple(str(p) for p in data.get("read_write") or ()),
            devices=tuple(str(p) for p in data.get("devices") or ()),
            workdir=str(data.get("workdir") or "/"),
            uid=None if uid is None else int(uid),
            gid=None if gid is None else int(gid),
            bwrap=str(data.get("bwrap") or "bwrap"),
            system=tuple(str(p) for p in data.get("system") or SYSTEM_PATHS),
            etc=tuple(str(p) for p in data.get("etc") or ETC_FILES),
            netns=None if netns is None else str(netns),
            api_upstream=None if not upstream else (str(upstream[0]), int(upstream[1])),
            published=tuple((str(h), int(p)) for h, p in data.get("published") or ()),
            publish_token=str(data["publish_token"]) if data.get("publish_token") else None,
        )


def _under(path: str, roots: set[str]) -> bool:
    """Whether ``path`` is one of ``roots`` or inside one of them."""
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def bwrap_argv(spec: SandboxSpec, command: list[str]) -> list[str]:
    """The argument list that runs ``command`` inside the sandbox ``spec`` describes.

    Binds are made shallowest first, so a read-write dir inside a read-only one (a metrics file in a run dir)
    lands on top. The parents of a bind that are not mounted already are made 0755 in the sandbox's root:
    bwrap would otherwise copy the host parent's mode, and a 0700 parent (a root-only home) would hide the
    bind from the job's uid.

    Args:
        spec: What to show and who to run as.
        command: The command and its arguments, e.g. ``["/bin/sh", "-c", "python train.py"]``.

    Returns:
        ``[(nsenter --net=NETNS,) bwrap, options..., "--", (setpriv ...,) *command]``; no environment values
        (see the module docstring).
    """
    # nsenter opens the namespace and execs bwrap in it (no fork: bwrap keeps the pid the launcher signals).
    argv = [] if spec.netns is None else [NSENTER, f"--net={spec.netns}"]
    argv += [spec.bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    made: set[str] = set(_MOUNTED)
    for path in spec.system:
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            argv += ["--ro-bind", path, path]
        made.add(path)
    for path in spec.etc:
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", TMP]
    argv += ["--perms", "1777", "--tmpfs", SHM]
    for device in spec.devices:
        argv += ["--dev-bind-try", device, device]
    binds = [(p, "--ro-bind") for p in spec.read_only] + [(p, "--bind") for p in spec.read_write]
    # Shallowest first; a path given twice is bound once, read-write winning (it comes last at equal depth).
    chosen: dict[str, str] = {}
    for path, flag in binds:
        key = os.path.normpath(path)
        if chosen.get(key) != "--bind":
            chosen[key] = flag
    bound: set[str] = set()
    for path in sorted(chosen, key=lambda p: (len(PurePosixPath(p).parts), p)):
        for parent in reversed(PurePosixPath(path).parents):
            name = str(parent)
            if name in made or _under(name, bound) or _under(name, set(spec.system)):
                continue
            argv += ["--perms", "0755", "--dir", name]
            made.add(name)
        argv += [chosen[path], path, path]
        bound.add(path)
    argv += ["--chdir", spec.workdir]
    if spec.uid is None:
        argv += ["--cap-drop", "ALL", "--"]
    else:
        # bwrap keeps root's capabilities for setpriv, which needs them to switch and then drops them all.
        gid = spec.uid if spec.gid is None else spec.gid
        argv += ["--", SETPRIV, f"--reuid={spec.uid}", f"--regid={gid}", "--clear-groups"]
        argv += ["--inh-caps=-all", "--bounding-set=-all", "--"]
    return argv + list(command)


class SandboxSupport(NamedTuple):
    """Whether this host can sandbox replicas, and how.

    Attributes:
        available: bwrap is installed and built a sandbox here.
        bwrap: bwrap's path, or None when it is not installed.
        as_root: The caller is root, so replicas get their own uid (through ``setpriv``).
        reason: Why not, when not available; empty otherwise.
    """

    available: bool
    bwrap: str | None
    as_root: bool
    reason: str = ""


def probe(bwrap: str = "bwrap", timeout_s: float = 10.0) -> SandboxSupport:
    """Try bwrap once: is it installed, and does a sandbox with a new PID namespace and ``/proc`` start here?

    As root bwrap needs nothing more; as another user it needs unprivileged user namespaces, which some
    kernels (``kernel.unprivileged_userns_clone=0``) and container runtimes (a seccomp profile) refuse.
    """
    import shutil  # lazy: the launcher, which imports this module for bwrap_argv, never probes (~2 ms)

    as_root = os.geteuid() == 0
    path = shutil.which(bwrap)
    if path is None:
        return SandboxSupport(False, None, as_root, f"{bwrap} is not installed (Debian/Ubuntu: apt install bubblewrap)")
    if as_root and not os.access(SETPRIV, os.X_OK):
        return SandboxSupport(False, path, as_root, f"{SETPRIV} (util-linux) is missing: jobs cannot get their own uid")
    test = [path, "--ro-bind", "/", "/", "--unshare-pid", "--proc", "/proc", "--dev", "/dev", "true"]
    try:
        done = subprocess.run(test, capture_output=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return SandboxSupport(False, path, as_root, f"bwrap could not run: {exc}")
    if done.returncode != 0:
        message = done.stderr.decode(errors="replace").strip() or f"exit code {done.returncode}"
        return SandboxSupport(False, path, as_root, f"bwrap cannot build a sandbox here: {message}")
    return SandboxSupport(True, path, as_root)


def signal_sandbox(pgid: int, sig: int) -> None:
    """Send ``sig`` to every process of the sandbox's group ``pgid`` except its leader, bwrap's outer process.

    bwrap's outer process dies of SIGTERM without passing it on, and its death would end ``wait`` on the
    sandbox while the command, which may trap SIGTERM to checkpoint, still runs. Spared, it exits when the
    command does, with its exit code. bwrap's init inside ignores the signal (it has no handler; only SIGKILL
    reaches a namespace's init from outside), and SIGKILL to the whole group ends everything, so this is only
    for the signals a command may handle. Processes that left the group (``setsid``) are not reached, as
    without the sandbox.
    """
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == pgid:
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            # Fields after the command name (which may hold spaces and parentheses): state, ppid, pgrp.
            if int(stat[stat.rfind(b")") + 2 :].split()[2]) == pgid:
                os.kill(int(entry), sig)
        except (OSError, ValueError, IndexError):
            continue
