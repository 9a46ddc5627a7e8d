"""Notebooks end to end on a real ``aicenter up`` (as root here: every notebook in its bubblewrap sandbox, its own
uid and network namespace).

alice, a member of workspace vision, creates a notebook from her venv image (which has ``tinypkg``), her
algorithm and a dataset; JupyterLab answers through the platform; a cell reads the mounted dataset, imports the
image's package and writes code into the work dir; she saves it as a new algorithm version and trains from it.
bob (same workspace), carol (another) and the platform admin are refused. Stop keeps the work dir and start
brings it back; a notebook whose launcher dies is marked lost and starts again with its work dir. The idle
culler warns, then stops an idle notebook, while a busy one (a cell still running) is kept.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from aicenter.config import Settings
from aicenter.controllers.notebook_culler import NotebookCuller
from aicenter.core.clock import utcnow
from aicenter.core.ssh import ssh_config
from aicenter.db.engine import Database
from aicenter.services.jobs import notebook_token
from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in
from tests.support.jupyter import execute, start_kernel, wait_for_lab
from tests.support.servers import free_port
from tests.support.wheels import build_tiny_wheel

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
DEADLINE_S = 120.0
PASSWORDS = {"alice": "alice-Passw0rd-1", "bob": "bob-Passw0rd-1", "carol": "carol-Passw0rd-1"}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One server for the module, its users, alice's image, algorithm and dataset."""
    tmp = tmp_path_factory.mktemp("notebooks")
    wheels = build_tiny_wheel(tmp / "tinypkg")
    env = {"AICENTER_PIP_ARGS": json.dumps(["--no-index", "--find-links", str(wheels)]), "AICENTER_SSH_PORT": "0"}
    server = Server(tmp / "home", env=env).start()
    try:
        admin = signed_in(tmp, server, "admin", ADMIN_PASSWORD)
        for user, password in PASSWORDS.items():
            admin.run("user", "create", user, "--password-stdin", stdin=f"{password}\n")
        admin.run("workspace", "create", "vision", "--admin", "alice")
        admin.run("member", "add", "bob", "--workspace", "vision")
        admin.run("workspace", "create", "other", "--admin", "carol")
        alice = signed_in(tmp, server, "alice", PASSWORDS["alice"])
        alice.run("image", "create", "py-tiny", "--type", "venv")
        alice.json("image", "version", "py-tiny", "--python", PYTHON, "--requirement", "tinypkg")
        data = tmp / "mnist"
        data.mkdir()
        (data / "labels.csv").write_text("label\n7\n")
        alice.json("dataset", "push", str(data), "--name", "mnist", "--no-progress")
        code = tmp / "resnet"
        code.mkdir()
        (code / "model.py").write_text("LAYERS = 18\n")
        alice.json("algorithm", "push", str(code), "--name", "resnet", "--no-progress")
        tokens = {
            name: httpx.post(f"{server.url}/api/v1/auth/login", json={"username": name, "password": pw}).json()["token"]
            for name, pw in {**PASSWORDS, "admin": ADMIN_PASSWORD}.items()
        }
        yield {"server": server, "alice": alice, "tokens": tokens, "tmp": tmp}
    finally:
        if server.proc is not None:
            server.stop()


def _http(world: dict[str, Any], user: str) -> httpx.Client:
    token = world["tokens"][user]
    return httpx.Client(base_url=world["server"].url, headers={"Authorization": f"Bearer {token}"}, timeout=30)


def _wait_image(http: httpx.Client) -> None:
    deadline = time.monotonic() + DEADLINE_S * 2
    while time.monotonic() < deadline:
        items = http.get("/api/v1/images", params={"q": "py-tiny"}).json()["items"]
        build = http.get(f"/api/v1/images/{items[0]['id']}/versions/1/build").json()
        if build["state"] in ("ready", "failed"):
            assert build["state"] == "ready", build
            return
        time.sleep(0.5)  # polling interval: the loop exits on the state it reads
    pytest.fail("the image build did not finish")


def _wait_status(http: httpx.Client, notebook_id: int, *wanted: str) -> dict[str, Any]:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        got: dict[str, Any] = http.get(f"/api/v1/notebooks/{notebook_id}").json()
        if got["status"] in wanted:
            return got
        time.sleep(0.2)  # polling interval: the loop exits on the status it reads
    pytest.fail(f"notebook {notebook_id} never became {wanted}: {got}")


