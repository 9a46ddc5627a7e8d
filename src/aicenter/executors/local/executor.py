"""The ``local`` executor: each replica is a launcher process on this host (``aicenter.runtime.launcher``).

The executor keeps no state of its own: a replica is its run directory (plan, status, output) plus the launcher's
pid and start time in the handle. That is what makes re-adoption work: a server restarted after a crash builds a
new ``LocalExecutor`` and gets the status, logs and stop of replicas an earlier process launched, and the
launcher has recorded the exit of those that finished while no server was up.

Every signal goes through ``_same_process``: a pid is signalled only when the process now holding it started
at the recorded time, so a pid reused by an unrelated process after a reboot or a long outage is never hit.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, BinaryIO

import psutil

from aicenter.executors.base import (
    HostInfo,
    LaunchFailed,
    NodeCounters,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
    ReplicaStatus,
)
from aicenter.executors.local.host import detect_host, node_name
from aicenter.executors.local.sandboxing import (
    NetworkMode,
    SandboxMode,
    isolate_network,
    replica_sandbox,
)
from aicenter.executors.local.telemetry import sample_host
from aicenter.executors.rundir import (
    exited_status,
    launcher_argv,
    launcher_plan,
    launcher_record,
    read_chunk,
    replica_output,
    resolve_run_dir,
    write_plan,
)
from aicenter.runtime import netns
from aicenter.runtime.cgroups import ReplicaGroup
from aicenter.runtime.files import (
    LAUNCHER_LOG,
    PLAN_FILE,
    STATUS_FILE,
    LauncherPlan,
    parse_stamp,
    read_json,
)
from aicenter.runtime.launcher import launcher_env
from aicenter.runtime.sandbox import signal_sandbox

__all__ = ["LocalExecutor"]

# Start times are compared with a tolerance: psutil derives them from clock ticks since boot (1/100 s).
_START_TIME_TOLERANCE_S = 0.05
_POLL_S = 0.02
# After SIGKILL of the command, the launcher needs a moment to reap it and write the final status.
_LAUNCHER_FINISH_S = 5.0
# Ports handed out recently are not handed out again: the kernel may return a port that was just released,
# and two replicas of one job must not be told the same port before either has bound it.
_RECENT_PORTS = 4096


def _same_process(pid: int | None, start_time: float | None) -> psutil.Process | None:
    """The live process ``pid`` if it started at ``start_time``; None if gone, a zombie or another process."""
    if not pid or start_time is None:
        return None
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - start_time) > _START_TIME_TOLERANCE_S:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except psutil.Error:
        return None
    return proc


def _signal_group(proc: psutil.Process | None, sig: int) -> None:
    """Signal the process group led by ``proc`` (the command is always its group's leader)."""
    if proc is None:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def _signal(proc: psutil.Process | None, sig: int) -> None:
    if proc is None:
        return
    with contextlib.suppress(psutil.Error):
        proc.send_signal(sig)


class LocalExecutor:
    """Runs replicas as launcher processes on this host.

    Args:
        root: Base directory for plans whose ``run_dir`` is relative; None requires absolute run dirs.
        node_name: The name of this host's node; defaults to the host name, normalized like ``detect_host``.
        launch_timeout_s: How long ``launch`` waits for the launcher's first status record.
        sandbox: ``off`` runs commands as the server's user, unsandboxed; ``bwrap`` runs each in a bubblewrap
            sandbox (``aicenter.runtime.sandbox``) and refuses to launch where none can be made; ``auto`` sandboxes
            where bwrap works and runs unsandboxed elsewhere.
        sandbox_uid_base: As root, a sandboxed replica runs as uid and gid ``sandbox_uid_base + workspace id``.
        sandbox_network: As root, ``isolated`` runs a sandboxed replica in its job's network namespace on this
            host (loopback shared with the job's other replicas, nothing of the host), reaching the API only
            through a relay at ``AICENTER_API_URL`` (``aicenter.runtime.netns``, ``aicenter.runtime.relay``);
            ``host`` shares the host's network. An unprivileged server always shares it.
        api_server: The server's own listening ``(host, port)``, where the relay forwards; None forwards to the
            plan's ``AICENTER_API_URL``.
        pids_max: The most processes and threads one replica may have (its cgroup's ``pids.max``); 0: no limit.
        cgroups: Enforce each replica's limits in its own control group where the host allows
            (``aicenter.runtime.cgroups``); False: the launcher's memory watchdog only.
        cgroup_parent: The control group that holds the replicas' groups; "" for the default.
        anchor: ``(pid, start_time)`` of a process the replicas live no longer than: their launchers kill the
            command when it is gone (``--anchor``; the ``ray`` executor's actor passes itself). None: no anchor.
    """

    name = "local"

    def __init__(
        self,
        root: Path | None = None,
        node_name: str | None = None,
        launch_timeout_s: float = 30.0,
        *,
        sandbox: SandboxMode = "off",
        sandbox_uid_base: int = 200_000,
        sandbox_network: NetworkMode = "isolated",
        api_server: tuple[str, int] | None = None,
        pids_max: int = 4096,
        cgroups: bool = True,
        cgroup_parent: str = "",
        anchor: tuple[int, float] | None = None,
    ) -> None:
        self.root = root
        self.node_name = node_name or _default_node_name()
        self.launch_timeout_s = launch_timeout_s
        self.sandbox = sandbox
        self.sandbox_uid_base = sandbox_uid_base
        self.sandbox_network = sandbox_network
        self.api_server = api_server
        self.pids_max = pids_max
        self.cgroups = cgroups
        self.cgroup_parent = cgroup_parent
        self.anchor = anchor
        self._recent_ports: deque[int] = deque(maxlen=_RECENT_PORTS)

    def _sandbox_of(
        self, plan: ReplicaPlan, run_dir: Path
    ) -> tuple[dict[str, Any] | None, dict[str, str], netns.HeldNetns | None]:
        """The plan's sandbox as the launcher reads it (None when off), its writable paths made ready; the
        variables it changes, and the job's network namespace held for this launch (None on the host's)."""
        spec, as_root = replica_sandbox(plan, run_dir, mode=self.sandbox, uid_base=self.sandbox_uid_base)
        if spec is None:
            return None, {}, None
        if not as_root or self.sandbox_network == "host":
            return spec.to_json(), {}, None
        try:
            spec, env, held = isolate_network(spec, plan, scope=str(self.root or ""), api_server=self.api_server)
        except ValueError as exc:
            raise LaunchFailed(str(exc)) from exc
        return spec.to_json(), env, held

    async def _release_network(self, run_dir: Path | str) -> None:
        """Remove the replica's network namespace if no replica of its job holds it any more (its launcher,
        killed, could not): a no-op while another replica of the job runs here."""
        path = ((read_json(Path(run_dir) / PLAN_FILE) or {}).get("sandbox") or {}).get("netns")
        if path:
            with contextlib.suppress(OSError, ValueError):  # a later launch's sweep removes it
                await asyncio.to_thread(netns.release, os.path.basename(path))

    # -- launch ----------------------------------------------------------------------------------------------

    def _run_dir(self, run_dir: Path | str) -> Path:
        return resolve_run_dir(self.root, run_dir, self.name)

    def _handle(self, run_dir: Path, record: dict[str, Any]) -> ReplicaHandle:
        return ReplicaHandle(
            executor=self.name,
            node=self.node_name,
            run_dir=str(run_dir),
            pid=int(record["launcher_pid"]),
            start_time=float(record["launcher_start_time"]),
            extra={"child_pid": record.get("child_pid"), "child_start_time": record.get("child_start_time")},
        )

    async def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        """Start the replica's launcher and return once it has recorded the command's start.

        Launching into a run directory that already has a status record adopts that replica instead of
        starting a second one: a controller that crashed between ``launch`` and storing the handle retries
        safely, and the work is not done twice.

        Raises:
            LaunchFailed: Wrong node, unusable run directory, or no launcher status within ``launch_timeout_s``.
        """
        if plan.node != self.node_name:
            raise LaunchFailed(f"replica planned for node {plan.node!r} but this local executor is {self.node_name!r}")
        run_dir = self._run_dir(plan.run_dir)
        existing = read_json(run_dir / STATUS_FILE)
        if existing is not None and existing.get("launcher_pid"):
            return self._handle(run_dir, existing)
        try:
            sandbox, env, held = await asyncio.to_thread(self._sandbox_of, plan, run_dir)
        except OSError as exc:
            raise LaunchFailed(f"cannot prepare the sandbox of {run_dir}: {exc}") from exc
        try:
            return await self._start(plan, run_dir, sandbox, env, held)
        except BaseException:
            if held is not None:
                held.close()
                with contextlib.suppress(OSError):  # no launcher took it over: nobody else may hold it
                    await asyncio.to_thread(netns.release, held.name)
                held = None
            raise
        finally:
            if held is not None:
                held.close()  # the launcher holds its own copies

    async def _start(
        self,
        plan: ReplicaPlan,
        run_dir: Path,
        sandbox: dict[str, Any] | None,
        env: dict[str, str],
        held: netns.HeldNetns | None,
    ) -> ReplicaHandle:
        """Write the launcher's plan, start the launcher (handing it ``held``'s fds) and wait for its record."""
        plan_of_launcher = launcher_plan(
            plan,
            sandbox=sandbox,
            env=env,
            pids_max=self.pids_max,
            cgroups=self.cgroups,
            cgroup_parent=self.cgroup_parent,
        )
        try:
            # In a thread: the plan is fsynced, which can take a while on a busy disk.
            log_file = await asyncio.to_thread(_prepare_run_dir, run_dir, plan_of_launcher)
        except OSError as exc:
            raise LaunchFailed(f"cannot prepare run directory {run_dir}: {exc}") from exc
        deadline = time.monotonic() + self.launch_timeout_s
        # The launcher writes a byte into this pipe once status.json holds its first record: launch returns
        # then, instead of polling the file (the 20 ms poll cost 10 ms per launch on average).
        ready_r, ready_w = os.pipe()
        held_args: list[str] = []
        if held is not None:
            held_args += ["--netns-fd", str(held.hold_fd)]
            if held.api_socket is not None:
                held_args += ["--api-fd", str(held.api_socket.fileno())]
        anchor_args = [] if self.anchor is None else ["--anchor", f"{self.anchor[0]}:{self.anchor[1]!r}"]
        try:
            with log_file:
                # The launcher forks away from this short-lived intermediate (--detach): it is never our child,
                # so it leaves no zombie behind and lives on when this server dies.
                proc = await asyncio.create_subprocess_exec(
                    *launcher_argv(sys.executable),
                    "--detach",
                    "--ready-fd",
                    str(ready_w),
                    *held_args,
                    *anchor_args,
                    str(run_dir / PLAN_FILE),
                    stdin=asyncio.subprocess.DEVNULL,
                    env=launcher_env(dict(os.environ)),
                    stdout=log_file,
                    stderr=log_file,
                    start_new_session=True,
                    pass_fds=(ready_w, *(int(a) for a in held_args[1::2])),
                )
                os.close(ready_w)  # ours: the pipe reaches EOF when the launcher writes or dies
                ready_w = -1
                await proc.wait()
            await _readable(ready_r, deadline - time.monotonic())
        finally:
            for fd in (ready_r, ready_w):
                if fd >= 0:
                    os.close(fd)
        # The record, or (the pipe closed without one: a second launcher that left the run dir to the first,
        # a launcher that died) poll until the deadline.
        while True:
            record = read_json(run_dir / STATUS_FILE)
            if record is not None and record.get("state") in ("running", "exited"):
                return self._handle(run_dir, record)
            if time.monotonic() > deadline:
                tail = read_chunk(run_dir / LAUNCHER_LOG, 0, 1 << 20)[-2000:].decode(errors="replace")
                raise LaunchFailed(
                    f"the launcher in {run_dir} did not start within {self.launch_timeout_s:g} s: {tail}"
                )
            await asyncio.sleep(_POLL_S)

    # -- status and stop -------------------------------------------------------------------------------------

    @staticmethod
    def _record(handle: ReplicaHandle) -> dict[str, Any]:
        """The launcher's status record, or ``{}`` when there is none or it belongs to another launcher.

        A handle and a record that disagree on the launcher's identity (a stale or forged handle, a run
        directory reused) share nothing: the replica is lost to that handle and nothing is signalled through it.
        """
        return launcher_record(handle)

    @staticmethod
    def _child(record: dict[str, Any]) -> psutil.Process | None:
        return _same_process(record.get("child_pid"), record.get("child_start_time"))

    async def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        """Exited per the launcher's final record; running while the launcher lives; otherwise lost."""
        record = self._record(handle)
        if record.get("state") == "exited":
            return exited_status(record)
        if _same_process(handle.pid, handle.start_time) is not None:
            return ReplicaStatus(ReplicaState.RUNNING, started_at=parse_stamp(record.get("started_at")))
        # The launcher may have written its final record and exited between the two reads above.
        record = self._record(handle)
        if record.get("state") == "exited":
            return exited_status(record)
        await self._release_network(handle.run_dir)  # a killed launcher could not remove it
        return ReplicaStatus(
            ReplicaState.LOST, reason="launcher lost", started_at=parse_stamp(record.get("started_at"))
        )

    async def _wait_ended(self, handle: ReplicaHandle, timeout_s: float) -> bool:
        """Wait until the replica has a final record, or both the launcher and the command are gone."""
        deadline = time.monotonic() + timeout_s
        while True:
            record = self._record(handle)
            if record.get("state") == "exited":
                return True
            if _same_process(handle.pid, handle.start_time) is None and self._child(record) is None:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)

    async def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        """SIGTERM, up to ``grace_s`` to exit, then SIGKILL. Idempotent; never signals a reused pid.

        While the launcher lives, only the launcher is sent SIGTERM: it forwards it to the command's group once
        (a job trapping SIGTERM to checkpoint must not see it twice). Without a launcher (it was killed), the
        command's group is signalled directly.
        """
        await self._stop(handle, grace_s)
        await self._release_network(handle.run_dir)

    async def _stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        record = self._record(handle)
        if record.get("state") == "exited":
            return
        launcher = _same_process(handle.pid, handle.start_time)
        if launcher is not None:
            _signal(launcher, signal.SIGTERM)
        elif (child := self._child(record)) is not None and "sandbox" in (
            read_json(Path(handle.run_dir) / PLAN_FILE) or {}
        ):
            # The command's group but bwrap's outer process, which would die and leave the command behind it.
            signal_sandbox(child.pid, signal.SIGTERM)
        else:
            _signal_group(self._child(record), signal.SIGTERM)
        if not await self._wait_ended(handle, grace_s):
            _signal_group(self._child(self._record(handle)), signal.SIGKILL)
            if not await self._wait_ended(handle, _LAUNCHER_FINISH_S):
                _signal(_same_process(handle.pid, handle.start_time), signal.SIGKILL)
        record = self._record(handle)
        if record.get("state") != "exited" and record.get("cgroups"):
            # The launcher died before its final record (it was killed): nobody else ends what left the process
            # group (setsid) but not the replica's control group, nor removes the group.
            group = ReplicaGroup(str(record.get("limits")), dict(record["cgroups"]))
            await asyncio.to_thread(group.remove, _LAUNCHER_FINISH_S)

    # -- logs ------------------------------------------------------------------------------------------------

    def logs(self, handle: ReplicaHandle, since: int = 0, *, follow: bool = False) -> AsyncIterator[bytes]:
        """Bytes of ``output.log`` from offset ``since``; with ``follow``, until the replica ended and all is read."""
        return replica_output(handle, since, follow=follow, status=self.status)

    # -- inventory -------------------------------------------------------------------------------------------

    async def allocate_ports(self, node: str, count: int) -> list[int]:
        """``count`` distinct ports free on this host: all bound at once on port 0, read, then released."""
        if node != self.node_name:
            raise ValueError(f"the local executor runs on node {self.node_name!r}, not {node!r}")
        if count < 0:
            raise ValueError("count must be >= 0")
        sockets: list[socket.socket] = []
        ports: list[int] = []
        try:
            # Keep every socket open until all ports are read, so the kernel cannot hand one out twice.
            attempts = 0
            while len(ports) < count:
                attempts += 1
                if attempts > count + _RECENT_PORTS:
                    raise RuntimeError("could not find enough free ports")
                sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                sockets.append(sock)
                sock.bind(("127.0.0.1", 0))
                port = int(sock.getsockname()[1])
                if port in self._recent_ports:
                    continue
                ports.append(port)
        finally:
            for sock in sockets:
                sock.close()
        self._recent_ports.extend(ports)
        return ports

    async def nodes(self) -> list[HostInfo]:
        """This host, named ``node_name``."""
        host = await asyncio.to_thread(detect_host)
        return [replace(host, name=self.node_name)]

    async def sample(self, handles: Sequence[ReplicaHandle]) -> list[NodeCounters]:
        """This host's counters (disk: the filesystem of ``root``, the jobs' directories) with the running
        replicas of ``handles`` that are this node's (``aicenter.executors.local.telemetry``)."""
        mine = [h for h in handles if h.node == self.node_name]
        return [await asyncio.to_thread(sample_host, self.node_name, self.root, mine)]

    async def close(self) -> None:
        """Nothing to let go of: replicas are files and processes on this host."""


async def _readable(fd: int, timeout_s: float) -> None:
    """Wait until ``fd`` has data or EOF, or ``timeout_s`` passed (the caller then reads the status record)."""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def on_readable() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_reader(fd, on_readable)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(ready, max(0.0, timeout_s))
    finally:
        loop.remove_reader(fd)


def _prepare_run_dir(run_dir: Path, plan: LauncherPlan) -> BinaryIO:
    """Create the run directory, write the plan (``write_plan``), and open the launcher's log for its output."""
    write_plan(run_dir, plan)
    return (run_dir / LAUNCHER_LOG).open("ab")


def _default_node_name() -> str:
    return node_name(socket.gethostname())
