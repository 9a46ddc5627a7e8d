"""The same 2-node DDP job on a real Slurm cluster and on a real Ray cluster, a node killed mid-training.

For each engine: a 3-node cluster on this host (tests/support/slurm.py, tests/support/ray.py), a real
``aicenter up --executor <engine>``, whose inventory shows the engine's nodes; alice pushes a DDP script and
submits a 2-replica PyTorch job whose replicas each need a whole node's CPUs, so they land on two different nodes.
While they train, the server is killed with ``kill -9`` and started again: it adopts the running replicas (no
restart). Then the test kills the node of one replica the way the engine sees a node die (Slurm: the
node's slurmd and job processes killed and the node set DOWN, as slurmctld does once it stops answering; Ray:
``kill -9`` of its raylet). The executor reports the replica's node lost, the inventory marks the node not ready,
the retry policy restarts the gang on the two remaining nodes, and training resumes from the checkpoint (the step
counter continues) and succeeds.
"""

from __future__ import annotations

import json
import re
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Cli, Server, signed_in
from tests.support.extras import skip_without
from tests.support.ray import RayCluster, RayNodeSpec, ray_available
from tests.support.slurm import NodeSpec, SlurmCluster, slurm_available

skip_without("torch")  # in the test extras; CI installs it

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

DEADLINE_S = 300.0
STEPS = 30
CHECKPOINT_EVERY = 5
HOLD_AT = 10

TRAIN = textwrap.dedent(
    """
    import io, json, os, socket, time
    from pathlib import Path

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from aicenter.runtime import latest, report, restart_count, save_atomic

    STEPS = int(os.environ["STEPS"])
    CHECKPOINT_EVERY = int(os.environ["CHECKPOINT_EVERY"])
    HOLD_AT = int(os.environ["HOLD_AT"]) if restart_count() == 0 else 0  # the kill lands while the first runs

    dist.init_process_group("gloo")  # MASTER_ADDR (rank 0's node), MASTER_PORT, WORLD_SIZE, RANK
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank} of {world} with master {os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    ddp = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05)
    true_w = torch.linspace(-1.0, 1.0, 8).unsqueeze(1)
    start = 0
    path = latest("step-*.pt") if restart_count() > 0 else None
    if path is not None:
        state = torch.load(path)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
        print(f"rank {rank} resumed from step {start}", flush=True)
    for step in range(start, STEPS):
        data = torch.Generator().manual_seed(1000 * step + rank)
        x = torch.randn(64, 8, generator=data)
        loss = torch.nn.functional.mse_loss(ddp(x), x @ true_w)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        done = step + 1
        report(step=done, loss=loss.item())
        if done % CHECKPOINT_EVERY == 0 and rank == 0:
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": done}, buffer)
            save_atomic(f"step-{done:05d}.pt", buffer.getvalue())
            print(f"checkpoint at step {done}", flush=True)
        if done == HOLD_AT:
            print(f"rank {rank} holding at step {done}", flush=True)
            while True:
                time.sleep(0.1)
    params = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
    out = Path(os.environ["AICENTER_OUTPUT_DIR"]) / f"rank{rank}.json"
    out.write_text(json.dumps({"rank": rank, "start": start, "params": params.hex()}))
    dist.destroy_process_group()
    print(f"rank {rank} done", flush=True)
    os._exit(0)  # past the work: gloo's threads sometimes abort the interpreter's teardown
    """
)

JOB_YAML = textwrap.dedent(
    f"""\
    name: ddp-nodes
    workspace: ml
    image: host
    algorithm: ddp-nodes:1
    framework: pytorch
    tasks:
      - name: worker
        replicas: 2
        resources: {{cpu: "2", memory: 512Mi}}
        command: {sys.executable} -u train.py
    env: {{STEPS: "{STEPS}", CHECKPOINT_EVERY: "{CHECKPOINT_EVERY}", HOLD_AT: "{HOLD_AT}", OMP_NUM_THREADS: "1",
          GLOO_SOCKET_IFNAME: lo}}
    retry: {{max_restarts: 2, on: [node_lost]}}
    """
)


@dataclass
class Engine:
    """A running 3-node engine: the server settings that use it and how to kill one of its nodes.

    Attributes:
        name: ``slurm`` or ``ray``.
        env: The AICENTER_* settings of a server on it.
        kill_node: Kill a node (the API's record of it) the way the engine sees a node die.
        keep: Nodes the test must not kill (Ray's head holds the cluster's state).
    """

    name: str
    env: dict[str, str]
    kill_node: Callable[[dict[str, Any]], None]
    keep: frozenset[str] = frozenset()


