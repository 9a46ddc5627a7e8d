"""A member's job inside the sandbox tries what a tenant must never do, and reports what it saw.

The job runs through the real ``LocalExecutor`` with ``sandbox="bwrap"`` (as root in CI: in its own uid). It
writes its observations to its output dir as JSON; the tests assert on what it saw, not only its exit code.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from aicenter.executors import ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import sandbox_support

pytestmark = pytest.mark.skipif(
    not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}"
)

NODE = "security-node"
UID_BASE = 240_000
WORKSPACE = 7
SERVER_SECRET = "server-only-secret-value"

# The job: each attempt is recorded as ("ok", what it got) or ("error", the exception's name and errno).
PROBE = textwrap.dedent(
    """
    import json, os, sys
    home, out = sys.argv[1], os.environ["AICENTER_OUTPUT_DIR"]
    code, data = os.environ["AICENTER_CODE_DIR"], os.environ["AICENTER_DATA_DIR"]
    seen = {}

    def attempt(name, action):
        try:
            seen[name] = ["ok", action()]
        except Exception as exc:
            seen[name] = ["error", type(exc).__name__]

    def write(path):
        with open(path, "w") as f:
            f.write("tampered")
        return path

    attempt("read_db", lambda: open(os.path.join(home, "aicenter.db")).read())
    attempt("list_home", lambda: sorted(os.listdir(home)))
    attempt("write_code", lambda: write(os.path.join(code, "injected.py")))
    attempt("chmod_input", lambda: os.chmod(os.path.join(data, "train.csv"), 0o644))
    attempt("write_input", lambda: write(os.path.join(data, "train.csv")))
    attempt("pids", lambda: sorted(int(p) for p in os.listdir("/proc") if p.isdigit()))
    attempt("cmdlines", lambda: [open(f"/proc/{p}/cmdline", "rb").read().decode(errors="replace")
                                  for p in os.listdir("/proc") if p.isdigit()])
    attempt("pid1_environ", lambda: open("/proc/1/environ", "rb").read().decode(errors="replace"))
    attempt("signal_bystander", lambda: os.kill(int(sys.argv[2]), 0))
    attempt("own_environ", lambda: dict(os.environ))
    attempt("uid", os.getuid)
    attempt("write_output", lambda: write(os.path.join(out, "model.bin")))
    with open(os.path.join(out, "observations.json"), "w") as f:
        json.dump(seen, f)
    """
)


@pytest_asyncio.fixture(loop_scope="session")
async def bystander() -> AsyncIterator[asyncio.subprocess.Process]:
    """Another tenant's replica, or the server: a host process the job must neither see nor signal."""
    proc = await asyncio.create_subprocess_exec("sleep", "600")
    yield proc
    proc.kill()
    await proc.wait()


