"""A real Ray cluster on this host for tests and benchmarks: one ``ray start --block`` process per node.

Every node is a ``ray start --block`` subprocess on its own loopback address (127.0.0.2 is the head, then .3,
.4, ...: Ray rewrites 127.0.0.1 to the machine's address, the others it keeps), started one after another (two
at once race for the session directory) and stopped by pid: SIGTERM, which makes ``ray start --block`` stop its
node's processes, then SIGKILL for whatever of its process tree is left. ``ray stop`` is never used: it stops
every Ray process of the machine, other sessions' too.

Nodes declare custom resources that stand for GPUs (``aicenter/nvidia-a100: 2``, the ``ray`` executor's
convention) and Ray labels (``rack: r1``). The head is started with a short health check (0.5 s x 4), so a
node whose raylet dies is marked dead within seconds instead of Ray's default 30 s.

Worker processes import ``aicenter`` from the nodes' environment: this process's, ``PYTHONPATH`` included.
:func:`ray_available` says whether Ray is installed, so that tests can skip with a reason.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from tests.support.waiting import free_port, wait_for

__all__ = ["DEFAULT_NODES", "RayCluster", "RayNodeSpec", "ray_available"]

HEAD_ENV = {
    # A dead node is noticed after period x threshold (2 s) instead of Ray's default 30 s.
    "RAY_health_check_period_ms": "500",
    "RAY_health_check_timeout_ms": "500",
    "RAY_health_check_failure_threshold": "4",
    "RAY_health_check_initial_delay_ms": "1000",
}
COMMON_ENV = {"RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}


@dataclass(frozen=True)
class RayNodeSpec:
    """One node of the test cluster.

    Attributes:
        ip: Its loopback address (127.0.0.2 and up); the first node of a cluster is the head.
        cpus: CPUs Ray offers there.
        resources: Custom resources, e.g. ``{"aicenter/nvidia-a100": 2}`` for two fake A100s.
        labels: Ray node labels, e.g. ``{"rack": "r1"}``.
    """

    ip: str
    cpus: int = 2
    resources: Mapping[str, float] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)


DEFAULT_NODES = (
    RayNodeSpec("127.0.0.2", cpus=2, resources={"aicenter/nvidia-a100": 4}, labels={"rack": "r1"}),
    RayNodeSpec("127.0.0.3", cpus=2, resources={"aicenter/nvidia-t4": 1}, labels={"rack": "r2", "leaf": "l1"}),
    RayNodeSpec("127.0.0.4", cpus=2, labels={"rack": "r2", "aicenter.io/node": "spare"}),
)


def ray_available() -> str | None:
    """None when a test cluster can start here, else why not (a pytest skip reason)."""
    if importlib.util.find_spec("ray") is None:
        return "ray is not installed: pip install 'aicenter[ray]'"
    if shutil.which("ray") is None:
        return "the ray command is not on PATH"
    return None


def _session(sid: int) -> list[psutil.Process]:
    """The live processes of session ``sid``."""
    members = []
    for pid in psutil.pids():
        with contextlib.suppress(OSError, psutil.Error):
            if pid != sid and os.getsid(pid) == sid:
                members.append(psutil.Process(pid))
    return members


@dataclass
class RayCluster:
    """Ray nodes on this host's loopback addresses, started here and stopped by pid.

    Attributes:
        nodes: The nodes; the first is the head.
        dir: Logs of the ``ray start`` processes and Ray's temp dir (a short path: Ray's socket paths must fit
            in 107 bytes); made by :meth:`start` and removed by :meth:`stop` when None is given.
    """

    nodes: Sequence[RayNodeSpec] = DEFAULT_NODES
    dir: Path | None = None
    port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _made_dir: bool = False

    def __enter__(self) -> RayCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def address(self) -> str:
        """The GCS address (``ip:port``) for ``ray.init`` and the ``ray`` executor."""
        return f"{self.nodes[0].ip}:{self.port}"

    def env(self, head: bool = False) -> dict[str, str]:
        return {**os.environ, **COMMON_ENV, **(HEAD_ENV if head else {})}

    def _argv(self, spec: RayNodeSpec, head: bool) -> list[str]:
        assert self.dir is not None
        ray = shutil.which("ray") or str(Path(sys.executable).parent / "ray")
        argv = [ray, "start", "--block", f"--node-ip-address={spec.ip}", f"--num-cpus={spec.cpus}"]
        # 80 MB of object store (Ray's minimum is 75 MB) rather than 30 % of the memory in /dev/shm per node.
        argv += ["--disable-usage-stats", f"--temp-dir={self.dir / 'tmp'}", "--object-store-memory=80000000"]
        if head:
            # Every port a head would take at a fixed default is chosen free: clusters of other tests or sessions
            # on this host (even on other loopback addresses) must not collide (the client server's 10001).
            argv += ["--head", f"--port={self.port}", "--include-dashboard=false"]
            argv += [f"--ray-client-server-port={free_port()}"]
        else:
            argv += [f"--address={self.address}"]
        if spec.resources:
            argv.append(f"--resources={json.dumps(dict(spec.resources))}")
        if spec.labels:
            argv.append(f"--labels={json.dumps(dict(spec.labels))}")
        return argv

    def start_node(self, spec: RayNodeSpec, timeout: float = 60) -> None:
        """Start one node (again, after :meth:`kill_raylet`) and wait until its ``ray start`` says it runs."""
        assert self.dir is not None
        head = spec is self.nodes[0]
        log = self.dir / f"node-{spec.ip}.log"
        with log.open("ab") as out:
            offset = out.tell()
            proc = subprocess.Popen(
                self._argv(spec, head), env=self.env(head), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[spec.ip] = proc

        def started() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start for {spec.ip} exited with {proc.returncode}:\n{self.logs()}")
            with log.open("rb") as f:
                f.seek(offset)
                return b"Ray runtime started" in f.read()

        wait_for(started, f"the Ray node {spec.ip} to start", timeout)

    def start(self, timeout: float = 120) -> None:
        """Start the head, then every other node one by one; stops what it started if that fails."""
        if self.dir is None:
            self.dir = Path(tempfile.mkdtemp(prefix="aicray-", dir="/tmp"))  # short: socket paths
            self._made_dir = True
        self.port = self.port or free_port()
        try:
            for spec in self.nodes:
                self.start_node(spec, timeout)
        except BaseException:
            self.stop()
            raise

    def logs(self) -> str:
        """The tail of every ``ray start`` output, for a failure message."""
        assert self.dir is not None
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}\n" for p in sorted(self.dir.glob("*.log"))
        )

    def raylet_pid(self, ip: str) -> int:
        """The pid of the raylet of node ``ip`` (a child of that node's ``ray start``)."""
        for child in psutil.Process(self.procs[ip].pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if child.name() == "raylet":
                    return child.pid
        raise LookupError(f"no raylet under the ray start of {ip}")

    def kill_raylet(self, ip: str) -> None:
        """``kill -9`` node ``ip``'s raylet: the node dies as if its machine had gone."""
        os.kill(self.raylet_pid(ip), signal.SIGKILL)

    def stop_node(self, ip: str, timeout: float = 20) -> None:
        """SIGTERM the node's ``ray start``, then SIGKILL what is left of its session.

        Every process of a node (raylet, agents, workers) stays in the session ``ray start`` was started in
        (its pid), also once ``ray start`` itself exited after a :meth:`kill_raylet`: that finds them.
        """
        proc = self.procs.pop(ip, None)
        if proc is None:
            return
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        members = _session(proc.pid)
        for member in members:
            with contextlib.suppress(psutil.Error):
                member.terminate()
        _gone, alive = psutil.wait_procs(members, timeout=5)
        for member in alive:
            with contextlib.suppress(psutil.Error):
                member.kill()

    def stop(self) -> None:
        """Stop every node (workers first, by pid); remove the directory if :meth:`start` made it."""
        for spec in reversed(self.nodes):
            self.stop_node(spec.ip)
        if self._made_dir and self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self._made_dir = False

    def ray_nodes(self) -> list[dict[str, Any]]:
        """``ray.nodes()`` of this cluster (connects this process to it once, in namespace ``aicenter``)."""
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, namespace="aicenter", logging_level="WARNING", log_to_driver=False)
        nodes: list[dict[str, Any]] = ray.nodes()
        return nodes