def test_a_member_debugs_saves_and_trains_and_nobody_else_gets_in(world: dict[str, Any]) -> None:
    server: Server = world["server"]
    alice = _http(world, "alice")
    _wait_image(alice)
    created = alice.post(
        "/api/v1/notebooks",
        json={
            "spec": {
                "name": "explore",
                "workspace": "vision",
                "image": "py-tiny:1",
                "algorithm": "resnet:1",
                "datasets": ["mnist:1"],
                "resources": {"cpu": 1, "memory": "1Gi"},
            }
        },
    )
    assert created.status_code == 201, created.text
    nb = created.json()
    assert (nb["status"], nb["lab_url"], nb["is_owner"]) == ("queued", f"/notebooks/{nb['id']}/lab", True)
    wait_for_lab(alice, nb["id"], DEADLINE_S)
    headers = {"Authorization": f"Bearer {world['tokens']['alice']}"}
    page = alice.get(f"/notebooks/{nb['id']}/lab")
    assert page.status_code == 200
    assert "jupyter-config-data" in page.text
    token = notebook_token(Settings(home=server.home).resolve_secret_key(), nb["id"], 0)
    assert token not in page.text, "JupyterLab's token must not reach the browser: the proxy adds it"
    kernel = start_kernel(alice, nb["id"])
    out = execute(
        server.url,
        nb["id"],
        kernel,
        "import os, tinypkg, model\n"
        "print(open(os.path.join(os.environ['AICENTER_DATA_DIR'], 'mnist', 'labels.csv')).read().split()[1])\n"
        "print(tinypkg.ANSWER, model.LAYERS, os.getcwd() == os.environ['AICENTER_CODE_DIR'])\n"
        "open('train.py', 'w').write('import tinypkg, model\\nprint(\"trained\", tinypkg.ANSWER, model.LAYERS)\\n')\n",
        headers=headers,
    )
    assert out.split() == ["7", "42", "18", "True"], out

    # Nobody but alice reaches it: bob (same workspace) and the platform admin (who sees its metadata) 403, carol 404.
    for user, status in (("bob", 403), ("carol", 404), ("admin", 403)):
        with _http(world, user) as other:
            assert other.get(f"/notebooks/{nb['id']}/api/status").status_code == status, user
            assert other.post(f"/notebooks/{nb['id']}/api/kernels", json={}).status_code == status, user
    assert httpx.get(f"{server.url}/notebooks/{nb['id']}/api/status").status_code == 401
    with pytest.raises(Exception, match=r"1008|policy|rejected|closed"):
        execute(server.url, nb["id"], kernel, "print(1)", headers={"Authorization": f"Bearer {world['tokens']['bob']}"})

    # A save over the workspace's storage quota is refused and leaves nothing: not even the algorithm it named.
    workspace_id = nb["workspace_id"]
    with _http(world, "admin") as admin:
        assert admin.put(f"/api/v1/workspaces/{workspace_id}/storage", json={"limit": "1"}).status_code == 200
        over = alice.post(f"/api/v1/notebooks/{nb['id']}/save", json={"algorithm": "fresh"})
        assert (over.status_code, over.json()["error"]["code"]) == (409, "quota_exceeded"), over.text
        mine = alice.get("/api/v1/algorithms", params={"q": "fresh"}).json()["items"]
        assert [i["name"] for i in mine] == []
        assert admin.put(f"/api/v1/workspaces/{workspace_id}/storage", json={"limit": None}).status_code == 200

    # Save: the work dir becomes resnet:2; train from it: the job runs the code written in the notebook.
    saved = alice.post(f"/api/v1/notebooks/{nb['id']}/save", json={"description": "from my notebook"})
    assert saved.status_code == 201, saved.text
    assert saved.json()["reference"] == "resnet:2"
    spec = alice.get(f"/api/v1/notebooks/{nb['id']}/train-spec").json()["spec"]
    assert (spec["algorithm"], spec["image"], spec["datasets"]) == ("alice/resnet:2", "py-tiny:1", ["mnist:1"])
    job = alice.post("/api/v1/jobs", json={"spec": spec})
    assert job.status_code == 201, job.text
    deadline = time.monotonic() + DEADLINE_S
    while (got := alice.get(f"/api/v1/jobs/{job.json()['id']}").json())["status"] not in ("succeeded", "failed"):
        assert time.monotonic() < deadline, got
        time.sleep(0.3)  # polling interval: the loop exits on the status it reads
    log = alice.get(f"/api/v1/jobs/{job.json()['id']}/logs").text
    assert got["status"] == "succeeded", log
    assert "trained 42 18" in log

    # Stop keeps the work dir, start brings it back (rescheduled, a new attempt, a new token).
    assert alice.post(f"/api/v1/notebooks/{nb['id']}/start").json()["error"]["code"] == "invalid_transition"
    assert alice.post(f"/api/v1/notebooks/{nb['id']}/stop").status_code == 200
    _wait_status(alice, nb["id"], "stopped")
    refused = alice.post(f"/api/v1/notebooks/{nb['id']}/save", json={})
    assert (refused.status_code, refused.json()["error"]["code"]) == (409, "invalid_transition")
    assert alice.get(f"/notebooks/{nb['id']}/api/status").status_code == 404
    assert alice.post(f"/api/v1/notebooks/{nb['id']}/start").status_code == 200
    wait_for_lab(alice, nb["id"], DEADLINE_S)
    kernel = start_kernel(alice, nb["id"])
    assert "import tinypkg" in execute(server.url, nb["id"], kernel, "print(open('train.py').read())", headers=headers)
    world["notebook"] = nb["id"]