@pytest_asyncio.fixture(loop_scope="session")
async def observations(
    tmp_path: Path, bystander: asyncio.subprocess.Process, monkeypatch: pytest.MonkeyPatch
) -> dict[str, Any]:
    """Run the probe job once in the sandbox, as a server home laid out like the real one would hold it."""
    monkeypatch.setenv("AICENTER_ADMIN_PASSWORD", SERVER_SECRET)  # in the server's environment only
    home = tmp_path / "home"
    job = home / "jobs" / "1"
    code, data, output, checkpoints = (job / d for d in ("code", "data", "output", "checkpoints"))
    for d in (code, data, output, checkpoints):
        d.mkdir(parents=True)
    # World-readable on purpose: the mount, not file modes, is what must hide the database.
    (home / "aicenter.db").write_text("password hashes and tokens")
    (home / "aicenter.db").chmod(0o644)
    (code / "probe.py").write_text(PROBE)
    dataset = data / "train.csv"
    dataset.write_text("x,y\n1,2\n")
    dataset.chmod(0o444)
    if os.geteuid() == 0:  # the job owns the input file: only the read-only mount stops a chmod
        os.chown(dataset, UID_BASE + WORKSPACE, UID_BASE + WORKSPACE)
    env = {
        "AICENTER_CODE_DIR": str(code),
        "AICENTER_DATA_DIR": str(data),
        "AICENTER_OUTPUT_DIR": str(output),
        "AICENTER_CHECKPOINT_DIR": str(checkpoints),
    }
    plan = ReplicaPlan(
        job_id=1,
        task="worker",
        replica=0,
        attempt=0,
        node=NODE,
        command=f"{shlex.quote(sys.executable)} probe.py {shlex.quote(str(home))} {bystander.pid}",
        env=env,
        run_dir=job / "runs" / "0" / "worker-0",
        workdir=code,
        workspace_id=WORKSPACE,
    )
    executor = LocalExecutor(home / "jobs", node_name=NODE, sandbox="bwrap", sandbox_uid_base=UID_BASE)
    handle = await executor.launch(plan)
    for _ in range(600):
        status = await executor.status(handle)
        if status.state is ReplicaState.EXITED:
            break
        await asyncio.sleep(0.05)
    log = b"".join([c async for c in executor.logs(handle)]).decode(errors="replace")
    assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0), log
    result: dict[str, Any] = json.loads((output / "observations.json").read_text())
    result["_dirs"] = {"code": str(code), "data": str(data), "output": str(output), "home": str(home)}
    return result


def test_the_database_outside_the_binds_cannot_be_read(observations: dict[str, Any]) -> None:
    assert observations["read_db"] == ["error", "FileNotFoundError"]


def test_the_home_shows_only_the_path_to_the_job(observations: dict[str, Any]) -> None:
    kind, listing = observations["list_home"]
    assert kind == "ok"
    assert listing == ["jobs"]  # no aicenter.db, no store, no secret_key: only the parents of its binds


def test_code_and_inputs_can_be_neither_written_nor_chmodded(observations: dict[str, Any]) -> None:
    assert observations["write_code"] == ["error", "OSError"]  # EROFS
    assert observations["chmod_input"] == ["error", "OSError"]
    assert observations["write_input"][0] == "error"
    dirs = observations["_dirs"]
    assert not (Path(dirs["code"]) / "injected.py").exists()
    assert (Path(dirs["data"]) / "train.csv").read_text() == "x,y\n1,2\n"
    assert (Path(dirs["data"]) / "train.csv").stat().st_mode & 0o777 == 0o444


def test_only_its_own_processes_are_visible(observations: dict[str, Any]) -> None:
    kind, pids = observations["pids"]
    assert kind == "ok"
    assert len(pids) <= 3  # bwrap's init, sh, python: a PID namespace of its own
    assert max(pids) < 50
    programs = {c.split("\0")[0] for c in observations["cmdlines"][1]}
    # bwrap's init (its pid 1), the job's shell and interpreter; not the launcher, the server or the bystander.
    assert programs <= {sandbox_support().bwrap, "/bin/sh", sys.executable}
    assert not any(c.startswith("sleep\0") for c in observations["cmdlines"][1])


def test_another_process_cannot_be_signalled(observations: dict[str, Any]) -> None:
    assert observations["signal_bystander"] == ["error", "ProcessLookupError"]


def test_the_server_environment_does_not_reach_the_job(observations: dict[str, Any]) -> None:
    kind, environ = observations["pid1_environ"]
    assert kind == "error" or SERVER_SECRET not in environ
    assert SERVER_SECRET not in json.dumps(observations["own_environ"])
    assert "AICENTER_ADMIN_PASSWORD" not in observations["own_environ"][1]


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own needs a server running as root")
def test_a_root_server_runs_the_job_as_its_workspace_uid(observations: dict[str, Any]) -> None:
    assert observations["uid"] == ["ok", UID_BASE + WORKSPACE]
    output = Path(observations["_dirs"]["output"])
    assert (output / "model.bin").stat().st_uid == UID_BASE + WORKSPACE
    assert (output / "model.bin").read_text() == "tampered"  # the server reads what the job wrote