@pytest.fixture
def slurm_engine(tmp_path: Path) -> Iterator[Engine]:
    if (reason := slurm_available()) is not None:
        pytest.skip(reason)
    nodes = [
        NodeSpec(f"e2e{i}", cpus=2, memory_mib=2048, gpus=(("a100", 1),), features=(f"rack_r{i}",)) for i in (1, 2, 3)
    ]
    with SlurmCluster(tmp_path / "slurm", nodes=nodes, partition="aicenter") as cluster:

        def kill(node: dict[str, Any]) -> None:
            cluster.kill_node(node["name"])

        yield Engine(
            "slurm",
            {
                "AICENTER_EXECUTOR": "slurm",
                "AICENTER_SLURM_PARTITION": "aicenter",
                "AICENTER_SLURM_CONF": str(cluster.conf),
            },
            kill,
        )


@pytest.fixture
def ray_engine(tmp_path: Path) -> Iterator[Engine]:
    if (reason := ray_available()) is not None:
        pytest.skip(reason)
    a100 = {"aicenter/nvidia-a100": 1}
    # Loopback addresses of their own: the executor contract's cluster (127.0.0.2-4) may run at the same time.
    nodes = [
        RayNodeSpec("127.0.0.5", cpus=2, resources=a100, labels={"aicenter.io/node": "head", "rack": "r1"}),
        RayNodeSpec("127.0.0.6", cpus=2, resources=a100, labels={"rack": "r2"}),
        RayNodeSpec("127.0.0.7", cpus=2, resources=a100, labels={"rack": "r3"}),
    ]
    with RayCluster(nodes=nodes) as cluster:  # its own short temp dir: Ray's socket paths must stay short

        def kill(node: dict[str, Any]) -> None:
            cluster.kill_raylet(node["address"])  # kill -9: the node dies as a crashed host does

        yield Engine(
            "ray",
            {"AICENTER_EXECUTOR": "ray", "AICENTER_RAY_ADDRESS": cluster.address, "AICENTER_RAY_AUTH_MODE": "disabled"},
            kill,
            keep=frozenset({"head"}),  # the head holds the cluster's state: killing it ends the cluster
        )


def _wait(what: str, check: Callable[[], Any], server: Server, deadline_s: float = DEADLINE_S) -> Any:
    deadline = time.monotonic() + deadline_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}:\n{server.log()[-4000:]}")
        time.sleep(0.5)  # polling interval, not synchronization: the loop exits on what it reads


def _console_nodes(server: Server) -> dict[str, tuple[str, str]]:
    """The console's nodes page, signed in as the admin: each node's engine and accelerators."""
    with httpx.Client(base_url=server.url, timeout=30) as browser:
        form = browser.get("/login")
        csrf = re.search(r'name="csrf_token" value="([^"]+)"', form.text)
        assert csrf is not None, form.text
        signed_in = browser.post(
            "/login", data={"username": "admin", "password": ADMIN_PASSWORD, "csrf_token": csrf[1], "next": "/nodes"}
        )
        assert signed_in.status_code in (200, 303), signed_in.text
        page = browser.get("/nodes")
        assert page.status_code == 200
    rows = re.findall(
        r'data-node-name="([^"]+)".*?data-testid="node-executor">([^<]+)<.*?<span class="badge">([^<]+)</span>',
        page.text,
        flags=re.S,
    )
    return {name: (engine, accelerators) for name, engine, accelerators in rows}


def _replica_log(cli: Cli, job_id: int, index: int, attempt: int) -> str:
    result = cli.run("job", "logs", str(job_id), "--replica", str(index), "--attempt", str(attempt), check=False)
    return result.stdout if result.returncode == 0 else ""


