"""A distributed training job end to end on a real ``aicenter up``, once on SQLite and once on PostgreSQL.

alice, a member of workspace vision, pushes a DDP training script and a small dataset with the CLI, submits a
2-replica PyTorch job (gloo on CPU) with ``aicenter job submit``, follows its log live with ``aicenter job logs
-f``, kills one replica's training process after the first checkpoint, sees the job restart and resume from the
checkpoint, and finds the trained model in the catalog with its lineage. Inside the job, rank 0 calls the API as
alice with ``$AICENTER_API_URL`` and ``$AICENTER_TOKEN``; the token stops working once the job has ended. Then (on
SQLite) she submits the same job from the console's form in Chromium and watches its output arrive live on the
job's page.

(The ``kill -9`` of the server with 20 running jobs is ``test_jobs_restart.py``.)
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server, signed_in
from tests.support.extras import skip_without
from tests.support.servers import clean_env, executable

skip_without("torch")  # in the test extras; CI installs it

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# Two Python processes importing torch on a shared 2-core machine take a while; the training itself is ~2 s.
JOB_DEADLINE_S = 300.0
LINE_DEADLINE_S = 180.0
STEPS = 30
CHECKPOINT_EVERY = 5

TRAIN = textwrap.dedent(
    """
    import io, json, os, time, urllib.request
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from aicenter.runtime import latest, report, restart_count, save_atomic

    STEPS = int(os.environ.get("STEPS", "30"))
    CHECKPOINT_EVERY = int(os.environ.get("CHECKPOINT_EVERY", "5"))
    # The first attempt waits at this step (0: never), so that the test's kill lands while training runs.
    HOLD_AT = int(os.environ.get("HOLD_AT", "0")) if restart_count() == 0 else 0

    dist.init_process_group("gloo")  # MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK from the platform
    rank, world = dist.get_rank(), dist.get_world_size()

    if rank == 0:  # the job reads itself through the platform's API, as its user
        request = urllib.request.Request(
            os.environ["AICENTER_API_URL"] + "/api/v1/jobs/" + os.environ["AICENTER_JOB_ID"],
            headers={"Authorization": "Bearer " + os.environ["AICENTER_TOKEN"]},
        )
        with urllib.request.urlopen(request, timeout=30) as answer:
            print("api user:", json.load(answer)["username"], flush=True)
        try:  # anything but its own job is refused to a job token
            urllib.request.urlopen(
                urllib.request.Request(
                    os.environ["AICENTER_API_URL"] + "/api/v1/users/me",
                    headers={"Authorization": "Bearer " + os.environ["AICENTER_TOKEN"]},
                ),
                timeout=30,
            )
            print("job token elsewhere: 200", flush=True)
        except urllib.error.HTTPError as refused:
            print("job token elsewhere:", refused.code, flush=True)
        # For the test only: the launcher keeps no copy of the token, and the test checks its revocation.
        (Path(os.environ["AICENTER_CHECKPOINT_DIR"]) / "token-for-test").write_text(os.environ["AICENTER_TOKEN"])

    rows = (Path(os.environ["AICENTER_DATA_DIR"]) / "toy-regression" / "data.csv").read_text().split()
    data = torch.tensor([[float(v) for v in row.split(",")] for row in rows[1:]])
    shard = data[rank::world]
    x, y = shard[:, :4], shard[:, 4:]

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.1)
    start = 0
    path = latest("step-*.pt") if restart_count() > 0 else None
    if path is not None:
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank} resumed from step {start}", flush=True)

    for step in range(start, STEPS):
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done = step + 1
        report(step=done, loss=loss.item())
        print(f"rank {rank} step {done} loss {loss.item():.4f}", flush=True)
        if done % CHECKPOINT_EVERY == 0 and rank == 0:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done}, buffer)
            save_atomic(f"step-{done:05d}.pt", buffer.getvalue())
            print(f"checkpoint at step {done}", flush=True)
        if done == HOLD_AT:
            print(f"rank {rank} holding at step {done}", flush=True)
            while True:
                time.sleep(0.1)
        time.sleep(0.05)  # a few lines a second: enough to watch them arrive

    if rank == 0:
        buffer = io.BytesIO()
        torch.save(model.state_dict(), buffer)
        (Path(os.environ["AICENTER_OUTPUT_DIR"]) / "model.pt").write_bytes(buffer.getvalue())
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)
    # Past the work: skip the interpreter's teardown, where torch's gloo threads now and then abort the process
    # ("terminate called without an active exception", exit 134) after a clean run.
    os._exit(0)
    """
)

JOB_YAML = textwrap.dedent(
    f"""\
    name: ddp-cli
    workspace: vision
    image: host
    algorithm: ddp-train:1
    datasets: [toy-regression:1]
    framework: pytorch
    tasks:
      - name: worker
        replicas: 2
        resources: {{cpu: 500m, memory: 1Gi}}
        command: python -u train.py
    env: {{STEPS: "{STEPS}", CHECKPOINT_EVERY: "{CHECKPOINT_EVERY}", HOLD_AT: "10", OMP_NUM_THREADS: "1",
          GLOO_SOCKET_IFNAME: lo}}
    retry: {{max_restarts: 2, on: [error]}}
    output_model: ddp-model
    """
)


# -- fixtures and helpers ----------------------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def jobs_server(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Server]:
    """``aicenter up`` on either database, with a short stop grace (the held rank 0 is stopped on restart)."""
    env = {"AICENTER_STOP_GRACE_S": "5"}
    if request.param == "postgres":
        env["AICENTER_DATABASE_URL"] = request.getfixturevalue("pg_url")
    srv = Server(tmp_path / "home", env=env).start()
    try:
        yield srv
    finally:
        if srv.proc is not None:
            srv.stop()


class Follower:
    """``aicenter job logs JOB -f`` in a subprocess, its lines read as they come (a thread feeds a queue)."""

    def __init__(self, cli: Cli, job_id: int) -> None:
        self.proc = subprocess.Popen(
            [executable("aicenter"), "job", "logs", str(job_id), "-f"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=clean_env(AICENTER_HOME=str(cli.home)),
        )
        self.lines: list[str] = []
        self._queue: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._queue.put(line.rstrip("\n"))
        self._queue.put(None)

    def wait_for(self, pattern: str, what: str) -> re.Match[str]:
        """Read lines until one matches ``pattern`` (timestamps stripped); fail past the deadline."""
        deadline = time.monotonic() + LINE_DEADLINE_S
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                line = None
                if time.monotonic() < deadline:
                    continue
            if line is None:
                self.proc.kill()
                pytest.fail(f"no line {what!r} in the followed log:\n" + "\n".join(self.lines[-30:]))
            self.lines.append(line)
            if found := re.search(pattern, line.split(" ", 1)[-1]):
                return found

    def finish(self) -> tuple[int, str]:
        """Wait for the follower to end by itself (it stops once the job has ended); its status and stderr."""
        try:
            code = self.proc.wait(timeout=LINE_DEADLINE_S)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            pytest.fail("`aicenter job logs -f` did not end after its job ended")
        while (line := self._queue.get(timeout=10)) is not None:
            self.lines.append(line)
        assert self.proc.stderr is not None
        return code, self.proc.stderr.read()


def _wait_job(cli: Cli, job_id: int, statuses: set[str], deadline_s: float = JOB_DEADLINE_S) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while True:
        job: dict[str, Any] = cli.json("job", "get", str(job_id))
        if job["status"] in statuses:
            return job
        if time.monotonic() > deadline:
            pytest.fail(f"job {job_id} stayed {job['status']} past {deadline_s:g} s: {job.get('message')}")
        time.sleep(0.5)  # polling interval, not synchronization: the loop exits on the status it reads


def _make_dataset(root: Path) -> None:
    """64 rows of y = x . w + 0.5 (deterministic), with a header."""
    root.mkdir()
    weights = (0.5, -1.0, 2.0, 0.25)
    rows = ["x0,x1,x2,x3,y"]
    for i in range(64):
        x = [((i * 7 + j * 3) % 11) / 10 - 0.5 for j in range(4)]
        rows.append(",".join(f"{v:.3f}" for v in [*x, sum(a * b for a, b in zip(x, weights, strict=True)) + 0.5]))
    (root / "data.csv").write_text("\n".join(rows) + "\n")


def _status_record(home: Path, job_id: int, attempt: int, replica: str) -> dict[str, Any]:
    """The launcher's status.json of one replica attempt (the local executor's run dir)."""
    path = home / "jobs" / str(job_id) / "runs" / str(attempt) / replica / "status.json"
    deadline = time.monotonic() + LINE_DEADLINE_S
    while True:
        if path.exists():
            record: dict[str, Any] = json.loads(path.read_text())
            if record.get("child_pid"):
                return record
        if time.monotonic() > deadline:
            pytest.fail(f"{path} has no child pid")
        time.sleep(0.1)


# -- the scenario ------------------------------------------------------------------------------------------------


def test_ddp_job_resumes_from_its_checkpoint_and_registers_its_model(
    jobs_server: Server, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    server = jobs_server

    # alice is a member (not an admin) of workspace vision.
    admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
    admin.run("user", "create", "alice", "--password-stdin", stdin="alice-Passw0rd-1\n")
    admin.run("workspace", "create", "vision")
    admin.run("member", "add", "alice", "--workspace", "vision")
    alice = signed_in(tmp_path, server, "alice", "alice-Passw0rd-1")

    # She pushes her training script and a small dataset.
    code = tmp_path / "ddp-train"
    code.mkdir()
    (code / "train.py").write_text(TRAIN)
    algorithm = alice.json("algorithm", "push", str(code), "--name", "ddp-train", "--no-progress")
    assert algorithm["ref"] == "ddp-train:1"
    _make_dataset(tmp_path / "toy-regression")
    dataset = alice.json(
        "dataset", "push", str(tmp_path / "toy-regression"), "--name", "toy-regression", "--no-progress"
    )
    assert dataset["ref"] == "toy-regression:1"

    # A 2-replica DDP job from the CLI; its log followed live.
    spec = tmp_path / "job.yaml"
    spec.write_text(JOB_YAML)
    job = alice.json("job", "submit", str(spec))
    job_id = job["id"]
    follower = Follower(alice, job_id)
    assert follower.wait_for(r"^api user: (\S+)$", "the API call from inside the job")[1] == "alice"
    assert follower.wait_for(r"^job token elsewhere: (\d+)$", "the refused API call")[1] == "403"
    checkpoint = int(follower.wait_for(r"^checkpoint at step (\d+)$", "the first checkpoint")[1])
    assert checkpoint == CHECKPOINT_EVERY
    assert alice.json("job", "get", str(job_id))["status"] in ("starting", "running")  # we read it live

    # Kill rank 1's training process; the gang restarts and resumes from the checkpoint.
    victim = _status_record(server.home, job_id, 0, "worker-1")
    os.kill(int(victim["child_pid"]), signal.SIGKILL)
    resumed = int(follower.wait_for(r"^rank 0 resumed from step (\d+)$", "the resume line")[1])
    assert resumed > 0, resumed
    assert resumed % CHECKPOINT_EVERY == 0, resumed
    follower.wait_for(r"^rank 0 done$", "the end of training")
    code_, stderr = follower.finish()
    assert code_ == 0, stderr
    assert "--- attempt 1 ---" in stderr
    assert "Traceback" not in stderr

    finished = _wait_job(alice, job_id, {"succeeded", "failed", "stopped"})
    assert finished["status"] == "succeeded", finished
    assert finished["restart_count"] == 1
    events = alice.json("job", "events", str(job_id))
    changes = [(e["to_status"], e["reason"], e["message"]) for e in events]
    restart = [i for i, change in enumerate(changes) if change[:2] == ("restarting", "error")]
    assert len(restart) == 1, changes
    assert changes[restart[0] + 1] == ("queued", "restart", "restart 1 after error"), changes
    attempts = sorted({(r["attempt"], r["index"], r["status"]) for r in finished["replicas"]})
    assert attempts[2:] == [(1, 0, "succeeded"), (1, 1, "succeeded")], attempts
    assert (0, 1, "failed") in attempts

    # The trained model is in the catalog with its lineage.
    versions = alice.json("model", "versions", "ddp-model")
    mine = [v for v in versions if v["metadata"].get("lineage", {}).get("job_id") == job_id]
    assert len(mine) == 1, versions
    assert mine[0]["metadata"]["lineage"] == {
        "job_id": job_id,
        "algorithm_version_id": algorithm["id"],
        "dataset_version_ids": [dataset["id"]],
    }
    assert finished["output_model_version_id"] == mine[0]["id"]

    # The job's token worked as alice (above), stays out of every log and of the plan, reads nothing but its
    # job, and is revoked with the job's end.
    runs = server.home / "jobs" / str(job_id) / "runs"
    token = (server.home / "jobs" / str(job_id) / "checkpoints" / "token-for-test").read_text()
    assert token.startswith("aic_")
    assert token not in (runs / "1" / "worker-0" / "plan.json").read_text()
    for log in [*runs.rglob("*.log"), server.home.parent / f"{server.home.name}-server.log"]:
        assert token not in log.read_text(errors="replace"), log
    assert all(token not in line for line in follower.lines)
    deadline = time.monotonic() + 30  # the verified-token cache (2 s) may answer a little longer
    while (
        answer := httpx.get(f"{server.url}/api/v1/jobs/{job_id}", headers={"Authorization": f"Bearer {token}"})
    ).status_code != 401:
        assert answer.status_code == 200, answer.text
        assert time.monotonic() < deadline, "the job's token still works after the job ended"
        time.sleep(0.2)

    # The same job from the console: the form, then the live log on the job's page. Once, on SQLite: the form and
    # the page go through the API the CLI half used on both databases, and a second 2-replica DDP run with its
    # Chromium cost ~30 s of a worker on the 2 CI cores.
    if request.node.callspec.params["jobs_server"] != "sqlite":
        return
    page = request.getfixturevalue("browser_page")
    page.goto(f"{server.url}/login")
    page.fill("#login-username", "alice")
    page.fill("#login-password", "alice-Passw0rd-1")
    with page.expect_navigation():
        page.click("#login-submit")
    page.goto(f"{server.url}/jobs/new")
    page.fill("#job-submit-name", "ddp-console")
    page.select_option("#job-submit-image", "host")
    page.select_option("#job-submit-algorithm", _option(page, "#job-submit-algorithm", "ddp-train:1"))
    page.select_option("#job-submit-datasets", _option(page, "#job-submit-datasets", "toy-regression:1"))
    page.select_option("#job-submit-framework", "pytorch")
    page.fill("#job-submit-replicas", "2")
    page.fill("#job-submit-cpu", "500m")
    page.fill("#job-submit-memory", "1Gi")
    page.fill("#job-submit-command", "python -u train.py")
    page.fill("#job-submit-env", f"STEPS={STEPS}\nOMP_NUM_THREADS=1\nGLOO_SOCKET_IFNAME=lo")
    with page.expect_navigation():
        page.click("#job-submit-submit")
    assert page.locator("[data-testid=page-title]").inner_text() == "ddp-console"
    log = page.locator("[data-testid=log-view]")
    log.filter(has_text="rank 0 step 1 loss").wait_for(timeout=LINE_DEADLINE_S * 1000)
    log.filter(has_text="rank 0 done").wait_for(timeout=LINE_DEADLINE_S * 1000)
    lines = [line.split(" ", 1)[1] for line in log.inner_text().splitlines()]
    assert "api user: alice" in lines, lines[:5]
    steps = [int(m[1]) for line in lines if (m := re.match(r"rank 0 step (\d+) loss", line))]
    assert steps == list(range(1, STEPS + 1)), lines
    page.locator("[data-testid=job-status][data-status=succeeded]").wait_for(timeout=LINE_DEADLINE_S * 1000)


def _option(page: Any, select: str, ref: str) -> str:
    """The value of the option of ``select`` whose text starts with ``ref``."""
    values: list[str] = page.eval_on_selector(
        select, "(s, ref) => [...s.options].filter(o => o.text.startsWith(ref)).map(o => o.value)", ref
    )
    assert len(values) == 1, (select, ref, values)
    return values[0]
