"""One tenant's job attacks the platform and another tenant through a real, sandboxed ``aicenter up``.

The server runs as root (the production and CI case) with ``AICENTER_SANDBOX=bwrap``, its own home and a
recognizable admin password and secret key in its environment. bob (workspace B, the victim) has uploaded a
dataset with a secret in it and runs a job that prints a secret line to its log every half second, holding its
job token in its environment. While it runs, alice (workspace A, the attacker) submits one job that tries every
attack at once, each against the real host path or pid the test computed for it, and writes what it saw to its
output dir. The tests assert what the job saw (error type and errno, HTTP statuses), that the victim kept
running, and that none of the secrets appears anywhere in what the job collected.

The GPU test drives the ``LocalExecutor`` directly: the local node has no accelerators for the server to give,
so fake NVIDIA device nodes (character 195,N, no driver behind them) are made for the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import shlex
import stat
import sys
import textwrap
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from aicenter.client import Client
from aicenter.executors import ReplicaPlan, ReplicaState
from aicenter.executors.local import LocalExecutor
from aicenter.executors.local.sandboxing import sandbox_support
from aicenter.storage.blobs import BlobStore
from tests.support.servers import Server

pytestmark = [
    pytest.mark.e2e,  # one real server for the module (the GPU test alone drives the executor directly)
    pytest.mark.skipif(not sandbox_support().available, reason=f"no bwrap sandbox here: {sandbox_support().reason}"),
    pytest.mark.skipif(
        os.geteuid() != 0, reason="tenant isolation needs a server running as root (a uid per workspace)"
    ),
]

UID_BASE = 260_000
ADMIN_PASSWORD = "admin-password-that-no-job-may-see-3f9c"
SECRET_KEY = "server-secret-key-that-no-job-may-see-8d21"
VICTIM_DATA = "victim-dataset-secret-5b7e\n"
VICTIM_LOG_LINE = "victim-log-secret-a4c0"
ATTACKER_DATA = "attacker-own-input\n"
FINAL = ("succeeded", "failed", "stopped")
DEADLINE_S = 120.0  # generous for a shared 2-core CI machine; never a timed assertion

VICTIM = textwrap.dedent(
    f"""
    import time
    while True:
        print({VICTIM_LOG_LINE!r}, flush=True)
        time.sleep(0.5)
    """
)

# Each attempt is recorded as ["ok", what it got] or ["error", exception name, errno name].
ATTACK = textwrap.dedent(
    """
    import errno, json, os, signal, sys, urllib.error, urllib.request

    target = json.loads(sys.argv[1])
    out = os.environ["AICENTER_OUTPUT_DIR"]
    seen = {}

    def attempt(name, action):
        try:
            seen[name] = ["ok", action()]
        except Exception as exc:
            code = getattr(exc, "errno", None)
            seen[name] = ["error", type(exc).__name__, errno.errorcode.get(code, "") if code else ""]

    def read(path):
        with open(path, "rb") as f:
            return f.read().decode(errors="replace")

    def write(path, mode="w"):
        with open(path, mode) as f:
            f.write("tampered")
        return path

    def api(path):
        request = urllib.request.Request(
            os.environ["AICENTER_API_URL"] + "/api/v1" + path,
            headers={"Authorization": "Bearer " + os.environ["AICENTER_TOKEN"]},
        )
        try:
            with urllib.request.urlopen(request, timeout=30) as answer:
                return [answer.status, answer.read().decode(errors="replace")]
        except urllib.error.HTTPError as refused:
            return [refused.code, refused.read().decode(errors="replace")]

    def processes():
        found = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    found[entry] = read(f"/proc/{entry}/cmdline").replace("\\0", " ").strip()
                except OSError as exc:
                    found[entry] = type(exc).__name__
        return found

    attempt("read_db", lambda: read(target["db"]))
    attempt("write_db", lambda: write(target["db"], "a"))
    attempt("list_home", lambda: sorted(os.listdir(target["home"])))
    attempt("list_store", lambda: sorted(os.listdir(target["store"])))
    attempt("read_victim_blob", lambda: read(target["victim_blob"]))
    attempt("read_victim_input", lambda: read(target["victim_input"]))
    attempt("read_victim_log", lambda: read(target["victim_log"]))
    attempt("read_victim_plan", lambda: read(target["victim_plan"]))
    attempt("read_victim_environ", lambda: read(f"/proc/{target['victim_pid']}/environ"))
    attempt("kill_victim", lambda: os.kill(target["victim_pid"], signal.SIGKILL))
    attempt("signal_server", lambda: os.kill(target["server_pid"], 0))  # probe only: the test needs its server
    attempt("processes", processes)
    attempt("parent_environ", lambda: read(f"/proc/{os.getppid()}/environ"))
    attempt("pid1_environ", lambda: read("/proc/1/environ"))
    attempt("own_environ", lambda: sorted(os.environ))
    own_input = os.path.join(os.environ["AICENTER_DATA_DIR"], "attacker-data", "data.txt")
    attempt("chmod_input", lambda: os.chmod(own_input, 0o666))
    attempt("write_input", lambda: write(own_input))
    attempt("write_usr", lambda: write("/usr/" + target["marker"]))
    attempt("write_code", lambda: write(os.path.join(os.environ["AICENTER_CODE_DIR"], target["marker"])))
    attempt("write_victim_output", lambda: write(os.path.join(target["victim_output"], target["marker"])))
    attempt("write_tmp", lambda: write("/tmp/" + target["marker"]))
    attempt("write_output", lambda: write(os.path.join(out, target["marker"])))
    attempt("uid", lambda: [os.getuid(), os.getgid(), os.getgroups()])
    attempt("api_own_job", lambda: api(f"/jobs/{os.environ['AICENTER_JOB_ID']}")[0])
    attempt("api_victim_job", lambda: api(f"/jobs/{target['victim_job']}"))
    attempt("api_victim_logs", lambda: api(f"/jobs/{target['victim_job']}/logs"))
    attempt("api_victim_workspace", lambda: api(f"/workspaces/{target['victim_workspace']}"))
    attempt("api_victim_dataset", lambda: api(f"/datasets/{target['victim_dataset']}/versions/1/files"))
    with open(os.path.join(out, "observations.json"), "w") as f:
        json.dump(seen, f)
    """
)


def _wait(what: str, check: Callable[[], Any], server: Server) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    while not (result := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{server.log()}")
        time.sleep(0.1)  # polling interval, not synchronization: the loop exits on what it reads
    return result


def _job_spec(name: str, dataset: str, code: str, *args: str) -> dict[str, Any]:
    return {
        "name": name,
        "datasets": [dataset],
        "tasks": [
            {
                "name": "worker",
                "resources": {"cpu": "100m", "memory": "256Mi"},
                "command": [sys.executable, "-u", "-c", code, *args],
            }
        ],
    }


def _member(server: Server, admin: Client, username: str, workspace: str) -> tuple[Client, int]:
    """A new user, signed in, who is a plain member (not an admin) of a new workspace; that workspace's id."""
    password = f"{username}-Passw0rd-1"
    admin.create_user(username, password)
    workspace_id = admin.create_workspace(workspace).id
    admin.add_member(workspace_id, username=username, role="member")
    user = Client(server.url)
    user.login(username, password)
    return user, workspace_id