def test_a_notebook_whose_launcher_dies_is_lost_and_starts_again_with_its_work_dir(world: dict[str, Any]) -> None:
    alice = _http(world, "alice")
    notebook_id = world["notebook"]
    detail = _wait_status(alice, notebook_id, "running")
    handle = next(r for r in detail["replicas"] if r["attempt"] == detail["restart_count"])
    run_dir = world["server"].home / "jobs" / str(notebook_id) / "runs" / str(handle["attempt"]) / "notebook-0"
    status = json.loads((run_dir / "status.json").read_text())
    os.kill(int(status["launcher_pid"]), signal.SIGKILL)
    lost = _wait_status(alice, notebook_id, "failed")
    assert lost["failure_reason"] == "node_lost", lost
    assert alice.post(f"/api/v1/notebooks/{notebook_id}/start").status_code == 200
    wait_for_lab(alice, notebook_id, DEADLINE_S)
    kernel = start_kernel(alice, notebook_id)
    headers = {"Authorization": f"Bearer {world['tokens']['alice']}"}
    out = execute(world["server"].url, notebook_id, kernel, "print(open('train.py').read())", headers=headers)
    assert "import tinypkg" in out


def test_an_idle_notebook_is_warned_then_culled_while_a_busy_one_is_kept(world: dict[str, Any]) -> None:
    alice = _http(world, "alice")
    server: Server = world["server"]
    idle_id = world["notebook"]
    busy = alice.post(
        "/api/v1/notebooks",
        json={"spec": {"name": "busy", "workspace": "vision", "resources": {"cpu": 1, "memory": "512Mi"}}},
    ).json()
    wait_for_lab(alice, busy["id"], DEADLINE_S)
    kernel = start_kernel(alice, busy["id"])
    headers = {"Authorization": f"Bearer {world['tokens']['alice']}"}
    execute(server.url, busy["id"], kernel, "import time; time.sleep(600)", headers=headers, wait=False)
    _wait_status(alice, idle_id, "running")

    deadline = time.monotonic() + 30
    while (
        alice.get(f"/notebooks/{busy['id']}/api/kernels", params={"no_track_activity": 1}).json()[0]["execution_state"]
        != "busy"
    ):
        assert time.monotonic() < deadline, "the long cell never made its kernel busy"
        time.sleep(0.2)  # polling interval: the loop exits on the state it reads

    # The culler, run here against the server's database, judges "two hours from now": nobody used either since.
    settings = Settings(home=server.home, notebook_idle_timeout_s=3600, notebook_idle_warning_s=600)
    later = utcnow() + timedelta(hours=2)
    culled, verdicts = _run_culler(settings, later)
    assert culled == [], "nothing is culled before a warning"
    assert verdicts == {idle_id: "warn", busy["id"]: "keep"}, verdicts
    warned = alice.get(f"/api/v1/notebooks/{idle_id}").json()
    assert warned["warned"] is True
    assert warned["cull_at"] is not None
    culled, verdicts = _run_culler(settings, later + timedelta(minutes=11))
    assert (culled, verdicts) == ([idle_id], {idle_id: "cull", busy["id"]: "keep"})
    culled = _wait_status(alice, idle_id, "stopped")
    assert culled["culled_at"] is not None, culled
    assert alice.get(f"/api/v1/notebooks/{busy['id']}").json()["status"] == "running"
    assert alice.post(f"/api/v1/notebooks/{busy['id']}/stop").status_code == 200  # its CPU for the next tests
    events = alice.get("/api/v1/events", params={"job_id": idle_id}).json()
    kinds = [e["kind"] for e in events.get("items", events)]
    assert "notebook.idle_warning" in kinds
    assert "notebook.culled" in kinds


