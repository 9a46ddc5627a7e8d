"""The ``ray`` executor: each replica is a detached Ray actor pinned to its node, running the local launcher there.

Design (docs: the deployment guide's "Ray" section):

* The jobs' directories (run dirs, work dirs) are on a filesystem every node mounts at the same path. The
  launcher on the node writes ``status.json`` and ``output.log`` there, so ``status`` of an ended replica and
  ``logs`` cost no call into Ray (``executors.rundir``).
* A replica is a ``ReplicaActor`` (``actor.py``): named from its run directory, ``lifetime="detached"`` (it
  outlives the server's driver), ``max_restarts=0`` (a replica is restarted by the job controllers, with a new
  run directory, never behind their back), pinned with ``NodeAffinitySchedulingStrategy(soft=False)`` to the
  node the scheduler chose, reserving ``cpu_milli / 1000`` CPUs and one unit of the accelerator resource per
  device (``inventory.device_resources``). It holds a ``LocalExecutor``: sandbox, control group and launcher
  are exactly the local ones (the sandbox shares the host's network: a job's replicas talk across nodes).
* The actor is the launcher's anchor (``--anchor``): when the node dies, Ray kills the actor, the launcher
  kills the command and records ``node lost``, which ``status`` reports as ``LOST`` (no orphan keeps running
  on devices that the scheduler will give to someone else). A node that died with its launcher leaves no
  record: its replica is ``LOST`` with ``node lost`` too, once Ray declares the node dead.
* ``status``: the final record when there is one; else the actor's ``LocalExecutor.status`` (running while the
  launcher lives); with the actor gone, ``LOST``: ``node lost`` when Ray says the node is dead, else
  ``launcher lost`` (the launcher was killed; the actor ended itself). ``stop`` goes through the actor; with the
  actor gone and the node alive, through a task pinned to the node (``num_cpus=0``), so orphans die.
* Every Ray call blocks: it runs in one of the executor's own threads (up to ``BLOCKING_THREADS``), not in
  asyncio's default pool (min(32, cores + 4) threads): a launch blocks until its actor and launcher are up
  (0.2-2 s), so 50 launches at once queued there in waves of 6 on 2 cores (bench/executors.py) and starved
  the server's other ``to_thread`` work (log reads, file writes). ``ray.init`` happens once per process,
  lazily, under a lock; actor handles and ``ray.nodes()`` (for launches) are cached, so a reconcile pass costs one
  actor call per running replica and none per ended one. Measured here (2 cores, one host): import and
  ``ray.init`` 0.7 s; a launch (actor placed and started, launcher up) 0.2-0.6 s; ``status`` of a running
  replica ~6 ms (one actor call), of an ended one 0.2 ms (the record); ``ray.nodes()`` 5 ms.

Tokens: the plan (with the job's ``AICENTER_TOKEN``) reaches the actor as a method argument (worker to worker),
not as a creation argument, which Ray would keep in its control store. On a network others share, run Ray with
token authentication (``auth_mode="token"``) and TLS.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import sys
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from aicenter.executors.base import (
    HostInfo,
    LaunchFailed,
    NodeCounters,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
    ReplicaStatus,
)
from aicenter.executors.local.sandboxing import SandboxMode
from aicenter.executors.ray.inventory import RayNode, device_resources, map_nodes
from aicenter.executors.rundir import exited_status, launcher_record, replica_output, resolve_run_dir
from aicenter.runtime.files import parse_stamp
from aicenter.runtime.launcher import ANCHOR_LOST_REASON

__all__ = ["NODE_LOST", "RayExecutor"]

log = logging.getLogger(__name__)

NODE_LOST = ANCHOR_LOST_REASON
LAUNCHER_LOST = "launcher lost"
_RECENT_PORTS = 4096
# One connection per process: ray.init is process-global.
_connect_lock = threading.Lock()
GCS_RECONNECT_TIMEOUT_S = 10 * 365 * 24 * 3600
# Threads for blocking Ray calls per executor (module docstring): enough for a burst of launches to wait at once.
BLOCKING_THREADS = 64
_T = TypeVar("_T")


def _no_sigterm_warning(record: logging.LogRecord) -> bool:
    return "SIGTERM handler is not set" not in record.getMessage()


def _ray() -> Any:
    """The ``ray`` module, imported on first use (module docstring of ``aicenter.executors.ray``)."""
    import ray

    return ray


def _actor_module() -> Any:
    """``actor.py``, imported on first use: it imports ``ray``."""
    import aicenter.executors.ray.actor

    return aicenter.executors.ray.actor


def actor_name(plan: ReplicaPlan, run_dir: Path) -> str:
    """The replica's actor name: readable, and unique per run directory (one actor per replica attempt)."""
    digest = hashlib.sha1(str(run_dir).encode(), usedforsecurity=False).hexdigest()[:16]
    return f"aicenter-replica-{digest}-job{plan.job_id}-{plan.task}-{plan.replica}-a{plan.attempt}"


