"""The launcher: one small supervising process per replica, ``python -m aicenter.runtime.launcher PLAN``.

It runs detached from the server (own session, stdin from /dev/null, its messages in ``launcher.log``), so the
server may die, even by ``kill -9``, while the replica keeps running; the restarted server re-adopts it from the
run directory (see ``aicenter.runtime.files``). The launcher:

1. starts the command with ``/bin/sh -c`` in a new process group, with a clean environment (the server's own
   variables, such as its database URL or secret key, never reach the job), CPU affinity and
   ``CUDA_VISIBLE_DEVICES``;
2. copies stdout and stderr into ``output.log`` line by line, each prefixed by a UTC timestamp, written as it
   comes (one ``write`` per batch of lines, so followers see it at once);
3. enforces the replica's limits: where the host lets it make a control group (``aicenter.runtime.cgroups``),
   the command joins the replica's group before it execs, and the kernel caps its memory, CPU quota and
   process count (a kernel OOM kill is reason ``oom``); elsewhere it watches the resident memory of the whole
   process tree every 0.5 s and kills the group when it exceeds the limit (reason ``oom``). That is a
   sampling watchdog: a burst between two samples can go past the limit briefly. ``status.json`` records
   which (``limits``: ``cgroup-v2``, ``cgroup-v1``, ``watchdog`` or null), and ``launcher.log`` says why;
4. forwards SIGTERM/SIGINT to the command's process group (reason ``stopped``), so a job can checkpoint;
   SIGUSR2 kills the command's process group (and control group) at once, reason ``stopped`` too: the forced
   end of a stop where the executor can signal only the launcher (Slurm's ``scancel --batch`` reaches the batch
   script, which execs the launcher, and nothing else);
5. when the command exits, kills what is left of its process group and of its control group (which holds
   also what left the process group with ``setsid``), drains the output, removes the control group and
   writes the final ``status.json`` (exit code, negative for a signal; reason; finished_at), then exits 0;
6. with ``usage_interval_s`` in its plan, writes the replica's CPU and memory into ``usage.json`` that often
   (``aicenter.runtime.usage``): the sampler's source where the server cannot read the node's ``/proc``.

With a sandbox in the plan (``aicenter.runtime.sandbox``), the command runs as ``bwrap ... /bin/sh -c`` in the
same process group. bwrap's outer process dies of a SIGTERM (it forwards nothing), so a stop is sent to every
other member of the group (the command's tree; bwrap's init inside ignores it); and bwrap reports a command
killed by signal n as exit code 128+n, which the launcher records as -n, like an unsandboxed command's.

A sandbox in its job's network namespace (``aicenter.runtime.netns``) comes with two inherited fds: a socket
listening inside the namespace (``--api-fd``), which the launcher relays to the API (``aicenter.runtime.relay``)
for as long as it runs, and a share of the namespace (``--netns-fd``), both kept by
``aicenter.runtime.replica_network``. When the command has ended, the relay
stops accepting and finishes its open connections, the share is dropped, and the namespace is removed if this
was the last replica of the job on the node.

``--anchor PID:START_TIME`` ties the replica to another process: a thread checks every ``ANCHOR_CHECK_S`` that it
lives and, once it is gone, kills the command (group, sandbox, control group) and records reason ``node lost``.
The ``ray`` executor anchors a replica to its actor: when the node dies, Ray kills the actor but not the detached
launcher, whose command would run on unsupervised on devices given to others. Without it nothing changes.

Start-up time is the job's latency (and, with 200 replicas starting at once on 2 cores, CPU the API and the
controllers need): the executor runs it with ``python -S -E`` and this module imports only what the first
output line needs. ``psutil`` (~16 ms of imports) is loaded by the memory watchdog's thread, after the command
started; ``logging`` (~12 ms) is replaced by ``_log``. Process start times are read from ``/proc`` with
psutil's own formula, so the executor's psutil-based identity checks agree to the bit.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

from aicenter.runtime.cgroups import Limits, ReplicaGroup, group_name, layouts
from aicenter.runtime.childwait import wait_handling_signals
from aicenter.runtime.fds import close_inherited
from aicenter.runtime.files import (
    LOCK_FILE,
    OUTPUT_FILE,
    STATUS_FILE,
    LauncherPlan,
    read_json,
    utc_stamp,
    write_json_atomic,
)
from aicenter.runtime.replica_network import ReplicaNetwork

__all__ = ["SECRET_VARIABLES", "child_env", "create_time", "launcher_env", "main"]

# Variables of the launcher's own environment a job may see; everything else comes from the plan. The server's
# environment holds secrets (database URL, secret key, tokens) that must not reach user code.
INHERITED_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
# Plan variables that are credentials: the launcher reads them and rewrites plan.json without them, so the
# token lives on only in the replica's environment, not in a file at rest (a service replica's serve token also
# in the sandbox's ``publish_token``, which the launcher's relay keeps in memory).
SECRET_VARIABLES = ("AICENTER_TOKEN", "AICENTER_NOTEBOOK_TOKEN", "AICENTER_SERVE_TOKEN")
MEMORY_SAMPLE_S = 0.5
# A line longer than this without a newline (a progress bar redrawn with \r) is written out as it is, so one
# endless line cannot hold the launcher's memory.
MAX_PENDING_LINE = 64 * 1024
READ_CHUNK = 64 * 1024
# After the command exited and its group was killed, the pipes close at once unless a process that left the
# group (setsid) still holds them; the launcher does not wait longer than this for such a straggler.
DRAIN_TIMEOUT_S = 10.0
ANCHOR_CHECK_S = 0.5  # ``--anchor``: the command outlives its anchor by at most this
START_TIME_TOLERANCE_S = 0.05  # clock ticks are 1/100 s: the executors compare start times so too
ANCHOR_LOST_REASON = "node lost"


def _log(level: str, message: str) -> None:
    """One line in ``launcher.log`` (our stderr): the format ``logging`` gave, without its import cost."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    sys.stderr.write(f"{stamp} launcher[{os.getpid()}] {level} {message}\n")
    sys.stderr.flush()


