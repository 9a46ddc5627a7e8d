"""The sandbox of a local replica: which host paths and devices its ``SandboxSpec`` binds, its uid, its network.

The spec is built from the plan alone: the job's directories are the ``AICENTER_*_DIR`` variables the plan's
environment carries (``aicenter.runtime.env``), the Python it runs is ``python_bin`` (a venv image) or the
server's own interpreter, and the devices are the indices the scheduler assigned. As root, ``isolate_network``
then puts it in its job's network namespace (``aicenter.runtime.netns``) with an API relay.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from pathlib import Path
from typing import Literal

import aicenter
from aicenter.executors.base import LaunchFailed, ReplicaPlan
from aicenter.runtime import netns
from aicenter.runtime.files import METRICS_FILE
from aicenter.runtime.relay import relay_target
from aicenter.runtime.sandbox import NSENTER, SandboxSpec, SandboxSupport, probe

__all__ = [
    "NetworkMode",
    "SandboxMode",
    "isolate_network",
    "prepare_writable",
    "replica_sandbox",
    "sandbox_spec",
    "sandbox_support",
    "unsandboxed_reason",
]

SandboxMode = Literal["auto", "bwrap", "off"]
NetworkMode = Literal["isolated", "host"]

_READ_ONLY_VARIABLES = ("AICENTER_CODE_DIR", "AICENTER_DATA_DIR", "AICENTER_MODEL_DIR")
_READ_WRITE_VARIABLES = ("AICENTER_OUTPUT_DIR", "AICENTER_CHECKPOINT_DIR")
# Nodes every NVIDIA process opens besides its /dev/nvidia<N>; missing ones are skipped by bwrap.
_NVIDIA_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


@functools.cache
def sandbox_support() -> SandboxSupport:
    """``probe()``, once per process (it starts bwrap: ~5 ms)."""
    return probe()


def unsandboxed_reason(mode: SandboxMode) -> str | None:
    """Why this server's replicas run without a sandbox, or None when they run in one.

    ``bwrap`` never runs a replica unsandboxed (its launches fail instead), so it has no reason; ``auto`` falls
    back to no sandbox where bwrap does not work, and says why.
    """
    if mode == "off":
        return "AICENTER_SANDBOX=off"
    if mode == "bwrap":
        return None
    support = sandbox_support()
    return None if support.available else support.reason


@functools.cache
def _server_python_paths() -> tuple[str, ...]:
    """What the server's interpreter needs to run a job: its prefixes, and the dirs its ``.pth`` files add
    (an editable install of aicenter points at a source tree), and this aicenter package itself."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    paths.add(str(Path(aicenter.__file__).resolve().parent))
    for site in (p for p in sys.path if p.startswith(sys.prefix) and p.endswith("-packages")):
        for pth in glob.glob(os.path.join(site, "*.pth")):
            try:
                lines = Path(pth).read_text().splitlines()
            except OSError:
                continue
            paths.update(line for line in lines if line.startswith("/") and os.path.isdir(line))
    return tuple(sorted(p for p in paths if p and os.path.exists(p)))


def _venv_paths(python_bin: Path) -> list[str]:
    """A venv image: its root, and the base interpreter's prefix its ``pyvenv.cfg`` names (``home``)."""
    root = python_bin.parent
    paths = [str(root)]
    try:
        for line in (root / "pyvenv.cfg").read_text().splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "home" and value.strip():
                paths.append(str(Path(value.strip()).parent))
    except OSError:
        pass
    return paths


def sandbox_spec(plan: ReplicaPlan, run_dir: Path, *, bwrap: str, uid_base: int | None) -> SandboxSpec:
    """The sandbox of ``plan``'s replica.

    Args:
        plan: The replica's plan.
        run_dir: Its run directory (absolute); only its metrics file is visible, read-write.
        bwrap: The bwrap executable.
        uid_base: When the server is root, the job runs as ``uid_base + workspace id`` (the base itself for a
            plan without a workspace); None keeps the server's uid (an unprivileged user namespace).
    """
    read_only = [str(plan.workdir), *_server_python_paths()]
    read_only += [plan.env[v] for v in _READ_ONLY_VARIABLES if plan.env.get(v)]
    read_only += [p for p in plan.env.get("PYTHONPATH", "").split(os.pathsep) if p.startswith("/")]
    if plan.python_bin is not None:
        read_only += _venv_paths(Path(plan.python_bin))
    read_write = [plan.env[v] for v in _READ_WRITE_VARIABLES if plan.env.get(v)]
    read_write += [str(p) for p in plan.read_write]
    read_write.append(str(run_dir / METRICS_FILE))
    devices: list[str] = []
    if plan.devices:
        devices = [f"/dev/nvidia{d}" for d in plan.devices] + list(_NVIDIA_SHARED_NODES)
    uid = None if uid_base is None else uid_base + (plan.workspace_id or 0)
    writable = set(read_write)  # a notebook's work dir is its code dir, and writable: not bound twice
    return SandboxSpec(
        read_only=tuple(dict.fromkeys(p for p in read_only if os.path.exists(p) and p not in writable)),
        read_write=tuple(dict.fromkeys(read_write)),
        devices=tuple(devices),
        workdir=str(plan.workdir),
        uid=uid,
        gid=uid,
        bwrap=bwrap,
    )