def _push(client: Client, tmp: Path, name: str, content: str, workspace_id: int) -> int:
    """Upload a one-file dataset through the API; the item's id."""
    source = tmp / name
    source.mkdir()
    (source / "data.txt").write_text(content)
    version = client.push("dataset", source, name=name, workspace_id=workspace_id)
    return version.item_id


def _stop(client: Client, job_id: int, server: Server) -> None:
    """Stop a job and wait for its end: its replica would outlive the server (launchers survive restarts)."""
    if client.get_job(job_id).status not in FINAL:
        client.stop_job(job_id)
    _wait(f"job {job_id} to stop", lambda: client.get_job(job_id).status in FINAL, server)


def _victim_record(run_dir: Path) -> dict[str, Any]:
    """The launcher's status record of the victim's replica, once it names the command's host pid."""
    path = run_dir / "status.json"
    if not path.exists():
        return {}
    record: dict[str, Any] = json.loads(path.read_text())
    return record if record.get("child_pid") and record.get("state") == "running" else {}


@pytest.fixture(scope="module")
def attack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """Run the scenario once: the victim's job running, the attacker's job run to its end. What it saw, plus
    what the test knows (paths, pids, the victim's token read from the host as root)."""
    tmp = tmp_path_factory.mktemp("attacks")
    home = tmp / "home"
    env = {
        "AICENTER_SANDBOX": "bwrap",
        "AICENTER_SANDBOX_UID_BASE": str(UID_BASE),
        "AICENTER_ADMIN_PASSWORD": ADMIN_PASSWORD,
        "AICENTER_SECRET_KEY": SECRET_KEY,
        "AICENTER_STOP_GRACE_S": "2",
    }
    server = Server(home, env=env).start()
    with pytest.MonkeyPatch.context() as patch, contextlib.ExitStack() as stack:
        patch.setenv("AICENTER_HOME", str(tmp / "sdk"))  # the SDK's resume files for pushes
        stack.callback(lambda: server.stop() if server.proc is not None else None)
        admin = stack.enter_context(Client(server.url))
        admin.login("admin", ADMIN_PASSWORD)
        alice, alice_ws = _member(server, admin, "alice", "tenant-a")
        bob, bob_ws = _member(server, admin, "bob", "tenant-b")
        stack.enter_context(alice)
        stack.enter_context(bob)
        assert alice_ws != bob_ws

        victim_dataset = _push(bob, tmp, "victim-data", VICTIM_DATA, bob_ws)
        _push(alice, tmp, "attacker-data", ATTACKER_DATA, alice_ws)
        victim = bob.submit_job(_job_spec("victim", "victim-data:1", VICTIM), workspace_id=bob_ws)
        stack.callback(_stop, bob, victim.id, server)
        jobs = home / "jobs"
        victim_run = jobs / str(victim.id) / "runs" / "0" / "worker-0"
        record = _wait("the victim's replica to run", lambda: _victim_record(victim_run), server)
        _wait(
            "the victim's secret in its log",
            lambda: VICTIM_LOG_LINE in (victim_run / "output.log").read_text(errors="replace"),
            server,
        )
        victim_pid = int(record["child_pid"])
        victim_environ = Path(f"/proc/{victim_pid}/environ").read_bytes().decode(errors="replace").split("\0")
        [victim_token] = [v.split("=", 1)[1] for v in victim_environ if v.startswith("AICENTER_TOKEN=")]

        sha = hashlib.sha256(VICTIM_DATA.encode()).hexdigest()
        marker = f"aicenter-attack-{uuid.uuid4().hex[:12]}"
        target = {
            "db": str(home / "aicenter.db"),
            "home": str(home),
            "store": str(home / "store"),
            "victim_blob": str(BlobStore(home / "store").path(sha)),
            "victim_input": str(jobs / str(victim.id) / "data" / "victim-data" / "data.txt"),
            "victim_log": str(victim_run / "output.log"),
            "victim_plan": str(victim_run / "plan.json"),
            "victim_output": str(jobs / str(victim.id) / "output"),
            "victim_pid": victim_pid,
            "victim_job": victim.id,
            "victim_workspace": bob_ws,
            "victim_dataset": victim_dataset,
            "attacker_workspace": alice_ws,
            "server_pid": server.proc.pid if server.proc else 0,
            "marker": marker,
        }
        attacker = alice.submit_job(
            _job_spec("attack", "attacker-data:1", ATTACK, json.dumps(target)), workspace_id=alice_ws
        )
        finished = _wait(
            "the attack job to end",
            lambda: (j := alice.get_job(attacker.id)).status in FINAL and j,
            server,
        )
        attacker_dir = jobs / str(attacker.id)
        log = (attacker_dir / "runs" / "0" / "worker-0" / "output.log").read_text(errors="replace")
        assert finished.status == "succeeded", f"{finished.message}\n{log}"
        observations: dict[str, Any] = json.loads((attacker_dir / "output" / "observations.json").read_text())
        # The victim lives on: the same replica, still writing its log after the attack ended.
        victim_status = bob.get_job(victim.id).status
        record_after = _victim_record(victim_run)
        size = (victim_run / "output.log").stat().st_size
        _wait(
            "the victim's next log line, or its end",
            lambda: (victim_run / "output.log").stat().st_size > size or not _victim_record(victim_run),
            server,
        )
        victim_wrote_on = (victim_run / "output.log").stat().st_size > size and bool(_victim_record(victim_run))
        yield {
            "seen": observations,
            "log": log,
            "victim_status": victim_status,
            "victim_record": record,
            "victim_record_after": record_after,
            "victim_wrote_on": victim_wrote_on,
            "victim_token": victim_token,
            "victim_run": victim_run,
            "attacker_dir": attacker_dir,
            "target": target,
        }