def create_time(pid: int) -> float | None:
    """When ``pid`` started, in epoch seconds, exactly as ``psutil.Process(pid).create_time()`` computes it on
    Linux (start ticks / CLK_TCK + the boot time from /proc/stat); None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        with open("/proc/stat", "rb") as f:
            btime = next(float(line.split()[1]) for line in f if line.startswith(b"btime"))
    except (OSError, StopIteration, ValueError, IndexError):
        return _psutil_create_time(pid)
    # Fields after the command name (which may hold spaces and parentheses); starttime is field 22 overall.
    fields = stat[stat.rfind(b")") + 2 :].split()
    return float(fields[19]) / os.sysconf("SC_CLK_TCK") + btime


def _psutil_create_time(pid: int) -> float | None:
    """Elsewhere than Linux: psutil (slower to import, but it knows the platform)."""
    import psutil  # lazy: see the module docstring

    try:
        return float(psutil.Process(pid).create_time())
    except psutil.Error:
        return None


def launcher_env(environ: dict[str, str]) -> dict[str, str]:
    """The environment the executor starts the launcher with: ``INHERITED_VARIABLES`` of the server's, no more.

    The launcher runs outside any sandbox as long as the replica does, and anything of the job (a ``ps e``, a
    read of ``/proc/$PPID/environ``) can see its environment, so the server's secrets never enter it.
    """
    return {k: environ[k] for k in INHERITED_VARIABLES if k in environ}


def _drop_secrets(plan_path: Path, data: dict[str, Any]) -> None:
    """Rewrite the plan without ``SECRET_VARIABLES`` once they are read (nothing reads the plan again)."""
    env = data.get("env") or {}
    sandbox = data.get("sandbox") or {}
    if any(k in env for k in SECRET_VARIABLES) or sandbox.get("publish_token"):
        kept = {k: v for k, v in env.items() if k not in SECRET_VARIABLES}
        rewritten = {**data, "env": kept}
        if sandbox:
            rewritten["sandbox"] = {**sandbox, "publish_token": None}
        try:
            write_json_atomic(plan_path, rewritten, fsync=False)
        except OSError as exc:  # the plan stays 0600 in a 0700 directory; not worth failing the replica
            _log("WARNING", f"cannot rewrite {plan_path} without its token: {exc}")


def child_env(plan: LauncherPlan, run_dir: Path, inherited: dict[str, str]) -> dict[str, str]:
    """The command's environment: a few inherited basics, the plan's variables, then the launcher's own.

    ``CUDA_VISIBLE_DEVICES`` is always set, to ``""`` when the replica has no devices, so a CPU job never
    grabs a GPU the scheduler gave to someone else. A sandboxed command gets ``HOME=/tmp`` (its private tmpfs).
    """
    env = {k: inherited[k] for k in INHERITED_VARIABLES if k in inherited}
    if plan.sandbox is not None:
        # The server's home and temporary dir are not in the sandbox; its private /tmp is.
        env.pop("TMPDIR", None)
        env["HOME"] = "/tmp"  # noqa: S108 - the sandbox's own tmpfs, not the host's /tmp
    env.update(plan.env)
    path = env.get("PATH") or DEFAULT_PATH
    if plan.python_bin:
        path = f"{plan.python_bin}{os.pathsep}{path}"
    env["PATH"] = path
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in plan.devices)
    env["AICENTER_RUN_DIR"] = str(run_dir)
    return env


class _Output:
    """``output.log``: timestamped lines from several pumps, each batch in one ``write`` under a lock."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._lock = threading.Lock()

    def write_lines(self, lines: Sequence[bytes]) -> None:
        prefix = utc_stamp().encode() + b" "
        data = b"".join(prefix + line + b"\n" for line in lines)
        with self._lock:
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        os.close(self._fd)


