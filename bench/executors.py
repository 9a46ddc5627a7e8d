"""Submit-to-first-output latency through aicenter on Ray and on Slurm vs. the engine's own path; node loss.

For each engine a 3-node cluster on this host (tests/support/ray.py, tests/support/slurm.py) and a real
``aicenter up`` on it (``AICENTER_EXECUTOR=ray|slurm``, as tests/e2e/test_engines.py runs it), then:

* ``aicenter``: ``echo hello`` (10m CPU, 16Mi, as bench/jobs.py) through the REST API, ``--sequential`` one after
  the other and ``--concurrent`` at once; latency = the launcher's timestamp of the first output line minus when
  the submit request started (bench/jobs.py's measurement, reused from there).
* ``engine``: the same work by the engine's own path. Ray: from a driver (``ray.init(address=...)``) an actor
  with ``num_cpus=0.01`` pinned to a node (``NodeAffinitySchedulingStrategy(soft=False)``, round robin over the
  nodes) whose method runs ``echo hello`` as a subprocess and returns when it read the line; latency = that
  time minus when the actor's creation started. Slurm: ``sbatch --wrap "echo hello"`` (bench/jobs.py's).
* ``overhead``: aicenter's p50 over the engine's, minus 1; goal <= 0.2 (aicenter adds at most 20 %).
* ``node_loss``: a long job (``sleep 600``, ``retry: {max_restarts: 1, on: [node_lost]}``, a whole node's 2
  CPUs) whose node is killed the way the engine sees a node die (Ray: ``kill -9`` of a non-head raylet; Slurm:
  ``SlurmCluster.kill_node``); ``detect_s`` = kill to the API showing the replica lost (or the job
  ``restarting``), ``restart_s`` = kill to the next attempt's replica running; API polled every 50 ms.

Prints one JSON document. Every process it starts is stopped by pid at the end (the clusters' own ``stop``).

    python bench/executors.py [--sequential 20] [--concurrent 50] [--no-ray] [--no-slurm] [--no-node-loss]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from jobs import ADMIN_PASSWORD, Aicenter, _aicenter_runs, _summary, sbatch_runs
from tests.support.ray import RayCluster, RayNodeSpec, ray_available
from tests.support.slurm import NodeSpec, SlurmCluster, slurm_available

GOALS = {"overhead_p50_ratio": 0.2}
ENGINE_SYNC_S = "1"
TIMEOUT_S = 600.0
NODE_LOSS_POLL_S = 0.05
LONG_SPEC = {
    "name": "long",
    "tasks": [{"name": "worker", "resources": {"cpu": "2", "memory": "64Mi"}, "command": "sleep 600"}],
    "retry": {"max_restarts": 1, "on": ["node_lost"]},
}


def _ratio(ours: dict[str, Any], theirs: dict[str, Any]) -> float | None:
    return round(ours["p50_ms"] / theirs["p50_ms"] - 1, 3) if theirs.get("p50_ms") else None


def _overhead(aicenter: dict[str, Any], engine: dict[str, Any]) -> dict[str, Any]:
    seq = _ratio(aicenter["sequential"], engine["sequential"])
    conc = _ratio(aicenter["concurrent"], engine["concurrent"])
    met = [r is not None and r <= GOALS["overhead_p50_ratio"] for r in (seq, conc)]
    return {"sequential_p50_ratio": seq, "concurrent_p50_ratio": conc, "goal_met": all(met)}


# -- aicenter on an engine --------------------------------------------------------------------------------------


class Server:
    """``aicenter up`` on an engine (bench/jobs.py's ``Aicenter`` with the engine's settings), signed in."""

    def __init__(self, work: Path, env: dict[str, str]) -> None:
        work.mkdir(parents=True)
        env = {**env, "AICENTER_JOBS_DIR": str(work / "jobs"), "AICENTER_ENGINE_SYNC_S": ENGINE_SYNC_S}
        self.server = Aicenter(work, env=env)
        self.token = ""

    def __enter__(self) -> Server:
        self.server.start()
        login = httpx.post(
            f"{self.server.url}/api/v1/auth/login", json={"username": "admin", "password": ADMIN_PASSWORD}, timeout=30
        )
        login.raise_for_status()
        self.token = login.json()["token"]
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.stop()

    def client(self) -> httpx.Client:
        return httpx.Client(base_url=self.server.url, headers={"Authorization": f"Bearer {self.token}"}, timeout=60)

    def log(self) -> str:
        return self.server.log.read_text(errors="replace")[-4000:]

    def engine_nodes(self, executor: str, count: int) -> list[dict[str, Any]]:
        """Wait until the inventory shows ``count`` ready nodes of ``executor`` (the engine-nodes controller)."""
        deadline = time.monotonic() + 120
        with self.client() as client:
            while time.monotonic() < deadline:
                body = client.get("/api/v1/nodes").json()
                items = body["items"] if isinstance(body, dict) else body
                nodes = [n for n in items if n.get("executor") == executor and n.get("state") == "ready"]
                if len(nodes) >= count:
                    return nodes
                time.sleep(0.2)
        raise RuntimeError(f"the {executor} nodes did not show up in the inventory:\n{self.log()}")

    def latency(self, sequential: int, concurrent: int) -> dict[str, Any]:
        return asyncio.run(_aicenter_runs(self.server.url, self.token, sequential, concurrent))

    def node_loss(self, nodes: list[dict[str, Any]], kill: Callable[[dict[str, Any]], None], keep: str | None) -> Any:
        """Submit long jobs until one runs on a node other than ``keep``; kill that node; time detect and restart."""
        with self.client() as client:
            jobs: list[int] = []
            victim: tuple[int, dict[str, Any]] | None = None
            while victim is None and len(jobs) < 2:
                response = client.post("/api/v1/jobs", json={"spec": LONG_SPEC})
                response.raise_for_status()
                jobs.append(int(response.json()["id"]))
                replica = self._wait_running(client, jobs[-1], attempt=0)
                node = next(n for n in nodes if n["name"] == replica["node_name"])
                if node["name"] != keep:
                    victim = (jobs[-1], node)
            if victim is None:
                raise RuntimeError("no long job landed off the kept node")
            job_id, node = victim
            killed = time.time()
            kill(node)
            detect = restart = None
            deadline = time.monotonic() + TIMEOUT_S
            while restart is None and time.monotonic() < deadline:
                job = client.get(f"/api/v1/jobs/{job_id}").json()
                now = time.time()
                first = [r for r in job["replicas"] if r["attempt"] == 0]
                if detect is None and (job["status"] == "restarting" or any(r["status"] == "lost" for r in first)):
                    detect = now - killed
                if any(r["attempt"] >= 1 and r["status"] == "running" for r in job["replicas"]):
                    restart = now - killed
                    detect = restart if detect is None else detect
                time.sleep(NODE_LOSS_POLL_S)
            for other in jobs:
                client.post(f"/api/v1/jobs/{other}/stop")
            for other in jobs:
                self._wait_finished(client, other)
            if restart is None:
                raise RuntimeError(f"job {job_id} did not restart after its node was killed:\n{self.log()}")
            return {
                "detect_s": round(detect, 2) if detect is not None else None,
                "restart_s": round(restart, 2),
                "killed_node": node["name"],
            }

    def _wait_running(self, client: httpx.Client, job_id: int, attempt: int) -> dict[str, Any]:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            job = client.get(f"/api/v1/jobs/{job_id}").json()
            for replica in job["replicas"]:
                if replica["attempt"] == attempt and replica["status"] == "running":
                    found: dict[str, Any] = replica
                    return found
            time.sleep(NODE_LOSS_POLL_S)
        raise RuntimeError(f"job {job_id} did not start:\n{self.log()}")

    def _wait_finished(self, client: httpx.Client, job_id: int) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if client.get(f"/api/v1/jobs/{job_id}").json()["status"] in ("succeeded", "failed", "stopped"):
                return
            time.sleep(0.2)


# -- Ray --------------------------------------------------------------------------------------------------------


def _ray_runs(address: str, sequential: int, concurrent: int) -> dict[str, Any]:
    """Plain Ray: an actor per ``echo hello``, pinned to a node round robin, timed to the line it read."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    @ray.remote
    class Echo:
        def run(self) -> float:
            proc = subprocess.Popen(["sh", "-c", "echo hello"], stdout=subprocess.PIPE)
            assert proc.stdout is not None
            proc.stdout.readline()
            seen = time.time()
            proc.wait()
            return seen

    ray.init(address=address, namespace="bench", logging_level="WARNING", log_to_driver=False)
    try:
        node_ids = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        counter = iter(range(10**9))

        def launch() -> tuple[Any, Any, float]:
            node = node_ids[next(counter) % len(node_ids)]
            started = time.time()
            actor = Echo.options(  # type: ignore[attr-defined]
                num_cpus=0.01, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)
            ).remote()
            return actor, actor.run.remote(), started

        def finish(batch: list[tuple[Any, Any, float]]) -> list[float]:
            seen = ray.get([ref for _, ref, _ in batch], timeout=TIMEOUT_S)
            for actor, _, _ in batch:
                ray.kill(actor)
            return [s - started for s, (_, _, started) in zip(seen, batch, strict=True)]

        finish([launch()])  # warm-up
        seq = [finish([launch()])[0] for _ in range(sequential)]
        conc = finish([launch() for _ in range(concurrent)])
    finally:
        ray.shutdown()
    return {"sequential": _summary(seq), "concurrent": _summary(conc)}


