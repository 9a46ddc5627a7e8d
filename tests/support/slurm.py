"""A real Slurm cluster on this host for tests and benchmarks: munged, slurmctld and one slurmd per node.

munged runs on its own socket with a fresh key unless a system munged already runs (then its socket is used).
The slurm.conf is generated in a temp directory; slurmctld listens on 127.0.0.1 and every node is a
``slurmd -N NAME`` on this host with its own port (Debian's slurmd is built with multiple-slurmd support).
Nodes may declare fake GPUs: character devices made with mknod (major 195, as NVIDIA's) in the cluster's
directory, declared in gres.conf, so that Slurm reports and allocates them like real ones. Every process is
started here and stopped by pid; :meth:`SlurmCluster.stop` removes the directory if it made it, nothing else.

Needs root (the daemons run as root, mknod) and Debian's ``slurm-wlm`` and ``munge``; :func:`slurm_available`
says whether they are there so that tests can skip with a reason.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.support.waiting import free_port, wait_for

__all__ = ["DEFAULT_NODES", "NodeSpec", "SlurmCluster", "slurm_available"]

DAEMONS = ("/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd")
NVIDIA_MAJOR = 195


@dataclass(frozen=True)
class NodeSpec:
    """One node of the test cluster.

    Attributes:
        name: Slurm node name (also the slurmd's ``-N``).
        cpus: CPUs Slurm believes the node has (may exceed this host's: the config overrides the hardware).
        memory_mib: RealMemory, MiB.
        gpus: ``(type, count)`` pairs of fake GPUs; type ``""`` declares untyped ones (``gpu:<count>``).
        features: Slurm node features (our labels).
    """

    name: str
    cpus: int = 2
    memory_mib: int = 1024
    gpus: tuple[tuple[str, int], ...] = ()
    features: tuple[str, ...] = ()


DEFAULT_NODES = (
    NodeSpec("node1", cpus=4, memory_mib=2048, gpus=(("a100", 2),), features=("rack_r1", "ib")),
    NodeSpec("node2", cpus=2, memory_mib=1024, gpus=(("t4", 1),), features=("rack_r2",)),
    NodeSpec("node3", cpus=2, memory_mib=1024),
)


def slurm_available() -> str | None:
    """None when a test cluster can start here, else why not (a pytest skip reason)."""
    missing = [d for d in DAEMONS if not os.access(d, os.X_OK)]
    if missing:
        return f"Slurm/munge not installed ({', '.join(missing)} missing): apt-get install slurm-wlm munge"
    if os.geteuid() != 0:
        return "the Slurm test cluster runs its daemons as root"
    return None


def _children(proc: psutil.Process) -> list[psutil.Process]:
    try:
        return list(proc.children(recursive=True))
    except psutil.Error:
        return []


@dataclass
class SlurmCluster:
    """munged (unless one runs), slurmctld and one slurmd per node on this host, started here and stopped by pid.

    Attributes:
        dir: Where the configuration, state, logs and fake devices live (created by :meth:`start`).
        nodes: The nodes to run.
        partition: The one partition's name (holds every node, default).
        partition_options: Extra ``PartitionName`` options, e.g. ``OverSubscribe=FORCE:100``.
        scheduler_parameters: ``SchedulerParameters``; the default schedules a batch job as soon as it is
            submitted (Slurm may otherwise hold it up to 3 s to batch scheduling); empty for Slurm's defaults.
    """

    dir: Path
    nodes: Sequence[NodeSpec] = DEFAULT_NODES
    partition: str = "main"
    partition_options: str = ""
    scheduler_parameters: str = "batch_sched_delay=0"
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    created: bool = False

    def __enter__(self) -> SlurmCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def conf(self) -> Path:
        return self.dir / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment Slurm's commands need to talk to this cluster."""
        return dict(os.environ, SLURM_CONF=str(self.conf))

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a Slurm command (``scontrol``, ``sinfo``, ``sbatch`` ...) against this cluster."""
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, check=check)

    def _munge_socket(self) -> str:
        system = Path("/run/munge/munge.socket.2")
        running = subprocess.run(["pgrep", "-x", "munged"], capture_output=True, check=False).returncode == 0
        if running and system.exists():
            return str(system)
        key = self.dir / "munge.key"
        keygen = shutil.which("mungekey") or "/usr/sbin/mungekey"
        subprocess.run([keygen, "--create", "--keyfile", str(key)], check=True, capture_output=True)
        key.chmod(0o400)
        sock = self.dir / "munge.socket"
        self._spawn(
            [
                "/usr/sbin/munged",
                "--foreground",
                "--force",
                f"--socket={sock}",
                f"--key-file={key}",
                f"--pid-file={self.dir / 'munged.pid'}",
                f"--log-file={self.dir / 'munged.log'}",
                f"--seed-file={self.dir / 'munged.seed'}",
            ],
            "munged",
        )
        wait_for(sock.exists, "munged socket", 10)
        return str(sock)

    def _spawn(self, argv: list[str], log: str) -> None:
        out = (self.dir / f"{log}.out").open("wb")
        with out:
            self.procs.append(subprocess.Popen(argv, env=self.env, stdout=out, stderr=subprocess.STDOUT))

    def _fake_gpus(self) -> str:
        """Make the nodes' fake GPU devices; return gres.conf's lines."""
        dev = self.dir / "dev"
        dev.mkdir()
        lines = ["AutoDetect=off"]
        minor = 0
        for node in self.nodes:
            for gpu_type, count in node.gpus:
                first = minor
                for _ in range(count):
                    os.mknod(dev / f"nvidia{minor}", 0o666 | 0o020000, os.makedev(NVIDIA_MAJOR, minor))
                    minor += 1
                files = f"{dev}/nvidia[{first}-{minor - 1}]" if count > 1 else f"{dev}/nvidia{first}"
                typed = f" Type={gpu_type}" if gpu_type else ""
                lines.append(f"NodeName={node.name} Name=gpu{typed} File={files}")
        return "\n".join(lines) + "\n"

    def _slurm_conf(self, munge_socket: str) -> str:
        d = self.dir
        lines = [
            "ClusterName=aicentertest",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={free_port()}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={munge_socket}",
            "CredType=cred/munge",
            f"StateSaveLocation={d}/state",
            f"SlurmdSpoolDir={d}/spool/%n",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd-%n.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd-%n.log",
            f"PlugStackConfig={d}/plugstack.conf",
            # The nodes' CPUs and memory are what we declare, not this host's: several nodes share its cores.
            "SlurmdParameters=config_overrides",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_CPU",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "SchedulerType=sched/backfill",
            *([f"SchedulerParameters={self.scheduler_parameters}"] if self.scheduler_parameters else []),
            "MpiDefault=none",
            "ReturnToService=2",
            "MaxJobCount=100000",
            "GresTypes=gpu",
        ]
        for node in self.nodes:
            gres = ",".join(f"gpu:{t}:{n}" if t else f"gpu:{n}" for t, n in node.gpus)
            lines.append(
                f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={free_port()}"
                f" CPUs={node.cpus} RealMemory={node.memory_mib}"
                + (f" Gres={gres}" if gres else "")
                + (f" Feature={','.join(node.features)}" if node.features else "")
                + " State=UNKNOWN"
            )
        names = ",".join(n.name for n in self.nodes)
        partition = f"PartitionName={self.partition} Nodes={names} Default=YES MaxTime=INFINITE State=UP"
        lines.append(f"{partition} {self.partition_options}".rstrip())
        return "\n".join(lines) + "\n"

    def start(self, timeout: float = 60) -> None:
        """Start the daemons and wait until every node is idle; stops what it started if that fails."""
        self.created = not self.dir.exists()
        self.dir.mkdir(parents=True, exist_ok=True)
        for sub in ["state", *(f"spool/{n.name}" for n in self.nodes)]:
            (self.dir / sub).mkdir(parents=True, exist_ok=True)
        (self.dir / "plugstack.conf").write_text("")
        try:
            (self.dir / "gres.conf").write_text(self._fake_gpus())
            self.conf.write_text(self._slurm_conf(self._munge_socket()))
            self._spawn(["/usr/sbin/slurmctld", "-D", "-c", "-f", str(self.conf)], "slurmctld")
            for node in self.nodes:
                self._spawn(["/usr/sbin/slurmd", "-D", "-N", node.name, "-f", str(self.conf)], f"slurmd-{node.name}")
            wait_for(self._nodes_idle, "the Slurm nodes to be idle", timeout)
        except BaseException:
            self.stop()
            raise

    def logs(self) -> str:
        """The tail of every daemon's log, for a failure message."""
        return "".join(
            f"--- {p.name}\n{p.read_text(errors='replace')[-2000:]}\n"
            for p in sorted(self.dir.glob("*.out")) + sorted(self.dir.glob("*.log"))
        )

    def _nodes_idle(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                raise RuntimeError(f"{proc.args!r} exited with {proc.returncode}:\n{self.logs()}")
        result = self.run("sinfo", "-h", "-N", "-o", "%N %t", check=False)
        states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
        return result.returncode == 0 and all(states.get(n.name) in ("idle", "mix", "alloc") for n in self.nodes)

    def kill_node(self, name: str) -> None:
        """Kill node ``name`` as a crashed host dies: its slurmd and every process of the jobs on it (their
        slurmstepd and all they started) get SIGKILL, then the node is set DOWN, as slurmctld does once the node
        missed ``SlurmdTimeout`` (minutes by default); without its slurmd it cannot come back by itself."""
        jobs = self.run("squeue", "-h", "-w", name, "-o", "%A", check=False).stdout.split()
        for proc in self.procs:
            if proc.args[-4:-2] == ["-N", name] and proc.poll() is None:
                proc.kill()
                proc.wait()
        steps = [
            p
            for p in psutil.process_iter(["cmdline"])
            if any(f"[{job}." in " ".join(p.info["cmdline"] or []) for job in jobs)
        ]
        doomed = [*steps, *(child for step in steps for child in _children(step))]
        for proc in doomed:
            with contextlib.suppress(psutil.Error):
                proc.kill()
        psutil.wait_procs(doomed, timeout=10)
        self.run("scontrol", "update", f"nodename={name}", "state=down", "reason=killed-by-test")

    def _queue_empty(self) -> bool:
        result = self.run("squeue", "-h", check=False)
        return result.returncode != 0 or not result.stdout.strip()

    def stop(self) -> None:
        """Stop every daemon started here (by pid), jobs first; remove the directory if :meth:`start` made it."""
        # Jobs first: a batch step (slurmstepd) whose slurmd is gone waits forever to report its end.
        if any(p.poll() is None for p in self.procs) and self.conf.exists():
            try:
                wait_for(self._queue_empty, "the queue to drain", 60)
            except RuntimeError:
                self.run("scancel", "--full", "--user", "root", check=False)
        for proc in reversed(self.procs):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self.procs.clear()
        if self.created:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.created = False