def run_ddp_across_nodes_with_a_node_killed(engine: Engine, tmp_path: Path) -> None:
    env = {
        **engine.env,
        "AICENTER_JOBS_DIR": str(tmp_path / "jobs"),  # every node's shared filesystem (here: this host)
        "AICENTER_ENGINE_SYNC_S": "1",
        "AICENTER_STOP_GRACE_S": "5",
    }
    server = Server(tmp_path / "home", env=env).start()
    try:
        admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)

        # The console's and the API's nodes are the engine's.
        def engine_nodes() -> list[dict[str, Any]] | None:
            nodes = [n for n in admin.json("node", "list") if n["executor"] == engine.name and n["state"] == "ready"]
            return nodes if len(nodes) == 3 else None

        nodes = _wait(f"the {engine.name} nodes in the inventory", engine_nodes, server)
        assert all(n["labels"]["aicenter.io/executor"] == engine.name for n in nodes)
        # Their accelerators (one fake A100 each) and their racks (Slurm features, Ray labels) as the engine says.
        assert [[a["type"] for a in n["accelerators"]] for n in nodes] == [["nvidia-a100"]] * 3
        assert sorted(n["rack"] for n in nodes) == ["r1", "r2", "r3"]
        assert _console_nodes(server) == {n["name"]: (engine.name, "1 \u00d7 nvidia-a100") for n in nodes}

        admin.run("user", "create", "alice", "--password-stdin", stdin="alice-Passw0rd-1\n")
        admin.run("workspace", "create", "ml")
        admin.run("member", "add", "alice", "--workspace", "ml")
        alice = signed_in(tmp_path, server, "alice", "alice-Passw0rd-1")
        code = tmp_path / "ddp-nodes"
        code.mkdir()
        (code / "train.py").write_text(TRAIN)
        alice.json("algorithm", "push", str(code), "--name", "ddp-nodes", "--no-progress")
        spec = tmp_path / "job.yaml"
        spec.write_text(JOB_YAML)
        job_id = alice.json("job", "submit", str(spec))["id"]

        def holding() -> dict[str, Any] | None:
            logs = [_replica_log(alice, job_id, i, 0) for i in (0, 1)]
            if all(f"holding at step {HOLD_AT}" in log for log in logs):
                job: dict[str, Any] = alice.json("job", "get", str(job_id))
                return job
            return None

        job = _wait("both ranks to train to the hold point", holding, server)
        first = {r["index"]: r["node_name"] for r in job["replicas"] if r["attempt"] == 0}
        assert len(set(first.values())) == 2, f"the replicas share a node: {first}"
        assert f"checkpoint at step {HOLD_AT}" in _replica_log(alice, job_id, 0, 0)

        # kill -9 of the server: the replicas keep running on the engine, and the restarted server adopts them.
        assert server.proc is not None
        server.proc.kill()
        server.proc.wait(timeout=30)
        server.proc = None
        server = Server(server.home, port=server.port, env=env).start()
        adopted: dict[str, Any] = alice.json("job", "get", str(job_id))
        assert adopted["status"] == "running", adopted
        assert adopted["restart_count"] == 0
        assert {r["index"]: r["node_name"] for r in adopted["replicas"]} == first
        victim = first[1] if first[1] not in engine.keep else first[0]
        engine.kill_node(next(n for n in nodes if n["name"] == victim))

        def finished() -> dict[str, Any] | None:
            job: dict[str, Any] = alice.json("job", "get", str(job_id))
            return job if job["status"] in ("succeeded", "failed", "stopped") else None

        job = _wait("the job to restart elsewhere and finish", finished, server)
        assert job["status"] == "succeeded", (job, server.log()[-4000:])
        assert job["restart_count"] == 1
        events = [(e["to_status"], e["reason"]) for e in alice.json("job", "events", str(job_id))]
        assert ("restarting", "node_lost") in events, events
        second = {r["index"]: r["node_name"] for r in job["replicas"] if r["attempt"] == 1}
        assert victim not in second.values(), (victim, second)
        assert len(set(second.values())) == 2
        log = _replica_log(alice, job_id, 0, 1)
        assert f"rank 0 resumed from step {HOLD_AT}" in log, log
        lost = [n for n in admin.json("node", "list") if n["name"] == victim]
        assert [n["state"] for n in lost] == ["not_ready"]
        output = tmp_path / "jobs" / str(job_id) / "output"
        results = [json.loads((output / f"rank{r}.json").read_text()) for r in (0, 1)]
        assert [r["start"] for r in results] == [HOLD_AT, HOLD_AT]
        assert results[0]["params"] == results[1]["params"]  # the ranks agree
    finally:
        if server.proc is not None:
            server.stop()


@pytest.mark.slurm
def test_slurm_ddp_resumes_on_other_nodes_after_a_node_goes_down(slurm_engine: Engine, tmp_path: Path) -> None:
    run_ddp_across_nodes_with_a_node_killed(slurm_engine, tmp_path)


@pytest.mark.ray
def test_ray_ddp_resumes_on_other_nodes_after_a_raylet_is_killed(ray_engine: Engine, tmp_path: Path) -> None:
    run_ddp_across_nodes_with_a_node_killed(ray_engine, tmp_path)