def _run_culler(settings: Settings, now: datetime) -> tuple[list[int], dict[int, str]]:
    """One pass of a culler of this process (its own loop and connections) at ``now``: culled ids, verdicts."""

    async def once() -> tuple[list[int], dict[int, str]]:
        db = Database(settings.effective_database_url)
        culler = NotebookCuller(db, settings, settings.resolve_secret_key())
        try:
            culled = await culler.run_once(now)
            return culled, {nb.job_id: d.verdict.value for nb, d in culler.last}
        finally:
            await culler.stop()
            await db.dispose()

    return asyncio.run(once())


def _ssh_key(tmp: Path, name: str) -> Path:
    key = tmp / f"{name}_ed25519"
    if not key.exists():
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", str(key)], check=True)
    return key


def test_the_owner_reaches_her_notebook_with_ssh_sftp_and_a_forward_and_nobody_else_does(
    world: dict[str, Any],
) -> None:
    alice, tmp = _http(world, "alice"), world["tmp"]
    notebook_id = world["notebook"]
    if alice.get(f"/api/v1/notebooks/{notebook_id}").json()["status"] != "running":
        assert alice.post(f"/api/v1/notebooks/{notebook_id}/start").status_code == 200
    wait_for_lab(alice, notebook_id, DEADLINE_S)
    keys = {name: _ssh_key(tmp, name) for name in ("alice", "bob")}
    for name, key in keys.items():
        with _http(world, name) as http:
            added = http.post("/api/v1/ssh-keys", json={"public_key": key.with_suffix(".pub").read_text()})
            assert added.status_code == 201, added.text
    access = alice.get(f"/api/v1/notebooks/{notebook_id}/ssh").json()
    assert access["host_alias"] == f"notebook-{notebook_id}"
    known = tmp / "known_hosts"
    known.write_text("".join(f"{line}\n" for line in access["known_hosts"]))

    def ssh(user: str, *args: str, program: str = "ssh", stdin: str | None = None) -> subprocess.CompletedProcess[str]:
        config = tmp / f"ssh_config_{user}"
        config.write_text(
            ssh_config(
                alias=access["host_alias"],
                gateway_host=access["gateway_host"],
                gateway_port=access["gateway_port"],
                user=user,
                identity_file=str(keys[user]),
                known_hosts_file=str(known),
            )
        )
        options = ["-F", str(config), "-o", f"UserKnownHostsFile={known}", "-o", "StrictHostKeyChecking=yes",
                   "-o", "BatchMode=yes"]  # fmt: skip
        return subprocess.run([program, *options, *args], input=stdin, capture_output=True, text=True, timeout=60)

    alias = access["host_alias"]
    shell = ssh("alice", alias, "pwd; id -u; echo $AICENTER_JOB_ID; test -f train.py && exit 7")
    assert shell.returncode == 7, shell.stderr
    work = str(world["server"].home / "jobs" / str(notebook_id) / "work")
    cwd, uid, job = shell.stdout.split()
    assert (cwd, job) == (work, str(notebook_id)), shell.stdout
    assert int(uid) >= 200_000, "the session runs as the workspace's uid, inside the sandbox"
    (tmp / "up.txt").write_text("from my laptop\n")
    batch = f"put {tmp / 'up.txt'} up.txt\nget train.py {tmp / 'down.py'}\n"
    copied = ssh("alice", "-b", "-", alias, program="sftp", stdin=batch)
    listening = subprocess.run(["ss", "-ltnp"], capture_output=True, text=True, check=False).stdout
    assert copied.returncode == 0, f"{copied.stderr}\n{access}\n{listening}"
    assert "import tinypkg" in (tmp / "down.py").read_text()
    assert (Path(work) / "up.txt").read_text() == "from my laptop\n"

    # ssh -L to the notebook's own loopback: JupyterLab's port there answers (and wants its token).
    port = alice.get(f"/api/v1/notebooks/{notebook_id}").json()["replicas"][-1]["ports"][-2]
    local = free_port()
    forward = subprocess.Popen(
        ["ssh", "-F", str(tmp / "ssh_config_alice"), "-o", f"UserKnownHostsFile={known}", "-o", "BatchMode=yes",
         "-o", "ExitOnForwardFailure=yes", "-N", "-L", f"127.0.0.1:{local}:127.0.0.1:{port}", alias],
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                answer = httpx.get(f"http://127.0.0.1:{local}/notebooks/{notebook_id}/api/status", timeout=5)
                break
            except httpx.TransportError:
                if forward.poll() is not None or time.monotonic() > deadline:
                    forward.kill()
                    pytest.fail(f"the forward never opened: {forward.communicate()[1]}")
                time.sleep(0.2)  # polling interval: the loop exits once the forward answers
        assert answer.status_code == 403  # JupyterLab itself: no token, no entry
    finally:
        forward.terminate()
        forward.wait(timeout=10)

    # bob has a registered key but it is not his notebook: the gateway refuses the hop.
    refused = ssh("bob", alias, "true")
    assert refused.returncode == 255
    assert "administratively prohibited" in refused.stderr or "open failed" in refused.stderr, refused.stderr


ATTACK = """
import json, os, socket, urllib.error, urllib.request
out = {{}}
for name, port in (("jupyter", {jupyter}), ("ssh", {ssh})):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=3).close()
        out[name] = "connected"
    except OSError as exc:
        out[name] = type(exc).__name__
request = urllib.request.Request(os.environ["AICENTER_API_URL"] + "/notebooks/{notebook}/api/status",
                                 headers={{"Authorization": "Bearer " + os.environ["AICENTER_TOKEN"]}})
try:
    out["proxy"] = urllib.request.urlopen(request, timeout=10).status
except urllib.error.HTTPError as exc:
    out["proxy"] = exc.code
print("ATTACK " + json.dumps(out), flush=True)
"""


def test_another_tenants_job_reaches_neither_the_notebooks_ports_nor_its_proxy(world: dict[str, Any]) -> None:
    alice = _http(world, "alice")
    notebook_id = world["notebook"]
    detail = _wait_status(alice, notebook_id, "running")
    jupyter, ssh = detail["replicas"][-1]["ports"][-2:]
    with _http(world, "carol") as carol:
        code = ATTACK.format(jupyter=jupyter, ssh=ssh, notebook=notebook_id)
        task = {"resources": {"cpu": 1, "memory": "256Mi"}, "command": f"python -c {shlex.quote(code)}"}
        spec = {"name": "attack", "workspace": "other", "tasks": [task]}
        job = carol.post("/api/v1/jobs", json={"spec": spec})
        assert job.status_code == 201, job.text
        deadline = time.monotonic() + DEADLINE_S
        while (got := carol.get(f"/api/v1/jobs/{job.json()['id']}").json())["status"] not in ("succeeded", "failed"):
            assert time.monotonic() < deadline, got
            time.sleep(0.3)  # polling interval: the loop exits on the status it reads
        log = carol.get(f"/api/v1/jobs/{job.json()['id']}/logs").text
    line = next(x for x in log.splitlines() if "ATTACK " in x)
    seen = json.loads(line.split("ATTACK ", 1)[1])
    # Its own network namespace: the host's 127.0.0.1, where the launcher publishes the ports, is not there.
    assert seen["jupyter"] in ("ConnectionRefusedError", "OSError", "TimeoutError"), seen
    assert seen["ssh"] in ("ConnectionRefusedError", "OSError", "TimeoutError"), seen
    assert seen["proxy"] == 403, seen  # a job token opens no notebook, not even its own user's
