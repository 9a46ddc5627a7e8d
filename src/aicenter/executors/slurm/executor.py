"""The ``slurm`` executor: each replica is one Slurm batch job whose script ``exec``s the launcher.

The jobs' directories are on a filesystem every node mounts at the same path (the deployment guide names it), so
the executor writes the launcher's plan and reads its ``status.json`` and ``output.log`` directly, as the local
executor does; Slurm is asked only what the run directory cannot say: whether the job still runs, and whether its
node failed. One ``squeue`` call, cached for ``QUEUE_TTL_S``, answers for every handle, so a reconcile pass over
100 replicas costs one call, not 100; the queue of a job this executor just submitted is read again at once.

Ending a replica (``stop``) goes through Slurm, which can signal the batch step's process, i.e. the launcher:
``scancel --batch --signal=TERM`` (the launcher forwards it once to the command, which may checkpoint), after the
grace ``--signal=USR2`` (the launcher kills the command's groups at once; reason ``stopped`` either way), and if
the launcher still wrote no final record, ``scancel`` of the job. A launcher that was killed leaves its command
running outside Slurm's tracking (``proctrack/linuxproc`` follows parent links, and the orphan's parent is gone),
so the stop then runs ``aicenter.executors.local.reap`` on the node through ``srun``: the local executor's stop,
with its pid identity checks and control-group removal. On a node whose CPUs are all allocated, ``srun`` gets
nothing for a new job; the reaper then runs as an overlapping step (``--overlap``) of a job running there.

Node names: aicenter's are lower-case, Slurm's may not be; ``nodes()`` reports them lower-cased and the executor
maps them back from ``scontrol show nodes`` (refreshed when a name is unknown, and every ``NODES_TTL_S``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import sys
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from aicenter.executors.base import (
    NODE_LOST_REASON,
    HostInfo,
    LaunchFailed,
    NodeCounters,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
    ReplicaStatus,
)
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import SandboxMode, replica_sandbox
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
from aicenter.executors.slurm.commands import (
    SQUEUE_FORMAT,
    SlurmJob,
    batch_script,
    cycle_ports,
    gpu_gres_type,
    node_lost,
    parse_job_id,
    parse_jobcomp,
    parse_sacct,
    parse_squeue,
    sbatch_args,
)
from aicenter.executors.slurm.inventory import SlurmNode, parse_nodes
from aicenter.executors.slurm.telemetry import node_counters, usage_file_counters
from aicenter.runtime.files import LAUNCHER_LOG, PLAN_FILE, STATUS_FILE, parse_stamp, read_json, write_json_atomic
from aicenter.runtime.launcher import launcher_env

__all__ = ["JOB_FILE", "QUEUE_TTL_S", "SlurmExecutor"]

log = logging.getLogger(__name__)

JOB_FILE = "slurm.json"
"""In the run directory: the Slurm job id of the replica, written right after ``sbatch`` (a retried launch
waits for that job instead of submitting a second one)."""
QUEUE_TTL_S = 0.5
NODES_TTL_S = 0.5
_POLL_S = 0.05
_COMMAND_TIMEOUT_S = 30.0
# After USR2 (kill the command now) or scancel, the launcher needs a moment to reap and write its final record.
_KILL_WAIT_S = 5.0
# How long the reaper's srun waits for a CPU on the node before it tries an overlapping step instead.
_REAP_IMMEDIATE_S = 3
_RECENT_PORTS = 4096
_LOCAL_NAMES = {"localhost", socket.gethostname(), socket.getfqdn()}


class _QueueUnavailable(Exception):
    """``squeue`` failed (the controller is down or slow): nothing can be said about the jobs now."""


def _final(record: dict[str, Any]) -> bool:
    return record.get("state") == "exited"


def _port_range(text: str) -> tuple[int, int]:
    low, _, high = text.partition("-")
    first, last = int(low), int(high or low)
    if not 0 < first <= last < 65536:
        raise ValueError(f"the Slurm port range {text!r} is not FIRST-LAST like 20000-29999")
    return first, last


class SlurmExecutor:
    """Runs replicas as Slurm batch jobs on the nodes of one partition.

    Args:
        root: Base directory for plans whose ``run_dir`` is relative (on the shared jobs path); None requires
            absolute run dirs.
        partition: The platform's partition (``sbatch --partition``; ``nodes()`` lists its nodes); None: the
            cluster's default partition, and every node.
        slurm_conf: The ``slurm.conf`` the commands read (``SLURM_CONF``); None: Slurm's own lookup.
        bin_dir: Where ``sbatch``, ``squeue``, ``scancel``, ``srun``, ``sacct`` and ``scontrol`` are; None: PATH.
        python: The interpreter that runs the launcher on the nodes (with this install of aicenter at the same
            path); defaults to this server's.
        launch_timeout_s: How long ``launch`` waits for the launcher's first record, queueing included; a job
            still pending then is cancelled and the launch fails with Slurm's pending reason.
        sandbox: ``off``, ``bwrap`` or ``auto``, as ``LocalExecutor``'s; a sandbox shares the node's network
            (a job's replicas span nodes: there is no job-wide network namespace).
        sandbox_uid_base: As root, a sandboxed replica runs as uid and gid ``sandbox_uid_base + workspace id``.
        pids_max: The most processes and threads one replica may have (its cgroup's ``pids.max``); 0: no limit.
        cgroups: Let the launcher enforce the replica's limits in its own control group where the node allows.
        cgroup_parent: The control group that holds the replicas' groups; "" for the default.
        accounting: Ask ``sacct`` about a job no longer in the queue (was it a node failure?); ``auto`` when
            ``scontrol show config`` names an accounting storage.
        jobcomp_file: A ``jobcomp/filetxt`` file to read instead when there is no accounting; None: none.
        port_range: ``FIRST-LAST``, the ports ``allocate_ports`` hands out on nodes other than this host;
            default ``20000-29999`` (the server's setting ``AICENTER_SLURM_PORT_RANGE``).
        usage_interval_s: How often each replica's launcher writes its CPU and memory for ``sample``
            (``aicenter.executors.slurm.telemetry``); the server's ``AICENTER_METRICS_SAMPLE_INTERVAL_S``.
    """

    name = "slurm"

    def __init__(
        self,
        root: Path | None = None,
        *,
        partition: str | None = None,
        slurm_conf: Path | str | None = None,
        bin_dir: Path | str | None = None,
        python: str | None = None,
        launch_timeout_s: float = 60.0,
        sandbox: SandboxMode = "off",
        sandbox_uid_base: int = 200_000,
        pids_max: int = 4096,
        cgroups: bool = True,
        cgroup_parent: str = "",
        accounting: bool | Literal["auto"] = "auto",
        jobcomp_file: Path | str | None = None,
        port_range: str | None = None,
        usage_interval_s: float = 15.0,
    ) -> None:
        self.root = root
        self.partition = partition
        self.bin_dir = None if bin_dir is None else Path(bin_dir)
        self.python = python or sys.executable
        self.launch_timeout_s = launch_timeout_s
        self.sandbox = sandbox
        self.sandbox_uid_base = sandbox_uid_base
        self.pids_max = pids_max
        self.cgroups = cgroups
        self.cgroup_parent = cgroup_parent
        self.accounting = accounting
        self.jobcomp_file = None if jobcomp_file is None else Path(jobcomp_file)
        self.port_range = _port_range(port_range or "20000-29999")
        self.usage_interval_s = usage_interval_s
        self._env = dict(os.environ)
        if slurm_conf is not None:
            self._env["SLURM_CONF"] = str(slurm_conf)
        self._queue: dict[str, SlurmJob] = {}
        self._queue_at = -1e9
        self._queue_lock = asyncio.Lock()
        self._submitted: dict[str, float] = {}
        self._nodes: dict[str, SlurmNode] = {}
        self._nodes_at = -1e9
        self._nodes_lock = asyncio.Lock()
        self._accounting_on: bool | None = None if accounting == "auto" else bool(accounting)
        self._local = LocalExecutor(node_name="this-host")
        self._next_port: dict[str, int] = {}
        self._recent_ports: dict[str, deque[int]] = {}

    # -- Slurm commands --------------------------------------------------------------------------------------

    async def _run(
        self, command: str, *args: str, stdin: str | None = None, timeout_s: float = _COMMAND_TIMEOUT_S
    ) -> tuple[int, str, str]:
        """Run a Slurm command without blocking the loop: ``(exit status, stdout, stderr)``; 124 on timeout."""
        program = str(self.bin_dir / command) if self.bin_dir is not None else command
        try:
            proc = await asyncio.create_subprocess_exec(
                program,
                *args,
                stdin=asyncio.subprocess.DEVNULL if stdin is None else asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
            )
        except OSError as exc:
            return 127, "", f"cannot run {program}: {exc}"
        try:
            out, err = await asyncio.wait_for(proc.communicate(None if stdin is None else stdin.encode()), timeout_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
            return 124, "", f"{command} timed out after {timeout_s:g} s"
        return proc.returncode or 0, out.decode(errors="replace"), err.decode(errors="replace")

    async def _jobs(self, need: str | None = None) -> dict[str, SlurmJob]:
        """This user's jobs in the queue (ended ones too, for ``MinJobAge``), at most ``QUEUE_TTL_S`` old; read
        again at once when ``need`` was submitted after the last read.

        Raises:
            _QueueUnavailable: ``squeue`` failed.
        """
        async with self._queue_lock:
            started = time.monotonic()
            stale = started - self._queue_at >= QUEUE_TTL_S
            if need is not None and need not in self._queue and self._submitted.get(need, -1e9) >= self._queue_at:
                stale = True
            if stale:
                args = ["-h", "--me", "-t", "all", "-o", SQUEUE_FORMAT]
                if self.partition:
                    args += ["-p", self.partition]
                code, out, err = await self._run("squeue", *args)
                if code != 0:
                    raise _QueueUnavailable(err.strip() or f"squeue exited {code}")
                self._queue, self._queue_at = parse_squeue(out), started
                self._submitted = {k: t for k, t in self._submitted.items() if t > started - 60.0}
            return self._queue

    async def _job(self, job_id: str) -> SlurmJob | None:
        if not job_id:
            return None
        return (await self._jobs(job_id)).get(job_id)

    async def _ended_job(self, job_id: str) -> SlurmJob | None:
        """What accounting (or the jobcomp file) says of a job no longer in the queue; None if nothing does."""
        if not job_id:
            return None
        if self._accounting_on is None:
            code, out, _ = await self._run("scontrol", "show", "config")
            self._accounting_on = code == 0 and any(
                line.split("=", 1)[0].strip() == "AccountingStorageType" and "accounting_storage/none" not in line
                for line in out.splitlines()
            )
        if self._accounting_on:
            code, out, _ = await self._run(
                "sacct", "-n", "-P", "-X", "-j", job_id, "-o", "JobIDRaw,State,Reason,NodeList"
            )
            if code == 0 and (job := parse_sacct(out).get(job_id)) is not None:
                return job
        if self.jobcomp_file is not None:
            text = (await asyncio.to_thread(read_chunk, self.jobcomp_file, 0, 1 << 30)).decode(errors="replace")
            return parse_jobcomp(text, job_id)
        return None

    async def _slurm_nodes(self, max_age_s: float = NODES_TTL_S) -> dict[str, SlurmNode]:
        """Slurm's nodes by aicenter name (lower-cased), at most ``max_age_s`` old."""
        async with self._nodes_lock:
            started = time.monotonic()
            if started - self._nodes_at >= max_age_s:
                code, out, err = await self._run("scontrol", "show", "nodes", "--oneliner")
                if code != 0:
                    raise LaunchFailed(f"scontrol show nodes failed: {err.strip() or code}")
                self._nodes = {n.host.name.lower(): n for n in parse_nodes(out)}
                self._nodes_at = started
            return self._nodes

    async def _node(self, name: str) -> SlurmNode | None:
        """The Slurm node of aicenter node ``name``: the cached map, read again when the name is not in it."""
        nodes = await self._slurm_nodes(max_age_s=60.0)
        if name not in nodes:
            nodes = await self._slurm_nodes(max_age_s=0.0)
        return nodes.get(name)

    async def _scancel(self, job_id: str, *args: str) -> None:
        code, _, err = await self._run("scancel", *args, job_id)
        if code != 0:
            log.info("scancel %s %s: %s", " ".join(args), job_id, err.strip())
        self._queue_at = -1e9  # what it changed is read on the next look

    # -- launch ----------------------------------------------------------------------------------------------

    def _run_dir(self, run_dir: Path | str) -> Path:
        return resolve_run_dir(self.root, run_dir, self.name)

    def _handle(self, node: str, run_dir: Path, record: dict[str, Any], job_id: str) -> ReplicaHandle:
        return ReplicaHandle(
            executor=self.name,
            node=node,
            run_dir=str(run_dir),
            pid=int(record["launcher_pid"]),
            start_time=float(record["launcher_start_time"]),
            extra={"slurm_job_id": job_id},
        )

    @staticmethod
    def _submitted_job(run_dir: Path) -> str:
        return str((read_json(run_dir / JOB_FILE) or {}).get("job_id") or "")

    async def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        """Submit the replica's batch job and return once its launcher recorded the command's start.

        A run directory that already has a launcher record, or a submitted job, is adopted: a controller that
        crashed between ``launch`` and storing the handle retries without running the work twice.

        Raises:
            LaunchFailed: Unknown or down node, unusable run directory, ``sbatch`` refused the job, the job ended
                before the launcher started, or it was still pending (or starting) after ``launch_timeout_s``
                (it is then cancelled).
        """
        run_dir = self._run_dir(plan.run_dir)
        deadline = time.monotonic() + self.launch_timeout_s
        record = read_json(run_dir / STATUS_FILE)
        if record is not None and record.get("launcher_pid"):
            return self._handle(plan.node, run_dir, record, self._submitted_job(run_dir))
        job_id = self._submitted_job(run_dir)
        if not job_id:
            job_id = await self._submit(plan, run_dir)
        return await self._wait_started(plan.node, run_dir, job_id, deadline)

    async def _submit(self, plan: ReplicaPlan, run_dir: Path) -> str:
        node = await self._node(plan.node)
        if node is None:
            raise LaunchFailed(f"node {plan.node!r} is not a node of this Slurm cluster")
        if not node.up:
            raise LaunchFailed(f"node {plan.node!r} is {node.state} in Slurm: {node.reason or 'no reason given'}")
        try:
            spec, _ = await asyncio.to_thread(
                replica_sandbox, plan, run_dir, mode=self.sandbox, uid_base=self.sandbox_uid_base
            )
            plan_of_launcher = launcher_plan(
                plan,
                sandbox=None if spec is None else spec.to_json(),
                env={},
                pids_max=self.pids_max,
                cgroups=self.cgroups,
                cgroup_parent=self.cgroup_parent,
                usage_interval_s=self.usage_interval_s,
            )
            await asyncio.to_thread(write_plan, run_dir, plan_of_launcher)
        except OSError as exc:
            raise LaunchFailed(f"cannot prepare run directory {run_dir}: {exc}") from exc
        script = batch_script(
            [*launcher_argv(self.python), str(run_dir / PLAN_FILE)], launcher_env(dict(os.environ)), run_dir / JOB_FILE
        )
        args = sbatch_args(
            plan,
            run_dir=run_dir,
            slurm_node=node.name or node.host.name,
            partition=self.partition,
            gpu_type=gpu_gres_type(node.gres),
        )
        code, out, err = await self._run("sbatch", *args, stdin=script)
        if code != 0:
            raise LaunchFailed(f"sbatch refused the replica: {err.strip() or out.strip() or f'exit {code}'}")
        try:
            job_id = parse_job_id(out)
        except ValueError as exc:
            raise LaunchFailed(str(exc)) from exc
        self._submitted[job_id] = time.monotonic()
        await asyncio.to_thread(write_json_atomic, run_dir / JOB_FILE, {"job_id": job_id})
        return job_id

    async def _wait_started(self, node: str, run_dir: Path, job_id: str, deadline: float) -> ReplicaHandle:
        """Poll for the launcher's first record; fail when the job ended without one or the deadline passed."""
        job: SlurmJob | None = None
        while True:
            record = read_json(run_dir / STATUS_FILE)
            if record is not None and record.get("state") in ("running", "exited"):
                return self._handle(node, run_dir, record, job_id)
            with contextlib.suppress(_QueueUnavailable):
                job = await self._job(job_id)
            if job is not None and not job.active:
                record = read_json(run_dir / STATUS_FILE)
                if record is not None and record.get("state") in ("running", "exited"):
                    return self._handle(node, run_dir, record, job_id)
                tail = read_chunk(run_dir / LAUNCHER_LOG, 0, 1 << 20)[-2000:].decode(errors="replace").strip()
                raise LaunchFailed(
                    f"Slurm job {job_id} ended {job.state} ({job.reason}) before its launcher started: {tail}"
                )
            if time.monotonic() > deadline:
                await self._scancel(job_id)
                what = "unknown to squeue" if job is None else f"{job.state} ({job.reason or 'no reason'})"
                raise LaunchFailed(
                    f"Slurm job {job_id} was still {what} after {self.launch_timeout_s:g} s; cancelled it"
                )
            await asyncio.sleep(_POLL_S)

    # -- status and stop -------------------------------------------------------------------------------------

    @staticmethod
    def _record(handle: ReplicaHandle) -> dict[str, Any]:
        """The launcher's status record, or ``{}`` when there is none or it names another launcher than the
        handle (a stale or forged handle shares nothing with the run directory: nothing is signalled)."""
        record = launcher_record(handle)
        job_id = str(handle.extra.get("slurm_job_id") or "")
        return record if job_id == SlurmExecutor._submitted_job(Path(handle.run_dir)) else {}

    async def _node_lost(self, node: str) -> bool:
        with contextlib.suppress(LaunchFailed):
            found = (await self._slurm_nodes()).get(node)
            return found is not None and node_lost(found.state)
        return False

    async def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        """Exited per the launcher's final record; lost when its node failed (Slurm's ``NODE_FAIL``, a node
        DOWN or not responding) or its job ended without a final record; running while the job runs."""
        record = self._record(handle)
        started = parse_stamp(record.get("started_at"))
        if not record:
            return ReplicaStatus(ReplicaState.LOST, reason="launcher lost")
        # A stop's end ("stopped") may be Slurm's own kill of a failed node's jobs: Slurm has the last word.
        if _final(record) and record.get("reason") != "stopped":
            return exited_status(record)
        job_id = str(handle.extra.get("slurm_job_id") or "")
        try:
            job = await self._job(job_id)
        except _QueueUnavailable:
            return exited_status(record) if _final(record) else ReplicaStatus(ReplicaState.RUNNING, started_at=started)
        if job is not None and job.state == "NODE_FAIL":
            return ReplicaStatus(ReplicaState.LOST, reason=NODE_LOST_REASON, started_at=started)
        if _final(record):
            return exited_status(record)
        if job is not None and job.active:
            if await self._node_lost(handle.node):
                return ReplicaStatus(ReplicaState.LOST, reason=NODE_LOST_REASON, started_at=started)
            return ReplicaStatus(ReplicaState.RUNNING, started_at=started)
        record = self._record(handle)  # the launcher may have written its final record and ended meanwhile
        if _final(record):
            return exited_status(record)
        if job is None:
            job = await self._ended_job(job_id)
            if job is not None and job.state == "NODE_FAIL":
                return ReplicaStatus(ReplicaState.LOST, reason=NODE_LOST_REASON, started_at=started)
        return ReplicaStatus(ReplicaState.LOST, reason="launcher lost", started_at=started)

    async def _wait_ended(self, handle: ReplicaHandle, job_id: str, timeout_s: float) -> bool:
        """Wait until the launcher's final record, or its job's end; False after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if _final(self._record(handle)):
                return True
            try:
                job = await self._job(job_id)
            except _QueueUnavailable:
                job = SlurmJob(job_id, "UNKNOWN")
            if job is None or not job.active:
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(_POLL_S)

    async def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        """TERM to the launcher, up to ``grace_s``, then USR2 (kill the command), then cancel the job; then, if
        the launcher is gone without a final record, reap the orphaned command on its node. Idempotent; only the
        replica's own job and processes are ever signalled."""
        record = self._record(handle)
        if not record or _final(record):
            return
        job_id = str(handle.extra.get("slurm_job_id") or "")
        try:
            job = await self._job(job_id)
        except _QueueUnavailable:
            job = SlurmJob(job_id, "UNKNOWN")
        if job is not None and job.active and job.state != "UNKNOWN":
            await self._scancel(job_id, "--batch", "--signal=TERM")
            if not await self._wait_ended(handle, job_id, grace_s):
                await self._scancel(job_id, "--batch", "--signal=USR2")
                if not await self._wait_ended(handle, job_id, _KILL_WAIT_S):
                    await self._scancel(job_id)
                    await self._wait_ended(handle, job_id, _KILL_WAIT_S)
        if not _final(self._record(handle)):
            await self._reap(handle, grace_s)

    async def _reap(self, handle: ReplicaHandle, grace_s: float) -> None:
        """Run ``aicenter.executors.local.reap`` on the replica's node (module docstring)."""
        node = await self._node(handle.node) if handle.node else None
        slurm_node = node.name if node is not None and node.name else handle.node
        reaper = [*launcher_argv(self.python, "aicenter.executors.local.reap"), handle.run_dir, f"{grace_s:g}"]
        timeout_s = grace_s + _KILL_WAIT_S + _COMMAND_TIMEOUT_S
        common = ["--nodes=1", "--ntasks=1", f"--nodelist={slurm_node}", "--export=NONE", "--quiet"]
        partition = [f"--partition={self.partition}"] if self.partition else []
        code, _, err = await self._run(
            "srun",
            *common,
            *partition,
            "--job-name=aicenter-reap",
            "--cpus-per-task=1",
            "--mem=16M",
            f"--immediate={_REAP_IMMEDIATE_S}",
            *reaper,
            timeout_s=timeout_s,
        )
        if code == 0:
            return
        # Every CPU of the node is allocated: run as a step of a job running there, sharing its resources.
        with contextlib.suppress(_QueueUnavailable):
            jobs = await self._jobs()
            host = next((j for j in jobs.values() if j.state == "RUNNING" and j.nodes == slurm_node), None)
            if host is not None:
                code, _, err = await self._run(
                    "srun", *common, f"--jobid={host.job_id}", "--overlap", "--mem=0", *reaper, timeout_s=timeout_s
                )
        if code != 0:
            log.warning("could not reap replica %s on node %s: %s", handle.run_dir, slurm_node, err.strip())

    # -- logs ------------------------------------------------------------------------------------------------

    def logs(self, handle: ReplicaHandle, since: int = 0, *, follow: bool = False) -> AsyncIterator[bytes]:
        """Bytes of ``output.log`` from offset ``since``; with ``follow``, until the replica ended and all is read."""
        return replica_output(handle, since, follow=follow, status=self.status)

    # -- inventory -------------------------------------------------------------------------------------------

    async def allocate_ports(self, node: str, count: int) -> list[int]:
        """``count`` distinct ports for ``node``.

        On this host (a node whose address is loopback or this host's name) they are bound and released, as the
        local executor does. Another machine cannot be probed without a job there (``srun``: ~0.3 s, and a CPU),
        so its ports come from ``port_range``, cycled, skipping the last 4096 handed out for that node: the site
        keeps that range free of services on its nodes (the deployment guide says so).

        Raises:
            ValueError: ``node`` is not a Slurm node here, or ``count`` is negative.
        """
        if count < 0:
            raise ValueError("count must be >= 0")
        try:
            found = await self._node(node)
        except LaunchFailed as exc:
            raise ValueError(str(exc)) from exc
        if found is None:
            raise ValueError(f"node {node!r} is not a node of this Slurm cluster")
        address = found.host.address
        if address.startswith("127.") or address in _LOCAL_NAMES:
            return await self._local.allocate_ports(self._local.node_name, count)
        size = self.port_range[1] - self.port_range[0] + 1
        recent = self._recent_ports.setdefault(node, deque(maxlen=min(_RECENT_PORTS, size // 2)))
        ports, self._next_port[node] = cycle_ports(
            self._next_port.get(node, self.port_range[0]), self.port_range, set(recent), count
        )
        recent.extend(ports)
        return ports

    async def nodes(self) -> list[HostInfo]:
        """The usable nodes of the partition (up: not DOWN, DRAIN or NOT_RESPONDING), named lower-case."""
        nodes = await self._slurm_nodes(max_age_s=0.0)
        return [
            replace(n.host, name=name)
            for name, n in nodes.items()
            if n.up and (not self.partition or self.partition in n.partitions)
        ]

    async def sample(self, handles: Sequence[ReplicaHandle]) -> list[NodeCounters]:
        """Every usable node's counters: this host's read locally, the others' from ``scontrol`` and their
        replicas' ``usage.json`` (``aicenter.executors.slurm.telemetry`` says why). Slurm unreachable: none."""
        try:
            nodes = await self._slurm_nodes()
        except LaunchFailed as exc:
            log.info("no Slurm telemetry this time: %s", exc)
            return []
        out = []
        now = time.time()
        for name, node in nodes.items():
            if not node.up or (self.partition and self.partition not in node.partitions):
                continue
            mine = [h for h in handles if h.node == name]
            address = node.host.address
            if address.startswith("127.") or address in _LOCAL_NAMES:
                out.append(await asyncio.to_thread(sample_host, name, self.root, mine))
                continue
            replicas = await asyncio.to_thread(usage_file_counters, mine, now=now, interval_s=self.usage_interval_s)
            out.append(replace(node_counters(node, name, now), replicas=replicas))
        return out

    async def close(self) -> None:
        """Nothing to let go of: every call is a Slurm command of its own."""