def _seen(attack: dict[str, Any], name: str) -> list[Any]:
    result: list[Any] = attack["seen"][name]
    return result


def test_the_targets_exist_on_the_host(attack: dict[str, Any]) -> None:
    """Every path the job tried holds what it should: a failed read means hidden, not a wrong guess."""
    target = attack["target"]
    for name in ("db", "victim_blob", "victim_input", "victim_log", "victim_plan"):
        assert Path(target[name]).is_file(), name
    assert Path(target["victim_blob"]).read_text() == VICTIM_DATA
    assert Path(target["victim_input"]).read_text() == VICTIM_DATA
    assert VICTIM_LOG_LINE in Path(target["victim_log"]).read_text()
    assert attack["victim_token"].startswith("aic_")


def test_the_database_can_be_neither_read_nor_written(attack: dict[str, Any]) -> None:
    assert _seen(attack, "read_db") == ["error", "FileNotFoundError", "ENOENT"]
    # The home seen inside is the sandbox's own root-owned directory: not even a new file can be made there.
    assert _seen(attack, "write_db") == ["error", "PermissionError", "EACCES"]


def test_the_home_shows_only_the_way_to_the_job(attack: dict[str, Any]) -> None:
    assert _seen(attack, "list_home") == ["ok", ["jobs"]]
    assert _seen(attack, "list_store") == ["error", "FileNotFoundError", "ENOENT"]


