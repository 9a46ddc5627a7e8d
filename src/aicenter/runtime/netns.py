"""A job's network on one node: a network namespace of its own, with only loopback, shared by its replicas there.

A sandboxed replica of a root server runs in its job's namespace (``nsenter --net=PATH bwrap ...``, see
``aicenter.runtime.sandbox``). Inside there is ``lo`` (127.0.0.0/8, ::1) and nothing else: no route to the
host's addresses, so PostgreSQL on the host's 127.0.0.1:5432, Redis, the server's port, other jobs' listening
ports and the network beyond are not reachable by construction, without a firewall rule or an address to
allocate. The replicas of one job on this node share the namespace, so their rendezvous on 127.0.0.1 (DDP,
gloo, MPI) works as on a host of their own. The job's one door to the platform is a listening socket inside the
namespace whose connections are relayed to the server's API (``aicenter.runtime.relay``).

Naming and persistence, as ``ip netns`` does it: the namespace is kept alive by a bind mount of its
``/proc/.../ns/net`` file on ``/run/netns/<name>`` (``ip netns list`` shows it, ``ip netns exec`` enters it),
so it outlives the process that made it and a server restart.

Lifetime. Each user of a namespace (an executor launching a replica into it, then that replica's launcher)
holds a shared ``flock`` on ``/run/aicenter/netns/<name>.users`` through an open file description it passes on
(the launcher inherits the executor's; the kernel releases it when the last holder ends, ``kill -9`` included).
The namespace is removed, by whoever asks last (``release``: a launcher as it exits, an executor after a stop,
``sweep``), once an exclusive lock on that file can be taken: nobody holds it any more. Creating, joining and
removing all happen under one host-wide lock (``.lock`` beside it), so a launch racing the last replica's exit
either finds the namespace and holds it, or creates a fresh one.

Costs measured here (2 cores): a new namespace with ``lo`` up ~1 ms (``unshare`` ~0.3 ms, the ioctl ~0.5 ms),
joining one and binding a socket inside ~0.1 ms, all in-process (``ip netns add`` would be two execs, ~5 ms).

Linux only, root only (``unshare(CLONE_NEWNET)`` and the bind mount need ``CAP_SYS_ADMIN``). Standard library
only: the launcher imports this module, at its exit.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import hashlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from typing import NamedTuple, TypeVar

__all__ = [
    "NETNS_DIR",
    "PREFIX",
    "STATE_DIR",
    "HeldNetns",
    "enter",
    "exists",
    "job_netns_name",
    "netns_path",
    "release",
    "sweep",
]

NETNS_DIR = "/run/netns"  # where ip netns keeps its names: ours show in ``ip netns list``
STATE_DIR = "/run/aicenter/netns"  # the locks; /run is a tmpfs, so a reboot forgets them with the namespaces
PREFIX = "aicenter-"
# A sweep of unused namespaces runs with a creation, at most this often per process: with 200 jobs starting
# at once each creation would otherwise try 200 locks under the host-wide lock.
SWEEP_INTERVAL_S = 60.0

_CLONE_NEWNET = 0x40000000
_MS_BIND = 4096
_MNT_DETACH = 2
_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_IFREQ = "16sH22x"  # struct ifreq: the name, then the flags in the 24-byte union (40 bytes on Linux)

_T = TypeVar("_T")
_last_sweep = 0.0


class HeldNetns(NamedTuple):
    """One use of a job's namespace, from ``enter``: hand ``hold_fd`` (and ``api_socket``) to the launcher.

    Attributes:
        name: The namespace's name (``/run/netns/<name>``).
        path: Its file, what ``nsenter --net=`` opens.
        hold_fd: An fd holding a shared lock on the namespace's users file; while any copy of it is open the
            namespace stays.
        api_socket: A TCP socket listening on 127.0.0.1 inside the namespace, or None when none was asked for.
    """

    name: str
    path: str
    hold_fd: int
    api_socket: socket.socket | None

    def close(self) -> None:
        """Close this process's copies (a launcher that inherited them keeps its own)."""
        os.close(self.hold_fd)
        if self.api_socket is not None:
            self.api_socket.close()


def job_netns_name(scope: str, job_id: int) -> str:
    """The namespace of job ``job_id`` of the platform ``scope`` names (e.g. its jobs directory).

    Two platforms on one host (two homes, or test servers) both have a job 1; the scope's digest keeps their
    namespaces apart, while the server replicas of one platform, which share the scope, share the namespace.
    """
    digest = hashlib.sha256(scope.encode()).hexdigest()[:10]
    return f"{PREFIX}{digest}-job-{int(job_id)}"


def netns_path(name: str) -> str:
    """The file of namespace ``name``."""
    if not name or "/" in name or name in (".", ".."):
        raise ValueError(f"bad network namespace name {name!r}")
    return os.path.join(NETNS_DIR, name)


def exists(name: str) -> bool:
    """Whether namespace ``name`` is mounted (alive) at its path."""
    return os.path.ismount(netns_path(name))


def _users_path(name: str) -> str:
    return os.path.join(STATE_DIR, f"{name}.users")


_libc_handle: ctypes.CDLL | None = None


def _libc() -> ctypes.CDLL:
    global _libc_handle
    if _libc_handle is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_void_p]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        libc.unshare.argtypes = [ctypes.c_int]
        libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
        _libc_handle = libc
    return _libc_handle


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def _mount(source: str | None, target: str, flags: int) -> None:
    src = None if source is None else source.encode()
    _check(_libc().mount(src, target.encode(), None, flags, None), f"mount {target}")


