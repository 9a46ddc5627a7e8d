"""The launcher: the child's environment, line stamping, plan and status files; its SIGUSR2 forced stop."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from aicenter.runtime.files import LauncherPlan, parse_stamp, read_json, utc_stamp, write_json_atomic
from aicenter.runtime.launcher import MAX_PENDING_LINE, _Output, _pump, child_env, main

STAMP = re.compile(rb"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z ")


def test_child_env_keeps_basics_only_and_forces_devices(tmp_path: Path) -> None:
    plan = LauncherPlan(command="true", workdir="/", env={"FOO": "1", "CUDA_VISIBLE_DEVICES": "7"}, python_bin="/v/bin")
    inherited = {"PATH": "/usr/bin", "HOME": "/root", "AICENTER_SECRET_KEY": "s", "DATABASE_URL": "postgres://"}
    env = child_env(plan, tmp_path, inherited)
    assert env == {
        "PATH": "/v/bin:/usr/bin",
        "HOME": "/root",
        "FOO": "1",
        "CUDA_VISIBLE_DEVICES": "",  # the scheduler assigned none, whatever the spec asked
        "AICENTER_RUN_DIR": str(tmp_path),
    }
    gpus = child_env(LauncherPlan(command="true", workdir="/", devices=(1, 3)), tmp_path, {})
    assert gpus["CUDA_VISIBLE_DEVICES"] == "1,3"
    assert gpus["PATH"] == "/usr/local/bin:/usr/bin:/bin"


def test_plan_round_trips_through_json() -> None:
    plan = LauncherPlan("c", "/w", {"A": "b"}, (0, 1), (2, 3), 123, "/bin", "job 1")
    assert LauncherPlan.from_json(plan.to_json()) == plan
    assert LauncherPlan.from_json({"command": "c", "workdir": "/w"}) == LauncherPlan("c", "/w")
    limited = plan._replace(cpu_milli=500, pids_max=64, cgroups=False, cgroup_parent="/batch")
    assert LauncherPlan.from_json(limited.to_json()) == limited
    assert LauncherPlan("c", "/w").cgroups  # a plan without the key enforces its limits in a cgroup
    sampled = plan._replace(usage_interval_s=15.0)
    assert LauncherPlan.from_json(sampled.to_json()) == sampled
    assert "usage_interval_s" not in plan.to_json()  # off: the plan reads as it always did


def test_pump_stamps_lines_and_keeps_partial_ones(tmp_path: Path) -> None:
    out = _Output(tmp_path / "out.log")
    read_fd, write_fd = os.pipe()
    with os.fdopen(read_fd, "rb") as reader:
        pump = threading.Thread(target=_pump, args=(reader, out))
        pump.start()
        os.write(write_fd, b"one\ntw")
        os.write(write_fd, b"o\n\n" + b"x" * (MAX_PENDING_LINE + 10))
        os.write(write_fd, b"\ntail without newline")
        os.close(write_fd)
        pump.join()
    out.close()
    logged = (tmp_path / "out.log").read_bytes().split(b"\n")
    assert logged[-1] == b""
    assert all(STAMP.match(line) for line in logged[:-1])
    payloads = [STAMP.sub(b"", line) for line in logged[:-1]]
    assert payloads[:3] == [b"one", b"two", b""]
    assert b"".join(payloads[3:-1]) == b"x" * (MAX_PENDING_LINE + 10)  # an endless line is cut, not lost
    assert payloads[-1] == b"tail without newline"


def test_status_files_are_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "status.json"
    assert read_json(path) is None
    write_json_atomic(path, {"state": "running"})
    write_json_atomic(path, {"state": "exited", "exit_code": 0}, fsync=False)
    assert read_json(path) == {"state": "exited", "exit_code": 0}
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]
    path.write_text("[1, 2]")
    assert read_json(path) is None


def test_stamps_parse_back() -> None:
    stamp = utc_stamp()
    parsed = parse_stamp(stamp)
    assert parsed is not None
    assert utc_stamp(parsed) == stamp
    assert parse_stamp("yesterday") is None
    assert parse_stamp(None) is None


def test_main_rejects_bad_arguments(tmp_path: Path) -> None:
    assert main([]) == 2
    assert main([str(tmp_path / "missing.json")]) == 2
    assert main(["--anchor", "not-a-pid", str(tmp_path / "plan.json")]) == 2


def _start_until_ready(run_dir: Path, plan: LauncherPlan) -> subprocess.Popen[bytes]:
    """Start a launcher on ``plan`` in ``run_dir`` and wait until its command printed ``ready``."""
    write_json_atomic(run_dir / "plan.json", plan.to_json())
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path)}
    launcher = subprocess.Popen(
        [sys.executable, "-m", "aicenter.runtime.launcher", str(run_dir / "plan.json")], env=env
    )
    deadline = time.monotonic() + 30
    output = run_dir / "output.log"
    while b" ready\n" not in (output.read_bytes() if output.exists() else b""):
        if time.monotonic() > deadline:
            launcher.kill()
            raise AssertionError("the launcher did not start the command")
        time.sleep(0.02)
    return launcher


def test_sigusr2_kills_a_command_ignoring_sigterm_and_records_a_stop(tmp_path: Path) -> None:
    """What the Slurm executor sends (``scancel --batch --signal=USR2``) when the stop's grace is over."""
    plan = LauncherPlan(command="trap '' TERM; echo ready; exec sleep 600", workdir=str(tmp_path))
    # "ready" is printed after the trap is set: a TERM before it would end the shell (a plain stop).
    launcher = _start_until_ready(tmp_path, plan)
    try:
        launcher.send_signal(signal.SIGTERM)  # ignored by the command
        launcher.send_signal(signal.SIGUSR2)
        assert launcher.wait(timeout=30) == 0
    finally:
        launcher.kill()
    record = read_json(tmp_path / "status.json") or {}
    assert (record["state"], record["exit_code"], record["reason"]) == ("exited", -9, "stopped")