def run_ray(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    head = RayNodeSpec("127.0.0.2", cpus=2, labels={"aicenter.io/node": "head"})
    specs = [head, RayNodeSpec("127.0.0.3", cpus=2), RayNodeSpec("127.0.0.4", cpus=2)]
    result: dict[str, Any] = {"nodes": len(specs), "cpus_per_node": 2}
    with RayCluster(nodes=specs) as cluster:
        env = {
            "AICENTER_EXECUTOR": "ray",
            "AICENTER_RAY_ADDRESS": cluster.address,
            "AICENTER_RAY_AUTH_MODE": "disabled",
        }
        with Server(work / "aicenter-ray", env) as server:
            nodes = server.engine_nodes("ray", len(specs))
            result["aicenter"] = server.latency(args.sequential, args.concurrent)
            result["engine"] = _ray_runs(cluster.address, args.sequential, args.concurrent)
            result["overhead"] = _overhead(result["aicenter"], result["engine"])
            if not args.no_node_loss:
                result["node_loss"] = server.node_loss(
                    nodes, lambda node: cluster.kill_raylet(node["address"]), keep="head"
                )
    return result


# -- Slurm ------------------------------------------------------------------------------------------------------


def run_slurm(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    memory_mib = min(2048, os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20 // 4)
    specs = [NodeSpec(f"bench{i}", cpus=2, memory_mib=memory_mib) for i in (1, 2, 3)]
    result: dict[str, Any] = {"nodes": len(specs), "cpus_per_node": 2}
    # OverSubscribe=FORCE:100 so that 50 one-CPU sbatch jobs fit at once (as bench/jobs.py); Slurm's own
    # scheduler settings (batch_sched_delay as shipped), so that figures stay comparable with bench/jobs.py.
    cluster = SlurmCluster(
        work / "slurm",
        nodes=specs,
        partition="bench",
        partition_options="OverSubscribe=FORCE:100",
        scheduler_parameters="",
    )
    with cluster:
        env = {
            "AICENTER_EXECUTOR": "slurm",
            "AICENTER_SLURM_PARTITION": "bench",
            "AICENTER_SLURM_CONF": str(cluster.conf),
        }
        with Server(work / "aicenter-slurm", env) as server:
            nodes = server.engine_nodes("slurm", len(specs))
            result["aicenter"] = server.latency(args.sequential, args.concurrent)
            result["engine"] = sbatch_runs(cluster, work / "slurm-out", args.sequential, args.concurrent)
            result["overhead"] = _overhead(result["aicenter"], result["engine"])
            if not args.no_node_loss:
                result["node_loss"] = server.node_loss(nodes, lambda node: cluster.kill_node(node["name"]), keep=None)
    return result


# -- main -------------------------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sequential", type=int, default=20)
    parser.add_argument("--concurrent", type=int, default=50)
    parser.add_argument("--no-ray", action="store_true")
    parser.add_argument("--no-slurm", action="store_true")
    parser.add_argument("--no-node-loss", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aicenter-bench-executors-"))
    # Ray's driver prints its workers' warnings on fd 1: send them to stderr, so that stdout holds the JSON only.
    sys.stdout.flush()
    stdout = os.dup(1)
    os.dup2(2, 1)
    report: dict[str, Any] = {
        "benchmark": "executors",
        "machine": {"cores": os.cpu_count()},
        "goals": GOALS,
        "args": {"sequential": args.sequential, "concurrent": args.concurrent},
    }
    engines: list[tuple[str, Callable[[Path, argparse.Namespace], dict[str, Any]], str | None]] = []
    if not args.no_ray:
        engines.append(("ray", run_ray, ray_available()))
    if not args.no_slurm:
        engines.append(("slurm", run_slurm, slurm_available()))
    try:
        for name, run, unavailable in engines:
            if unavailable is not None:
                report[name] = {"skipped": unavailable}
                continue
            try:
                report[name] = run(work, args)
            except (RuntimeError, subprocess.CalledProcessError, OSError, httpx.HTTPError) as exc:
                detail = getattr(exc, "stderr", "") or ""
                report[name] = {"error": f"{exc} {detail}".strip()[-4000:]}
    finally:
        shutil.rmtree(work, ignore_errors=True)
        sys.stdout.flush()
        os.dup2(stdout, 1)
        os.close(stdout)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