def _pump(stream: IO[bytes], output: _Output) -> None:
    """Copy one pipe into the output, keeping a partial line until its newline (or EOF, or the size cap)."""
    fd = stream.fileno()
    pending = b""
    while True:
        try:
            data = os.read(fd, READ_CHUNK)
        except OSError:
            break
        if not data:
            break
        *lines, pending = (pending + data).split(b"\n")
        if len(pending) > MAX_PENDING_LINE:
            lines.append(pending)
            pending = b""
        if lines:
            output.write_lines(lines)
    if pending:
        output.write_lines([pending])


def _tree_rss(pid: int) -> int:
    """Resident memory of a process and all its descendants; 0 once it is gone."""
    import psutil  # lazy: the watchdog thread imports it (module docstring)

    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    total = 0
    for proc in procs:
        try:
            total += proc.memory_info().rss
        except psutil.Error:  # exited between listing and reading
            continue
    return total


def _kill_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _command_argv(plan: LauncherPlan) -> list[str]:
    """``/bin/sh -c COMMAND``, inside bwrap when the plan has a sandbox."""
    argv = ["/bin/sh", "-c", plan.command]
    if plan.sandbox is None:
        return argv
    from aicenter.runtime.sandbox import SandboxSpec, bwrap_argv  # only sandboxed launches pay its import

    return bwrap_argv(SandboxSpec.from_json(plan.sandbox), argv)