def test_another_tenants_blob_input_log_and_plan_cannot_be_read(attack: dict[str, Any]) -> None:
    for name in ("read_victim_blob", "read_victim_input", "read_victim_log", "read_victim_plan"):
        assert _seen(attack, name) == ["error", "FileNotFoundError", "ENOENT"], name


def test_another_jobs_token_is_neither_in_proc_nor_in_its_files(attack: dict[str, Any]) -> None:
    assert _seen(attack, "read_victim_environ") == ["error", "FileNotFoundError", "ENOENT"]
    run = attack["victim_run"]
    for name in ("plan.json", "status.json", "launcher.log", "output.log"):  # what a leak through files would use
        assert attack["victim_token"] not in (run / name).read_text(errors="replace"), name


def test_another_tenants_replica_cannot_be_signalled(attack: dict[str, Any]) -> None:
    assert _seen(attack, "kill_victim") == ["error", "ProcessLookupError", "ESRCH"]
    assert _seen(attack, "signal_server") == ["error", "ProcessLookupError", "ESRCH"]
    assert attack["victim_status"] == "running"
    assert attack["victim_record_after"].get("child_pid") == attack["victim_record"]["child_pid"]
    assert attack["victim_wrote_on"]


def test_only_its_own_processes_are_visible(attack: dict[str, Any]) -> None:
    kind, processes = _seen(attack, "processes")
    assert kind == "ok"
    assert sorted(map(int, processes)) == [1, 2, 3]  # bwrap's init, the shell, the job's python
    commands = [c.split(" ", 1)[0] for c in processes.values()]
    assert commands == [sandbox_support().bwrap, "/bin/sh", sys.executable]