def test_a_plan_with_a_usage_interval_gets_usage_json_while_the_command_runs(tmp_path: Path) -> None:
    """Slurm's replica telemetry: the launcher writes the command's CPU seconds and memory every interval."""
    burn = "sum(range(2 * 10**7)); x = b'x' * (32 << 20); print('ready', flush=True); import time; time.sleep(60)"
    command = f'{sys.executable} -c "{burn}"'
    plan = LauncherPlan(command=command, workdir=str(tmp_path), cgroups=False, usage_interval_s=0.2)
    launcher = _start_until_ready(tmp_path, plan)
    try:
        deadline = time.monotonic() + 30
        started = time.time()
        while (read_json(tmp_path / "usage.json") or {}).get("at", 0) < started:  # a write after "ready"
            assert time.monotonic() < deadline, "no usage.json written after the command's start"
            time.sleep(0.05)
        usage = read_json(tmp_path / "usage.json") or {}
        assert usage["source"] == "processes"
        assert usage["memory_bytes"] >= 32 << 20
        assert usage["cpu_seconds"] > 0.05
        launcher.send_signal(signal.SIGTERM)
        assert launcher.wait(timeout=30) == 0
    finally:
        launcher.kill()


def test_a_detached_launcher_keeps_none_of_its_parents_descriptors(tmp_path: Path) -> None:
    """Under uvloop a server's subprocess inherits every inheritable descriptor, ``close_fds`` or not, and
    ``aicenter up``'s listening socket is inheritable: a launcher (which outlives the server) holding it kept
    the port taken after a ``kill -9``, so the server could not start again on it. Here the parent hands it
    over the same way (``close_fds=False``); the detached launcher must not keep it."""
    plan = LauncherPlan(command="echo ready; exec sleep 600", workdir=str(tmp_path), cgroups=False)
    write_json_atomic(tmp_path / "plan.json", plan.to_json())
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.set_inheritable(True)
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": os.pathsep.join(sys.path)}
    argv = [sys.executable, "-m", "aicenter.runtime.launcher", "--detach", str(tmp_path / "plan.json")]
    subprocess.run(argv, env=env, close_fds=False, check=True, timeout=30)  # the intermediate exits at once
    deadline = time.monotonic() + 30
    while not (pid := (read_json(tmp_path / "status.json") or {}).get("launcher_pid")):
        assert time.monotonic() < deadline, "the launcher wrote no status"
        time.sleep(0.02)
    try:
        inode = f"socket:[{os.fstat(listener.fileno()).st_ino}]"
        held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        assert inode not in held
        port = listener.getsockname()[1]
        listener.close()
        with socket.socket() as again:  # what `aicenter up` does on restart: the port is free
            again.bind(("127.0.0.1", port))
            again.listen()
    finally:
        os.kill(pid, signal.SIGTERM)