class _Supervisor:
    """One replica's command, its output pumps, its memory watchdog and its status record."""

    def __init__(
        self,
        plan: LauncherPlan,
        run_dir: Path,
        ready_fd: int | None = None,
        *,
        api_fd: int | None = None,
        netns_fd: int | None = None,
        anchor: tuple[int, float] | None = None,
    ) -> None:
        self.plan = plan
        self.anchor = anchor
        self.anchor_lost = False
        self.run_dir = run_dir
        self.network = ReplicaNetwork(plan.sandbox, api_fd, netns_fd, log=_log)
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_signal: int | None = None
        self.kill_requested = False
        self.oom = False
        self.group: ReplicaGroup | None = None
        self.finished = threading.Event()
        self.ready_fd = ready_fd
        self.record: dict[str, Any] = {
            "state": "starting",
            "launcher_pid": os.getpid(),
            "launcher_start_time": create_time(os.getpid()),
            "child_pid": None,
            "child_start_time": None,
            "started_at": None,
            "exit_code": None,
            "reason": None,
            "finished_at": None,
            "limits": None,
        }

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: remember it and pass it on to the command's group (the job may checkpoint)."""
        _log("INFO", f"received signal {signum}, forwarding to the command")
        self.stop_signal = signum
        if self.child is not None and self.child.returncode is None:
            self._forward(signum)

    def on_kill(self, signum: int, _frame: FrameType | None) -> None:
        """SIGUSR2: the stop's grace is over; kill the command's groups now (module docstring, point 4)."""
        _log("INFO", f"received signal {signum}, killing the command")
        if self.stop_signal is None:
            self.stop_signal = signum
        self.kill_requested = True
        if self.child is not None and self.child.returncode is None:
            self._kill()

    def _kill(self) -> None:
        assert self.child is not None
        _kill_group(self.child.pid, signal.SIGKILL)
        if self.group is not None:
            self.group.kill()

    def _forward(self, signum: int) -> None:
        assert self.child is not None
        if self.plan.sandbox is None:
            _kill_group(self.child.pid, signum)
        else:
            from aicenter.runtime.sandbox import signal_sandbox  # imported already by _command_argv

            signal_sandbox(self.child.pid, signum)

    def _write(self, **changes: Any) -> None:
        self.record.update(changes)
        write_json_atomic(self.run_dir / STATUS_FILE, self.record)
        self._signal_ready()

    def _signal_ready(self) -> None:
        """Tell the waiting executor that ``status.json`` holds a record (it reads the file, not the pipe)."""
        if self.ready_fd is None:
            return
        fd, self.ready_fd = self.ready_fd, None
        with contextlib.suppress(OSError):  # the executor gave up waiting: the record is what counts
            os.write(fd, b"1")
        with contextlib.suppress(OSError):
            os.close(fd)

    def _finish(self, exit_code: int | None, reason: str | None) -> None:
        self._write(state="exited", exit_code=exit_code, reason=reason, finished_at=utc_stamp())
        _log("INFO", f"finished: exit code {exit_code}, reason {reason}")

    def _watch_memory(self, pid: int) -> None:
        limit = self.plan.memory_bytes
        while not self.finished.wait(MEMORY_SAMPLE_S):
            rss = _tree_rss(pid)
            if rss > limit:
                _log("WARNING", f"memory {rss} bytes over the limit of {limit} bytes: killing the process group")
                self.oom = True
                _kill_group(pid, signal.SIGKILL)
                return

    def _write_usage(self, pid: int) -> None:
        """Every ``usage_interval_s``: the replica's usage into ``usage.json`` (for Slurm's sampler)."""
        from aicenter.runtime.usage import USAGE_FILE, replica_usage  # lazy, as psutil: after the start

        dirs = {} if self.group is None else dict(self.group.dirs)
        while True:
            found = replica_usage(dirs, pid)
            if found is not None:
                with contextlib.suppress(OSError):  # a full disk: the next write may succeed
                    write_json_atomic(
                        self.run_dir / USAGE_FILE,
                        {
                            "at": time.time(),
                            "cpu_seconds": found.cpu_seconds,
                            "memory_bytes": found.memory_bytes,
                            "source": found.source,
                        },
                    )
            if self.finished.wait(self.plan.usage_interval_s):
                return

    def _watch_anchor(self, child: int, pid: int, start_time: float) -> None:
        """Kill the command's group (the sandbox's too) once the anchor is gone (module docstring: ``--anchor``);
        what left the group (setsid) dies with the control group after the wait, as after any exit."""
        while not self.finished.wait(ANCHOR_CHECK_S):
            if abs((create_time(pid) or 0.0) - start_time) > START_TIME_TOLERANCE_S:
                _log("WARNING", f"anchor process {pid} is gone: killing the command")
                self.anchor_lost = True
                _kill_group(child, signal.SIGKILL)
                return

    def _make_group(self) -> None:
        """The replica's control group with its limits, when the plan wants one and the host allows it."""
        plan = self.plan
        limits = Limits(plan.memory_bytes, plan.cpu_milli, plan.pids_max)
        usable, reasons = layouts(limits, plan.cgroup_parent) if plan.cgroups else ([], ["off in the plan"])
        name = group_name(plan.label, os.getpid())
        for layout in usable:
            try:
                self.group = ReplicaGroup.create(layout, name, limits)
                break
            except OSError as exc:
                reasons.append(f"{layout.mechanism}: {exc}")
        if self.group is not None:
            self.record["limits"] = self.group.mechanism
            # Where the executor finds the group when this launcher is gone (killed): a stop then ends it all.
            self.record["cgroups"] = dict(self.group.dirs)
            _log("INFO", f"limits {limits._asdict()} enforced by {self.group.describe()}")
        elif plan.memory_bytes > 0:
            self.record["limits"] = "watchdog"
            _log("INFO", f"memory limit {plan.memory_bytes} enforced by the watchdog; no cgroup: {'; '.join(reasons)}")

    def release_group(self) -> None:
        """Kill what is left in the control group and remove it (the command has exited)."""
        if self.group is not None and not self.group.remove():
            _log("WARNING", f"could not remove {self.group.describe()}: {self.group.pids()} still in it")

    def run(self) -> int:
        plan = self.plan
        try:
            if plan.cpus:
                os.sched_setaffinity(0, plan.cpus)  # inherited by the command and everything it starts
            output = _Output(self.run_dir / OUTPUT_FILE)
            if problem := self.network.bind_published():
                raise OSError(problem)
        except OSError as exc:
            self._finish(None, f"launch failed: {exc}")
            self.network.close()
            return 0
        self._make_group()
        group = self.group
        try:
            self.child = subprocess.Popen(
                _command_argv(plan),
                cwd=plan.workdir,
                env=child_env(plan, self.run_dir, dict(os.environ)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,
                close_fds=True,
                # The command joins the group between fork and exec: nothing it starts runs outside it. The
                # launcher has no other thread yet, which is what makes a preexec_fn safe.
                preexec_fn=None if group is None else group.enter,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            output.close()
            self.release_group()
            self._finish(None, f"launch failed: {exc}")
            self.network.close()
            return 0
        child = self.child
        # After the fork, so that the preexec_fn above runs while the launcher has no other thread. The socket
        # listens already: a request the job makes before the relay accepts waits in its backlog.
        self.network.start()
        if group is not None:
            group.close_files()
        if self.kill_requested:  # a stop that arrived while the command was being started
            self._kill()
        elif self.stop_signal is not None:
            self._forward(self.stop_signal)
        started_at = utc_stamp()
        assert child.stdout is not None
        assert child.stderr is not None
        # The pumps start before the status record is written (an fsync: 1-30 ms on a busy disk), so the first
        # output line is copied and stamped as soon as the command prints it.
        pumps = [threading.Thread(target=_pump, args=(s, output), daemon=True) for s in (child.stdout, child.stderr)]
        for pump in pumps:
            pump.start()
        # None when already gone (and maybe reaped by nobody yet): nothing to guard later.
        child_start = create_time(child.pid)
        self._write(state="running", child_pid=child.pid, child_start_time=child_start, started_at=started_at)
        _log("INFO", f"started {plan.label or 'command'} as pid {child.pid}")

        if plan.memory_bytes > 0 and group is None:  # with a group, the kernel enforces it
            threading.Thread(target=self._watch_memory, args=(child.pid,), daemon=True).start()
        if self.anchor is not None:
            threading.Thread(target=self._watch_anchor, args=(child.pid, *self.anchor), daemon=True).start()
        if plan.usage_interval_s > 0:
            threading.Thread(target=self._write_usage, args=(child.pid,), daemon=True).start()

        exit_code = wait_handling_signals(child)
        if plan.sandbox is not None and 128 < exit_code <= 128 + 64:
            exit_code = 128 - exit_code  # bwrap's 128+n for a command killed by signal n
        self.finished.set()
        _kill_group(child.pid, signal.SIGKILL)  # what the command left behind in its group dies with it
        if group is not None:
            group.kill()  # and what left the process group (setsid) but not the control group
            # A kernel OOM kill of a process that the command survived (exit 0) is not the replica's end.
            self.oom = exit_code != 0 and group.oom_kills() > 0
        for pump in pumps:
            pump.join(DRAIN_TIMEOUT_S)
        output.close()
        self.release_group()

        if self.anchor_lost:
            reason: str | None = ANCHOR_LOST_REASON
        elif self.oom:
            reason = "oom"
        elif self.stop_signal is not None:
            reason = "stopped"
        elif exit_code < 0:
            reason = f"signal {-exit_code}"
        else:
            reason = None
        self._finish(exit_code, reason)
        self.network.close()
        return 0


def _detach() -> None:
    """Fork and let the parent exit, so the launcher is never a child of the server (no zombie to reap)."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


USAGE = (
    "usage: python -m aicenter.runtime.launcher [--detach] [--ready-fd FD] [--api-fd FD] [--netns-fd FD] "
    "[--anchor PID:START_TIME] RUN_DIR/plan.json"
)
_FD_OPTIONS = ("--ready-fd", "--api-fd", "--netns-fd")


def _parse(args: list[str]) -> tuple[bool, dict[str, int], tuple[int, float] | None, list[str]] | None:
    detach, fds, anchor, rest = False, {}, None, []
    it = iter(args)
    for arg in it:
        if arg == "--detach":
            detach = True
        elif arg in _FD_OPTIONS:
            try:
                fds[arg] = int(next(it))
            except (StopIteration, ValueError):
                return None
        elif arg == "--anchor":
            pid, _, start = next(it, "").partition(":")
            try:
                anchor = (int(pid), float(start))
            except ValueError:
                return None
        else:
            rest.append(arg)
    return detach, fds, anchor, rest


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python -m aicenter.runtime.launcher [--detach] [--ready-fd FD] ... RUN_DIR/plan.json``.

    ``--ready-fd``: a pipe's write end inherited from the executor; one byte is written to it (and it is
    closed) once ``status.json`` holds the first record, so ``launch`` returns without polling.
    ``--api-fd``, ``--netns-fd``: the API socket inside the job's network namespace and the share of that
    namespace (``aicenter.runtime.netns.HeldNetns``), inherited from the executor.
    ``--anchor PID:START_TIME``: kill the command when that process is gone (module docstring).
    """
    parsed = _parse(list(sys.argv[1:] if argv is None else argv))
    if parsed is None or len(parsed[3]) != 1:
        print(USAGE, file=sys.stderr)
        return 2
    detach, fds, anchor, (plan_arg,) = parsed
    plan_path = Path(plan_arg).absolute()
    if detach:  # started by a server (the local executor), which it outlives: nothing of the server's kept
        close_inherited(fds.values())
        _detach()
    data = read_json(plan_path)
    if data is None:
        _log("ERROR", f"cannot read the plan {plan_path}")
        return 2
    # One launcher per run directory, for its whole life: a launch retried while the first launcher was still
    # starting must not run the command twice. The lock is released by the kernel when this process ends.
    lock = os.open(plan_path.parent / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        _log("INFO", f"another launcher owns {plan_path.parent}; leaving the replica to it")
        return 3
    if (read_json(plan_path.parent / STATUS_FILE) or {}).get("launcher_pid"):
        _log("INFO", f"{plan_path.parent} already ran a launcher; a run directory is used once")
        return 3
    supervisor = _Supervisor(
        LauncherPlan.from_json(data),
        plan_path.parent,
        fds.get("--ready-fd"),
        api_fd=fds.get("--api-fd"),
        netns_fd=fds.get("--netns-fd"),
        anchor=anchor,
    )
    _drop_secrets(plan_path, data)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGUSR2, supervisor.on_kill)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the server's terminal going away is no reason to stop
    try:
        return supervisor.run()
    except Exception as exc:
        import traceback  # only on this rare path

        _log("ERROR", f"launcher failed:\n{traceback.format_exc()}")
        if supervisor.child is not None:
            _kill_group(supervisor.child.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):  # the error above matters more than a cleanup's
            supervisor.release_group()
        supervisor._finish(None, f"launcher error: {exc}")
        supervisor.network.close()
        return 1


if __name__ == "__main__":
    sys.exit(main())