def test_the_servers_environment_does_not_reach_the_job(attack: dict[str, Any]) -> None:
    # Its parent is its own shell: the job's environment, scrubbed of the server's.
    kind, parent = _seen(attack, "parent_environ")
    assert kind == "ok"
    assert "AICENTER_JOB_ID=" in parent
    assert "AICENTER_ADMIN_PASSWORD" not in parent
    assert "AICENTER_SECRET_KEY" not in parent
    assert _seen(attack, "pid1_environ") == ["error", "PermissionError", "EACCES"]  # bwrap's init is root's
    assert not [v for v in _seen(attack, "own_environ")[1] if v.startswith(("AICENTER_ADMIN", "AICENTER_SECRET"))]


def test_its_input_can_be_neither_chmodded_nor_written(attack: dict[str, Any]) -> None:
    assert _seen(attack, "chmod_input") == ["error", "OSError", "EROFS"]
    assert _seen(attack, "write_input") == ["error", "OSError", "EROFS"]
    own = attack["attacker_dir"] / "data" / "attacker-data" / "data.txt"
    assert own.read_text() == ATTACKER_DATA
    assert stat.S_IMODE(own.stat().st_mode) == 0o444


def test_it_writes_only_its_output_and_a_private_tmp(attack: dict[str, Any]) -> None:
    marker = attack["target"]["marker"]
    assert _seen(attack, "write_usr") == ["error", "OSError", "EROFS"]
    assert _seen(attack, "write_code") == ["error", "OSError", "EROFS"]
    assert _seen(attack, "write_victim_output") == ["error", "FileNotFoundError", "ENOENT"]
    assert _seen(attack, "write_tmp") == ["ok", f"/tmp/{marker}"]
    assert not (Path("/tmp") / marker).exists()
    assert not (Path("/usr") / marker).exists()
    assert not (attack["attacker_dir"] / "code" / marker).exists()
    assert not (Path(attack["target"]["victim_output"]) / marker).exists()
    written = attack["attacker_dir"] / "output" / marker
    assert _seen(attack, "write_output") == ["ok", str(written)]
    assert written.read_text() == "tampered"


def test_it_runs_as_its_workspace_uid(attack: dict[str, Any]) -> None:
    uid = UID_BASE + attack["target"]["attacker_workspace"]
    assert _seen(attack, "uid") == ["ok", [uid, uid, []]]
    assert (attack["attacker_dir"] / "output" / "observations.json").stat().st_uid == uid


def test_its_token_reads_its_own_job_and_nothing_of_another_tenant(attack: dict[str, Any]) -> None:
    assert _seen(attack, "api_own_job") == ["ok", 200]
    for name in ("api_victim_job", "api_victim_logs", "api_victim_workspace", "api_victim_dataset"):
        kind, (status, answer) = _seen(attack, name)
        assert (kind, status, json.loads(answer)["error"]["code"]) == ("ok", 403, "forbidden"), name


def test_no_secret_reached_the_job(attack: dict[str, Any]) -> None:
    collected = json.dumps(attack["seen"]) + attack["log"]
    secrets = [ADMIN_PASSWORD, SECRET_KEY, VICTIM_DATA.strip(), VICTIM_LOG_LINE, attack["victim_token"]]
    assert [s for s in secrets if s in collected] == []