def prepare_writable(spec: SandboxSpec) -> None:
    """Make the spec's read-write paths exist (bwrap binds only what exists) and, with a uid, belong to it, so
    the job can write them (the server, root, reads them whatever their owner). Directories are chowned with
    what they already hold: a restarted attempt runs as the same uid and finds its checkpoints writable."""
    gid = spec.uid if spec.gid is None else spec.gid
    for raw in spec.read_write:
        path = Path(raw)
        if path.name == METRICS_FILE:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch(exist_ok=True)
        elif path.is_file():  # a file the plan made beforehand (a notebook's activity file)
            pass
        else:
            path.mkdir(parents=True, exist_ok=True)
        if spec.uid is None or gid is None:
            continue
        os.chown(path, spec.uid, gid)
        for top, dirs, files in os.walk(path):
            for name in dirs + files:
                os.lchown(os.path.join(top, name), spec.uid, gid)


def replica_sandbox(
    plan: ReplicaPlan, run_dir: Path, *, mode: SandboxMode, uid_base: int
) -> tuple[SandboxSpec | None, bool]:
    """The sandbox of ``plan``'s replica under ``mode``, its writable paths made ready, and whether it is made
    as root (which runs it as ``uid_base + workspace id``); ``(None, False)`` when it runs unsandboxed.

    Shared by the executors that run the launcher on a host they reach (``local``; ``slurm``, whose nodes see
    the same paths): the network is each executor's own choice (``isolate_network``).

    Raises:
        LaunchFailed: ``mode`` is ``bwrap`` and no sandbox can be made here.
        OSError: A writable path could not be made ready.
    """
    if mode == "off":
        return None, False
    support = sandbox_support()
    if not support.available or support.bwrap is None:
        if mode == "auto":
            return None, False
        raise LaunchFailed(f"AICENTER_SANDBOX=bwrap but no sandbox can be made here: {support.reason}")
    spec = sandbox_spec(plan, run_dir, bwrap=support.bwrap, uid_base=uid_base if support.as_root else None)
    prepare_writable(spec)
    return spec, support.as_root


def isolate_network(
    spec: SandboxSpec, plan: ReplicaPlan, *, scope: str, api_server: tuple[str, int] | None
) -> tuple[SandboxSpec, dict[str, str], netns.HeldNetns]:
    """Put the replica's sandbox in its job's network namespace on this node, with its door to the API.

    Args:
        spec: The replica's sandbox, from ``sandbox_spec``.
        plan: Its plan; ``AICENTER_API_URL`` in its environment, when present, gets a relay.
        scope: What names this platform on the host (the executor's jobs directory), see ``job_netns_name``.
        api_server: The server's own listening address for the relay, or None to relay to ``AICENTER_API_URL``.

    Returns:
        The spec with ``netns``, ``api_upstream``, ``published`` and ``publish_token`` set, the variables that change
        (``AICENTER_API_URL`` now names the relay inside the namespace; a notebook binds 127.0.0.1 there, its
        ports published by the launcher), and the held namespace, whose fds go to the launcher and are then
        closed here.

    Raises:
        OSError: The namespace could not be made or joined (not root, no nsenter).
        ValueError: ``AICENTER_API_URL`` is not an http(s) URL.
    """
    if not os.access(NSENTER, os.X_OK):
        raise OSError(f"{NSENTER} (util-linux) is missing: the replica cannot enter its job's network namespace")
    env: dict[str, str] = {}
    upstream = None
    api_url = plan.env.get("AICENTER_API_URL")
    if api_url:
        upstream, env["AICENTER_API_URL"] = relay_target(api_url, api_server)
    held = netns.enter(netns.job_netns_name(scope, plan.job_id), None if upstream is None else upstream[1])
    published = tuple((plan.publish_host, port) for port in plan.published)
    if published:
        # A notebook's and a service replica's servers listen on the namespace's own loopback: the launcher
        # relays the node's published ports there.
        env["AICENTER_NOTEBOOK_BIND"] = env["AICENTER_SERVE_BIND"] = "127.0.0.1"
    token = plan.publish_token or None  # a service replica's: its relays check it (``aicenter.runtime.relay``)
    return spec._replace(netns=held.path, api_upstream=upstream, published=published, publish_token=token), env, held