@contextlib.contextmanager
def _host_lock() -> Iterator[None]:
    """The host-wide lock every create, join and remove takes (held ~1 ms)."""
    os.makedirs(STATE_DIR, mode=0o700, exist_ok=True)
    fd = os.open(os.path.join(STATE_DIR, ".lock"), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _in_thread(body: Callable[[], _T]) -> _T:
    """Run ``body`` in a short-lived thread of its own.

    ``unshare`` and ``setns`` of a network namespace change only the calling thread; a fresh thread that ends
    afterwards leaves every other thread (an asyncio loop's, a pool's) where it was, with nothing to restore.
    A socket keeps the namespace it was created in, whichever thread uses it later.
    """
    box: list[tuple[bool, object]] = []

    def run() -> None:
        try:
            box.append((True, body()))
        except BaseException as exc:  # re-raised in the caller's thread
            box.append((False, exc))

    thread = threading.Thread(target=run, name="aicenter-netns")
    thread.start()
    thread.join()
    ok, value = box[0]
    if not ok:
        assert isinstance(value, BaseException)
        raise value
    return value  # type: ignore[return-value]


def _loopback_up() -> None:
    """``ip link set lo up`` in the calling thread's namespace (the kernel then gives it 127.0.0.1/8 and ::1)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        current = fcntl.ioctl(sock.fileno(), _SIOCGIFFLAGS, struct.pack(_IFREQ, b"lo", 0))
        flags = struct.unpack(_IFREQ, current)[1]
        fcntl.ioctl(sock.fileno(), _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def _listen(port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` in the calling thread's namespace.

    ``SO_REUSEPORT``: every replica of the job on this node has its launcher listen on the same port, and the
    kernel spreads connections over them; a job's own uid cannot join the group (the kernel requires the same
    effective uid as the launchers', root).
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


def _prepare_netns_dir() -> None:
    """``/run/netns`` as a plain directory. Unlike ``ip netns``, it is never bind-mounted on itself and made a
    shared mount: such a self-bind, repeated (``os.path.ismount`` cannot see a same-filesystem bind), doubles
    through propagation each time, and tens of thousands of mounts made every new mount namespace (each bwrap)
    crawl here. The namespaces' own bind mounts propagate like any mount under ``/run``."""
    os.makedirs(NETNS_DIR, mode=0o755, exist_ok=True)


def _create(path: str, api_port: int | None) -> socket.socket | None:
    """In a thread of its own: a new namespace with ``lo`` up, bound at ``path``, and its API socket."""
    _check(_libc().unshare(_CLONE_NEWNET), "unshare(CLONE_NEWNET)")
    _loopback_up()
    os.close(os.open(path, os.O_RDONLY | os.O_CREAT | os.O_CLOEXEC, 0o444))  # the bind mount's target
    _mount("/proc/thread-self/ns/net", path, _MS_BIND)
    try:
        return None if api_port is None else _listen(api_port)
    except OSError:
        _remove(path)
        raise


def _join(path: str, api_port: int | None) -> socket.socket | None:
    """In a thread of its own: enter the namespace at ``path`` and open its API socket there."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        _check(_libc().setns(fd, _CLONE_NEWNET), f"setns({path})")
    finally:
        os.close(fd)
    return None if api_port is None else _listen(api_port)


def enter(name: str, api_port: int | None = None) -> HeldNetns:
    """Hold namespace ``name`` for one replica: create it (``lo`` only) if it does not exist, then take a share.

    Args:
        name: From ``job_netns_name``.
        api_port: When given, a socket listening on 127.0.0.1:``api_port`` inside the namespace is opened for
            the replica's API relay.

    Raises:
        OSError: Not root, no network namespaces in this kernel, or the port is taken inside by someone else.
    """
    global _last_sweep
    path = netns_path(name)
    with _host_lock():
        if os.path.ismount(path):
            api_socket = _in_thread(lambda: _join(path, api_port))
        else:
            if time.monotonic() - _last_sweep > SWEEP_INTERVAL_S:
                _last_sweep = time.monotonic()
                _sweep_locked()
            _prepare_netns_dir()
            api_socket = _in_thread(lambda: _create(path, api_port))
        try:
            hold = os.open(_users_path(name), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(hold, fcntl.LOCK_SH)
        except OSError:
            if api_socket is not None:
                api_socket.close()
            raise
    return HeldNetns(name, path, hold, api_socket)


def _remove(path: str) -> None:
    if os.path.ismount(path):
        # Detached: a process still inside (a replica whose launcher was killed) keeps the namespace itself,
        # only the name goes.
        _check(_libc().umount2(path.encode(), _MNT_DETACH), f"umount {path}")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)


def _release_locked(name: str) -> bool:
    users = _users_path(name)
    try:
        fd: int | None = os.open(users, os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = None
    try:
        if fd is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return False  # a replica (or a launch) still holds it
        _remove(netns_path(name))
        with contextlib.suppress(FileNotFoundError):
            os.unlink(users)
        return True
    finally:
        if fd is not None:
            os.close(fd)


def release(name: str) -> bool:
    """Remove namespace ``name`` if nobody holds it any more; True when it is gone (or was already)."""
    netns_path(name)  # validates the name
    with _host_lock():
        return _release_locked(name)


def _sweep_locked() -> list[str]:
    names: set[str] = set()
    with contextlib.suppress(FileNotFoundError):
        names.update(n[: -len(".users")] for n in os.listdir(STATE_DIR) if n.endswith(".users"))
    with contextlib.suppress(FileNotFoundError):
        names.update(n for n in os.listdir(NETNS_DIR) if n.startswith(PREFIX))
    return [n for n in sorted(names) if _release_locked(n)]


def sweep() -> list[str]:
    """Remove every aicenter namespace on this host that nobody holds (a launcher killed before its cleanup);
    returns their names."""
    with _host_lock():
        return _sweep_locked()