# -- accelerators ----------------------------------------------------------------------------------------------

NVIDIA_MAJOR = 195  # the NVIDIA driver's character device major; nvidiactl is minor 255
GPU_NODES = [*(f"/dev/nvidia{i}" for i in range(4)), "/dev/nvidiactl"]
GPU_WORKSPACE = 9

DEVICE_PROBE = textwrap.dedent(
    """
    import errno, json, os, sys
    seen = {"dev": sorted(os.listdir("/dev")), "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    for path in sys.argv[1:]:
        try:
            os.close(os.open(path, os.O_RDWR))
            seen[path] = "opened"
        except OSError as exc:
            seen[path] = errno.errorcode[exc.errno]
    with open(os.path.join(os.environ["AICENTER_OUTPUT_DIR"], "devices.json"), "w") as f:
        json.dump(seen, f)
    """
)


@pytest.fixture
def gpu_nodes() -> Iterator[list[str]]:
    """``/dev/nvidia0..3`` and ``/dev/nvidiactl``: the host's where they exist, fake ones (no driver: opening one
    gives ENXIO) made for the test where not, and removed afterwards."""
    made = []
    try:
        for minor, path in zip([0, 1, 2, 3, 255], GPU_NODES, strict=True):
            if os.path.exists(path):
                continue
            try:
                os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(NVIDIA_MAJOR, minor))
            except PermissionError as exc:
                pytest.skip(f"cannot make device nodes here ({exc}): a container without CAP_MKNOD")
            os.chmod(path, 0o666)  # noqa: S103 (as the driver makes them: the binds decide who opens one)
            made.append(path)
        yield GPU_NODES
    finally:
        for path in made:
            os.unlink(path)


def test_a_replica_sees_and_opens_only_the_gpu_it_was_given(tmp_path: Path, gpu_nodes: list[str]) -> None:
    job = tmp_path / "jobs" / "1"
    code, output = job / "code", job / "output"
    for d in (code, output):
        d.mkdir(parents=True)
    (code / "probe.py").write_text(DEVICE_PROBE)
    plan = ReplicaPlan(
        job_id=1,
        task="worker",
        replica=0,
        attempt=0,
        node="gpu-node",
        command=shlex.join([sys.executable, "probe.py", *gpu_nodes]),
        env={"AICENTER_CODE_DIR": str(code), "AICENTER_OUTPUT_DIR": str(output)},
        run_dir=job / "runs" / "0" / "worker-0",
        workdir=code,
        devices=(1,),
        workspace_id=GPU_WORKSPACE,
    )
    executor = LocalExecutor(tmp_path / "jobs", node_name="gpu-node", sandbox="bwrap", sandbox_uid_base=UID_BASE)

    async def run() -> tuple[Any, str]:
        handle = await executor.launch(plan)
        deadline = time.monotonic() + DEADLINE_S
        while (status := await executor.status(handle)).state is not ReplicaState.EXITED:
            assert time.monotonic() < deadline, "the probe did not end"
            await asyncio.sleep(0.05)
        return status, b"".join([c async for c in executor.logs(handle)]).decode(errors="replace")

    status, log = asyncio.run(run())
    assert (status.state, status.exit_code) == (ReplicaState.EXITED, 0), log
    seen = json.loads((output / "devices.json").read_text())
    assert [d for d in seen["dev"] if d.startswith("nvidia")] == ["nvidia1", "nvidiactl"]
    assert seen["visible"] == "1"
    for path in ("/dev/nvidia0", "/dev/nvidia2", "/dev/nvidia3"):
        assert seen[path] == "ENOENT", path
    # Bound and permitted: a fake node has no driver behind it (ENXIO), a real one opens.
    for path in ("/dev/nvidia1", "/dev/nvidiactl"):
        assert seen[path] in ("ENXIO", "opened"), path
