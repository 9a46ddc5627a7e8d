"""The launcher: one small supervising process per replica, ``python -m aicenter.runtime.launcher PLAN``.

It runs detached from the server (own session, stdin from /dev/null, its messages in ``launcher.log``), so the
server may die, even by ``kill -9``, while the replica keeps running; the restarted server re-adopts it from the
run directory (see ``aicenter.runtime.files``). The launcher:

1. starts the command with ``/bin/sh -c`` in a new process group, with a clean environment (the server's own
   variables, such as its database URL or secret key, never reach the job), CPU affinity and
   ``CUDA_VISIBLE_DEVICES``;
2. copies stdout and stderr into ``output.log`` line by line, each prefixed by a UTC timestamp, written as it
   comes (one ``write`` per batch of lines, so followers see it at once);
3. watches the resident memory of the whole process tree every 0.5 s and kills the group when it exceeds the
   limit (reason ``oom``). This is a sampling watchdog: a burst between two samples can go past the limit
   briefly, and the kernel's own OOM killer (a cgroup limit) is not observed here;
4. forwards SIGTERM/SIGINT to the command's process group (reason ``stopped``), so a job can checkpoint;
5. when the command exits, kills what is left of its group, drains the output and writes the final
   ``status.json`` (exit code, negative for a signal; reason; finished_at), then exits 0.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any

import psutil

from aicenter.runtime.files import (
    LOCK_FILE,
    OUTPUT_FILE,
    STATUS_FILE,
    LauncherPlan,
    read_json,
    utc_stamp,
    write_json_atomic,
)

__all__ = ["child_env", "main"]

log = logging.getLogger("aicenter.launcher")

# Variables of the launcher's own environment a job may see; everything else comes from the plan. The server's
# environment holds secrets (database URL, secret key, tokens) that must not reach user code.
INHERITED_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "USER", "LOGNAME", "SHELL")
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"
MEMORY_SAMPLE_S = 0.5
# A line longer than this without a newline (a progress bar redrawn with \r) is written out as it is, so one
# endless line cannot hold the launcher's memory.
MAX_PENDING_LINE = 64 * 1024
READ_CHUNK = 64 * 1024
# After the command exited and its group was killed, the pipes close at once unless a process that left the
# group (setsid) still holds them; the launcher does not wait longer than this for such a straggler.
DRAIN_TIMEOUT_S = 10.0


def child_env(plan: LauncherPlan, run_dir: Path, inherited: dict[str, str]) -> dict[str, str]:
    """The command's environment: a few inherited basics, the plan's variables, then the launcher's own.

    ``CUDA_VISIBLE_DEVICES`` is always set, to ``""`` when the replica has no devices, so a CPU job never
    grabs a GPU the scheduler gave to someone else.
    """
    env = {k: inherited[k] for k in INHERITED_VARIABLES if k in inherited}
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


class _Supervisor:
    """One replica's command, its output pumps, its memory watchdog and its status record."""

    def __init__(self, plan: LauncherPlan, run_dir: Path) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.child: subprocess.Popen[bytes] | None = None
        self.stop_signal: int | None = None
        self.oom = False
        self.finished = threading.Event()
        me = psutil.Process()
        self.record: dict[str, Any] = {
            "state": "starting",
            "launcher_pid": me.pid,
            "launcher_start_time": me.create_time(),
            "child_pid": None,
            "child_start_time": None,
            "started_at": None,
            "exit_code": None,
            "reason": None,
            "finished_at": None,
        }

    def on_signal(self, signum: int, _frame: FrameType | None) -> None:
        """SIGTERM/SIGINT: remember it and pass it on to the command's group (the job may checkpoint)."""
        log.info("received signal %d, forwarding to the command", signum)
        self.stop_signal = signum
        if self.child is not None and self.child.returncode is None:
            _kill_group(self.child.pid, signum)

    def _write(self, **changes: Any) -> None:
        self.record.update(changes)
        write_json_atomic(self.run_dir / STATUS_FILE, self.record)

    def _finish(self, exit_code: int | None, reason: str | None) -> None:
        self._write(state="exited", exit_code=exit_code, reason=reason, finished_at=utc_stamp())
        log.info("finished: exit code %s, reason %s", exit_code, reason)

    def _watch_memory(self, pid: int) -> None:
        limit = self.plan.memory_bytes
        while not self.finished.wait(MEMORY_SAMPLE_S):
            rss = _tree_rss(pid)
            if rss > limit:
                log.warning("memory %d bytes over the limit of %d bytes: killing the process group", rss, limit)
                self.oom = True
                _kill_group(pid, signal.SIGKILL)
                return

    def run(self) -> int:
        plan = self.plan
        try:
            if plan.cpus:
                os.sched_setaffinity(0, plan.cpus)  # inherited by the command and everything it starts
            output = _Output(self.run_dir / OUTPUT_FILE)
        except OSError as exc:
            self._finish(None, f"launch failed: {exc}")
            return 0
        try:
            self.child = subprocess.Popen(
                ["/bin/sh", "-c", plan.command],
                cwd=plan.workdir,
                env=child_env(plan, self.run_dir, dict(os.environ)),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                process_group=0,
                close_fds=True,
            )
        except OSError as exc:
            output.close()
            self._finish(None, f"launch failed: {exc}")
            return 0
        child = self.child
        if self.stop_signal is not None:  # a stop that arrived while the command was being started
            _kill_group(child.pid, self.stop_signal)
        try:
            child_start: float | None = psutil.Process(child.pid).create_time()
        except psutil.Error:  # already gone (and maybe reaped by nobody yet): nothing to guard later
            child_start = None
        self._write(state="running", child_pid=child.pid, child_start_time=child_start, started_at=utc_stamp())
        log.info("started %s as pid %d", plan.label or "command", child.pid)

        assert child.stdout is not None
        assert child.stderr is not None
        pumps = [threading.Thread(target=_pump, args=(s, output), daemon=True) for s in (child.stdout, child.stderr)]
        for pump in pumps:
            pump.start()
        if plan.memory_bytes > 0:
            threading.Thread(target=self._watch_memory, args=(child.pid,), daemon=True).start()

        exit_code = child.wait()
        self.finished.set()
        _kill_group(child.pid, signal.SIGKILL)  # what the command left behind in its group dies with it
        for pump in pumps:
            pump.join(DRAIN_TIMEOUT_S)
        output.close()

        if self.oom:
            reason: str | None = "oom"
        elif self.stop_signal is not None:
            reason = "stopped"
        elif exit_code < 0:
            reason = f"signal {-exit_code}"
        else:
            reason = None
        self._finish(exit_code, reason)
        return 0


