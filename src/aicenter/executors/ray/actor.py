"""What runs inside the Ray cluster: the replica actor and two small tasks pinned to a node.

This module imports ``ray`` and is loaded only when a ``RayExecutor`` first talks to Ray (``ray`` costs ~1 s
of imports). Ray's worker processes import it by name, so every node's Python must have ``aicenter`` installed
(the same version as the server: the handle and plan classes travel pickled by reference).

A replica is one ``ReplicaActor``: a detached, named actor pinned to the replica's node that holds a
``LocalExecutor`` and runs the replica exactly as the ``local`` executor does (launcher, sandbox, control
group), with the actor as the launcher's anchor: when the actor dies (its node died, someone killed it), the
launcher kills the command and records ``node lost``. When its launcher ends, the actor ends itself, so that
Ray frees the CPUs and devices it reserved.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import ray
import ray.actor

from aicenter.core.telemetry import NodeCounters
from aicenter.executors.base import ReplicaHandle, ReplicaPlan, ReplicaStatus
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.telemetry import sample_host
from aicenter.runtime.launcher import create_time

__all__ = ["ReplicaActor", "free_ports", "sample_node", "stop_on_node"]

log = logging.getLogger(__name__)

# How often the actor checks that its launcher still runs; it ends itself within this after the launcher.
WATCH_S = 0.5
_START_TIME_TOLERANCE_S = 0.05


def _alive(pid: int, start_time: float) -> bool:
    started = create_time(pid)
    return started is not None and abs(started - start_time) <= _START_TIME_TOLERANCE_S


@ray.remote
class ReplicaActor:
    """One replica on its node: ``LocalExecutor`` launch/status/stop there, anchored to this actor's process.

    Args:
        options: The ``LocalExecutor`` keyword arguments (node name, sandbox, limits, launch timeout).
    """

    def __init__(self, options: dict[str, Any]) -> None:
        pid = os.getpid()
        start_time = create_time(pid)
        anchor = None if start_time is None else (pid, start_time)
        self.local = LocalExecutor(None, anchor=anchor, **options)
        self.watching = False
        self.lock = threading.Lock()

    def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        """Start (or adopt: the run directory decides) the replica; the actor then lives as long as its launcher."""
        handle = asyncio.run(self.local.launch(plan))
        with self.lock:
            if not self.watching:
                self.watching = True
                threading.Thread(target=self._watch, args=(handle.pid, handle.start_time), daemon=True).start()
        return handle

    def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        return asyncio.run(self.local.status(handle))

    def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        asyncio.run(self.local.stop(handle, grace_s))

    def pid(self) -> int:
        return os.getpid()

    def exit(self) -> None:
        """End this actor (Ray frees its resources); called by the actor's own watcher."""
        ray.actor.exit_actor()  # type: ignore[no-untyped-call]

    def _watch(self, pid: int, start_time: float) -> None:
        stop = threading.Event()
        while _alive(pid, start_time):
            stop.wait(WATCH_S)
        # Through Ray, so that the exit is Ray's orderly one (a method call); os._exit would look like a crash.
        try:
            ray.get_runtime_context().current_actor.exit.remote()
        except Exception:  # the actor is going anyway
            log.exception("the replica actor could not end itself; exiting the process")
            os._exit(0)


@ray.remote(num_cpus=0)
def stop_on_node(handle: ReplicaHandle, grace_s: float) -> None:
    """Stop a replica whose actor is gone (its launcher was killed): kill the orphaned command on its node."""
    asyncio.run(LocalExecutor(None, node_name=handle.node).stop(handle, grace_s))


@ray.remote(num_cpus=0)
def free_ports(count: int, exclude: Sequence[int]) -> list[int]:
    """``count`` distinct ports free on this node now: all bound at once on port 0, read, then released."""
    sockets: list[socket.socket] = []
    ports: list[int] = []
    excluded = set(exclude)
    try:
        while len(ports) < count:
            if len(sockets) > count + len(excluded) + 64:
                raise RuntimeError("could not find enough free ports")
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.bind(("", 0))  # every address: a replica's port is reached from other nodes
            port = int(sock.getsockname()[1])
            if port not in excluded:
                ports.append(port)
    finally:
        for sock in sockets:
            sock.close()
    return ports


@ray.remote(num_cpus=0)
def sample_node(node: str, disk_path: str | None, handles: Sequence[ReplicaHandle]) -> NodeCounters:
    """This node's counters with its replicas' (``aicenter.executors.local.telemetry``), read on the node."""
    return sample_host(node, None if disk_path is None else Path(disk_path), handles)