class RayExecutor:
    """Runs replicas as Ray actors on the nodes of an existing Ray cluster.

    Args:
        root: Base directory for plans whose ``run_dir`` is relative (the jobs path every node mounts).
        address: The cluster's GCS address (``host:port``) or ``ray://`` client address; None: ``RAY_ADDRESS``
            or a local cluster, as ``ray.init`` decides.
        namespace: The Ray namespace of the replicas' actors.
        auth_mode: Ray's ``RAY_AUTH_MODE`` for this process (``disabled``, ``token``); None leaves it as set.
        auth_token: Ray's ``RAY_AUTH_TOKEN`` when ``auth_mode`` is ``token``.
        launch_timeout_s: How long ``launch`` waits for the actor to be placed and its launcher to start.
        call_timeout_s: How long a status call to an actor may take before the replica is taken as still running
            (an actor whose node is dying answers no more until Ray declares the node dead).
        nodes_cache_s: How long ``launch`` and ``allocate_ports`` reuse ``ray.nodes()`` to find a node's id
            (a missing name is looked up afresh). ``status`` of a running replica needs no node list; one whose
            actor is gone asks afresh whether its node is dead (``node lost``) or alive (``launcher lost``).
        lost_grace_s: How long a replica whose actor is gone but whose node Ray still counts alive is reported
            running before it is lost to its launcher: longer than Ray's node health-check window (default
            about 20 s), so that a node's death is not taken for its launcher's.
        sandbox, sandbox_uid_base, pids_max, cgroups, cgroup_parent: The nodes' ``LocalExecutor`` settings.

    A process talks to one Ray cluster (``ray.init`` is process-wide): executors made later reuse the first
    connection, whatever their ``address``.
    """

    name = "ray"

    def __init__(
        self,
        root: Path | None = None,
        *,
        address: str | None = None,
        namespace: str = "aicenter",
        auth_mode: str | None = None,
        auth_token: str | None = None,
        launch_timeout_s: float = 60.0,
        call_timeout_s: float = 10.0,
        nodes_cache_s: float = 2.0,
        lost_grace_s: float = 30.0,
        sandbox: SandboxMode = "off",
        sandbox_uid_base: int = 200_000,
        pids_max: int = 4096,
        cgroups: bool = True,
        cgroup_parent: str = "",
    ) -> None:
        self.root = root
        self.address = address
        self.namespace = namespace
        self.auth_mode = auth_mode
        self.auth_token = auth_token
        self.launch_timeout_s = launch_timeout_s
        self.call_timeout_s = call_timeout_s
        self.nodes_cache_s = nodes_cache_s
        self.lost_grace_s = lost_grace_s
        self.local_options: dict[str, Any] = {
            "launch_timeout_s": launch_timeout_s,
            "sandbox": sandbox,
            "sandbox_uid_base": sandbox_uid_base,
            "sandbox_network": "host",
            "pids_max": pids_max,
            "cgroups": cgroups,
            "cgroup_parent": cgroup_parent,
        }
        self._nodes: list[RayNode] = []
        self._nodes_at = -1e9
        self._nodes_lock = threading.Lock()
        self._actors: dict[str, Any] = {}
        # Actor name -> when its actor was first seen gone while Ray still counted its node alive (``_status``).
        self._gone_since: dict[str, float] = {}
        self._recent_ports: dict[str, deque[int]] = {}
        self._threads = ThreadPoolExecutor(max_workers=BLOCKING_THREADS, thread_name_prefix="aicenter-ray")

    async def _blocking(self, call: Callable[..., _T], *args: Any) -> _T:
        """``call(*args)`` in the executor's threads (module docstring: why not ``asyncio.to_thread``)."""
        return await asyncio.get_running_loop().run_in_executor(self._threads, call, *args)

    # -- Ray connection and nodes (blocking: called in threads) ----------------------------------------------

    def _connect(self) -> Any:
        ray = _ray()
        with _connect_lock:
            if ray.is_initialized():
                return ray
            # A Ray driver ends its whole process once the head (GCS) has been unreachable for 60 s: that process is
            # the API server here, which must outlive a restarting Ray head (calls fail meanwhile; replicas are
            # reported running until the head answers again). An operator's own value is kept.
            os.environ.setdefault("RAY_gcs_rpc_server_reconnect_timeout_s", str(GCS_RECONNECT_TIMEOUT_S))
            if self.auth_mode is not None:
                os.environ["RAY_AUTH_MODE"] = self.auth_mode
            if self.auth_token is not None:
                os.environ["RAY_AUTH_TOKEN"] = self.auth_token
            # In a worker thread (status/launch call this through ``_blocking``): there ray.init leaves the
            # process's SIGTERM handler alone (on the main thread it would install sys.exit, over the server's
            # own graceful shutdown) and says so in a warning that is expected here.
            logging.getLogger("ray._private.worker").addFilter(_no_sigterm_warning)
            ray.init(
                address=self.address,
                namespace=self.namespace,
                ignore_reinit_error=True,
                logging_level=logging.WARNING,
                log_to_driver=False,
                include_dashboard=False if self.address is None else None,
            )
        return ray

    async def close(self) -> None:
        """Disconnect this process from the Ray cluster (``ray.shutdown``); the replicas' actors are detached and
        keep running. Also what a test does before stopping its cluster: a driver left connected to a stopped
        cluster waits for it forever."""

        def shutdown() -> None:
            if "ray" not in sys.modules:  # never connected: do not pay ray's import for nothing
                return
            ray = _ray()
            with _connect_lock:
                if ray.is_initialized():
                    ray.shutdown()

        await asyncio.to_thread(shutdown)
        self._threads.shutdown(wait=False, cancel_futures=True)

    def _ray_nodes(self, max_age_s: float | None = None) -> list[RayNode]:
        """``ray.nodes()`` mapped, at most ``max_age_s`` old (default ``nodes_cache_s``)."""
        max_age = self.nodes_cache_s if max_age_s is None else max_age_s
        with self._nodes_lock:
            if time.monotonic() - self._nodes_at <= max_age:
                return self._nodes
            ray = self._connect()
            self._nodes = map_nodes(ray.nodes())
            self._nodes_at = time.monotonic()
            return self._nodes

    def _alive_node(self, name: str, max_age_s: float | None = None) -> RayNode | None:
        for node in self._ray_nodes(max_age_s):
            if node.alive and node.host.name == name:
                return node
        return None

    def _node_alive(self, node_id: str, max_age_s: float | None = None) -> bool:
        return any(n.alive and n.node_id == node_id for n in self._ray_nodes(max_age_s))

    def _actor(self, name: str) -> Any | None:
        """The named actor's handle, or None when Ray has no live actor of that name."""
        if name in self._actors:
            return self._actors[name]
        ray = self._connect()
        try:
            actor = ray.get_actor(name, namespace=self.namespace)
        except ValueError:
            return None
        self._actors[name] = actor
        return actor

    # -- launch ----------------------------------------------------------------------------------------------

    def _run_dir(self, run_dir: Path | str) -> Path:
        return resolve_run_dir(self.root, run_dir, self.name)

    async def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        """Create the replica's actor on its node and have it start the launcher there.

        Launching into a run directory again returns the same replica (the actor's name and the launcher's
        run-directory lock make it idempotent), so a controller that crashed before storing the handle retries
        safely.

        Raises:
            LaunchFailed: Unknown or dead node, unusable run directory, or no start within ``launch_timeout_s``.
        """
        run_dir = self._run_dir(plan.run_dir)
        try:
            return await self._blocking(self._launch, replace(plan, run_dir=run_dir))
        except LaunchFailed:
            raise
        except Exception as exc:  # Ray unreachable, refused the actor's options ...
            raise LaunchFailed(f"Ray could not start the replica on {plan.node}: {exc}") from exc

    def _launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        node = self._alive_node(plan.node) or self._alive_node(plan.node, max_age_s=0)
        if node is None:
            raise LaunchFailed(f"no live Ray node is named {plan.node!r}")
        ray = self._connect()
        actor_cls = _actor_module().ReplicaActor
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        name = actor_name(plan, Path(plan.run_dir))
        actor = actor_cls.options(
            name=name,
            namespace=self.namespace,
            lifetime="detached",
            get_if_exists=True,
            max_restarts=0,
            max_concurrency=8,  # status and stop calls while a launch or another stop waits
            num_cpus=plan.cpu_milli / 1000,
            resources=device_resources(node.resources, plan.devices),
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
        ).remote({**self.local_options, "node_name": plan.node})
        try:
            local = ray.get(actor.launch.remote(plan), timeout=self.launch_timeout_s)
        except Exception as exc:
            with contextlib.suppress(Exception):
                ray.kill(actor, no_restart=True)  # a pending actor would hold its place in Ray's queue
            cause = getattr(exc, "cause", None) or exc
            if isinstance(exc, ray.exceptions.GetTimeoutError):
                raise LaunchFailed(
                    f"the replica's actor on {plan.node} did not start within {self.launch_timeout_s:g} s "
                    f"(resources {device_resources(node.resources, plan.devices)}, {plan.cpu_milli} mCPU free?)"
                ) from exc
            raise LaunchFailed(f"the replica's actor on {plan.node} failed: {cause}") from exc
        self._actors[name] = actor
        return ReplicaHandle(
            executor=self.name,
            node=plan.node,
            run_dir=str(plan.run_dir),
            pid=local.pid,
            start_time=local.start_time,
            extra={**local.extra, "actor": name, "node_id": node.node_id},
        )

    # -- status and stop -------------------------------------------------------------------------------------

    @staticmethod
    def _record(handle: ReplicaHandle) -> dict[str, Any]:
        """The launcher's record if it is this handle's launcher's (as ``LocalExecutor`` checks), else ``{}``."""
        return launcher_record(handle)

    @staticmethod
    def _local(handle: ReplicaHandle) -> ReplicaHandle:
        """The handle as the node's ``LocalExecutor`` knows it."""
        extra = {k: handle.extra.get(k) for k in ("child_pid", "child_start_time")}
        return ReplicaHandle("local", handle.node, handle.run_dir, handle.pid, handle.start_time, extra)

    @staticmethod
    def _final(record: dict[str, Any]) -> ReplicaStatus | None:
        if record.get("state") != "exited":
            return None
        if record.get("reason") == NODE_LOST:
            return ReplicaStatus(ReplicaState.LOST, reason=NODE_LOST, started_at=parse_stamp(record.get("started_at")))
        return exited_status(record)

    async def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        """Exited per the final record; else what the replica's actor sees; lost when the actor is gone.

        While Ray cannot be reached the replica is reported running: if its node is really gone, its launcher
        (anchored to the actor) records ``node lost`` on the shared jobs path, which is read first.
        """
        final = self._final(self._record(handle))
        if final is None:
            try:
                final = await self._blocking(self._status, handle)
            except Exception as exc:
                log.warning("cannot ask Ray about the replica in %s: %s", handle.run_dir, exc)
                started = parse_stamp(self._record(handle).get("started_at"))
                return ReplicaStatus(ReplicaState.RUNNING, started_at=started)
        if final.state is not ReplicaState.RUNNING:
            self._actors.pop(str(handle.extra.get("actor", "")), None)  # no more calls: forget its handle
        return final

    def _status(self, handle: ReplicaHandle) -> ReplicaStatus:
        ray = self._connect()
        name = str(handle.extra.get("actor", ""))
        actor = self._actor(name) if name else None
        if actor is not None:
            try:
                status: ReplicaStatus = ray.get(actor.status.remote(self._local(handle)), timeout=self.call_timeout_s)
                return status
            except ray.exceptions.GetTimeoutError:
                # A dying node's actor: Ray declares it dead within its health-check timeout.
                record = self._record(handle)
                return ReplicaStatus(ReplicaState.RUNNING, started_at=parse_stamp(record.get("started_at")))
            except ray.exceptions.RayError:
                self._actors.pop(name, None)
        record = self._record(handle)  # the launcher may have ended (and the actor with it) since the first read
        final = self._final(record)
        if final is not None:
            return final
        started = parse_stamp(record.get("started_at"))
        if self._node_alive(str(handle.extra.get("node_id", "")), max_age_s=0):
            # A node that died takes its actors with it at once, but Ray declares the node dead only after its
            # health checks fail (seconds): until ``lost_grace_s`` has passed the cause is not known, and the
            # replica is reported running rather than lost for the wrong reason.
            first = self._gone_since.setdefault(name, time.monotonic())
            if time.monotonic() - first < self.lost_grace_s:
                return ReplicaStatus(ReplicaState.RUNNING, started_at=started)
            reason = LAUNCHER_LOST
        else:
            reason = NODE_LOST
        self._gone_since.pop(name, None)
        return ReplicaStatus(ReplicaState.LOST, reason=reason, started_at=started)

    async def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL, on the node (``LocalExecutor.stop``). Idempotent."""
        if self._record(handle).get("state") == "exited":
            return
        await self._blocking(self._stop, handle, grace_s)

    def _stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        ray = self._connect()
        name = str(handle.extra.get("actor", ""))
        actor = self._actor(name) if name else None
        # LocalExecutor.stop takes grace_s, then up to 5 s for the launcher to finish, then a control group's
        # removal: 30 s more is generous.
        timeout = grace_s + 30.0
        local = self._local(handle)
        if actor is not None:
            try:
                ray.get(actor.stop.remote(local, grace_s), timeout=timeout)
                return
            except ray.exceptions.RayError:
                self._actors.pop(name, None)
        node_id = str(handle.extra.get("node_id", ""))
        if not self._node_alive(node_id, max_age_s=0):
            return  # the launcher's anchor ended the command with its node
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = _actor_module().stop_on_node.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
        )
        try:
            ray.get(task.remote(local, grace_s), timeout=timeout)
        except ray.exceptions.RayError as exc:
            # The node died meanwhile (then the anchor ended the command) or Ray could not run the task there.
            log.warning("could not stop the replica in %s on its node: %s", handle.run_dir, exc)

    # -- logs ------------------------------------------------------------------------------------------------

    def logs(self, handle: ReplicaHandle, since: int = 0, *, follow: bool = False) -> AsyncIterator[bytes]:
        """Bytes of ``output.log`` on the shared jobs path from ``since``; with ``follow``, until it ended."""
        return replica_output(handle, since, follow=follow, status=self.status)

    # -- inventory -------------------------------------------------------------------------------------------

    async def allocate_ports(self, node: str, count: int) -> list[int]:
        """``count`` distinct ports free on ``node`` now, bound and released there by a task pinned to it."""
        if count < 0:
            raise ValueError("count must be >= 0")
        if count == 0:  # most jobs (no framework): no task on the node, which could cost a worker's start
            found = await self._blocking(self._alive_node, node) or await self._blocking(self._alive_node, node, 0)
            if found is None:
                raise ValueError(f"no live Ray node is named {node!r}")
            return []
        return await self._blocking(self._allocate_ports, node, count)

    def _allocate_ports(self, node: str, count: int) -> list[int]:
        found = self._alive_node(node) or self._alive_node(node, max_age_s=0)
        if found is None:
            raise ValueError(f"no live Ray node is named {node!r}")
        ray = self._connect()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        recent = self._recent_ports.setdefault(node, deque(maxlen=_RECENT_PORTS))
        task = _actor_module().free_ports.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(found.node_id, soft=False)
        )
        ports: list[int] = ray.get(task.remote(count, list(recent)), timeout=self.call_timeout_s + 30.0)
        recent.extend(ports)
        return ports

    async def sample(self, handles: Sequence[ReplicaHandle]) -> list[NodeCounters]:
        """Every live node's counters, read on the node by a task pinned there (``actor.sample_node``).

        A task, not the replicas' actors: a node without replicas has no actor, and every node is sampled. The
        task asks for no CPU (``num_cpus=0``), so a full node is sampled too, and Ray reuses an idle worker for
        it: measured here (bench/monitoring_sampler.py --ray: 3 nodes on 2 cores) 1.8 ms of the driver's CPU per
        node and 14 ms wall for the whole tick, after the first (which starts the workers). A node that does not
        answer within ``call_timeout_s`` (one wait for all of them) is left out of this tick.
        """
        return await self._blocking(self._sample, list(handles))

    def _sample(self, handles: list[ReplicaHandle]) -> list[NodeCounters]:
        nodes = [n for n in self._ray_nodes() if n.alive]
        if not nodes:
            return []
        ray = self._connect()
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = _actor_module().sample_node
        disk = None if self.root is None else str(self.root)
        refs = []
        for node in nodes:
            mine = [self._local(h) for h in handles if h.node == node.host.name]
            strategy = NodeAffinitySchedulingStrategy(node.node_id, soft=False)
            refs.append((node, task.options(scheduling_strategy=strategy).remote(node.host.name, disk, mine)))
        # One wait for all: a node that does not answer costs one timeout per tick, not one per node.
        ready, late = ray.wait([r for _, r in refs], num_returns=len(refs), timeout=self.call_timeout_s)
        done = set(ready)
        out = []
        for node, ref in refs:
            try:
                if ref in done:
                    out.append(ray.get(ref))
                    continue
                log.info("no telemetry from Ray node %s within %g s", node.host.name, self.call_timeout_s)
            except Exception as exc:  # a dying node, a worker that could not start: next tick
                log.info("no telemetry from Ray node %s this time: %s", node.host.name, exc)
        for ref in late:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
        return out

    async def nodes(self) -> list[HostInfo]:
        """Every live Ray node as a host (``inventory``); a node Ray lost is not listed."""
        nodes = await self._blocking(self._ray_nodes, 0)
        return list(_unique_hosts(n for n in nodes if n.alive))


def _unique_hosts(nodes: Iterator[RayNode]) -> Iterator[HostInfo]:
    """One host per name: two live Ray nodes named alike (a label copied by mistake) would share a node row."""
    seen: set[str] = set()
    for node in nodes:
        if node.host.name in seen:
            log.warning("two live Ray nodes are named %s; ignoring %s", node.host.name, node.node_id)
            continue
        seen.add(node.host.name)
        yield node.host