def _detach() -> None:
    """Fork and let the parent exit, so the launcher is never a child of the server (no zombie to reap)."""
    if os.fork() > 0:
        os._exit(0)
    os.setsid()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: ``python -m aicenter.runtime.launcher [--detach] RUN_DIR/plan.json``."""
    args = list(sys.argv[1:] if argv is None else argv)
    detach = "--detach" in args
    args = [a for a in args if a != "--detach"]
    if len(args) != 1:
        print("usage: python -m aicenter.runtime.launcher [--detach] RUN_DIR/plan.json", file=sys.stderr)
        return 2
    plan_path = Path(args[0]).absolute()
    if detach:
        _detach()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s launcher[%(process)d] %(levelname)s %(message)s")
    data = read_json(plan_path)
    if data is None:
        log.error("cannot read the plan %s", plan_path)
        return 2
    # One launcher per run directory, for its whole life: a launch retried while the first launcher was still
    # starting must not run the command twice. The lock is released by the kernel when this process ends.
    lock = os.open(plan_path.parent / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        log.info("another launcher owns %s; leaving the replica to it", plan_path.parent)
        return 3
    if (read_json(plan_path.parent / STATUS_FILE) or {}).get("launcher_pid"):
        log.info("%s already ran a launcher; a run directory is used once", plan_path.parent)
        return 3
    supervisor = _Supervisor(LauncherPlan.from_json(data), plan_path.parent)
    signal.signal(signal.SIGTERM, supervisor.on_signal)
    signal.signal(signal.SIGINT, supervisor.on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # the server's terminal going away is no reason to stop
    try:
        return supervisor.run()
    except Exception as exc:
        log.exception("launcher failed")
        if supervisor.child is not None:
            _kill_group(supervisor.child.pid, signal.SIGKILL)
        supervisor._finish(None, f"launcher error: {exc}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
