"""Ray Serve serving the same ONNX model, for bench/serving.py: a one-node Ray cluster started and stopped here.

The deployment does per request exactly what aicenter's model server does (``aicenter.runtime.serve``): the same
V2 JSON parsing and encoding (``aicenter.runtime.serve_v2``) and the same onnxruntime session
(``OnnxRuntime``: CPU provider, one intra-op and one inter-op thread), behind Ray Serve's HTTP proxy with the same
request body. Set up fairly: one replica of one CPU like the aicenter service, ``max_ongoing_requests`` well above
the 64 connections so that Serve never queues in front of a replica that could take the request, access logs off
(the platform's gateway does not log each request either), everything else Ray's defaults.

The driver calls (``serve.start``, ``serve.run``, ``serve.shutdown``) run in a short subprocess each
(``python bench/serving_ray.py deploy|shutdown ...``): the benchmark process drives the load, and a connected Ray
driver keeps threads of its own running in it. The cluster is ``tests.support.ray.RayCluster`` (``ray start
--head --block`` on 127.0.0.2, stopped by pid: SIGTERM, then SIGKILL; never ``ray stop``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from tests.support.ray import COMMON_ENV, RayCluster, RayNodeSpec  # noqa: E402
from tests.support.waiting import free_port  # noqa: E402

__all__ = ["DEPLOYMENT", "RayServe"]

HOST = "127.0.0.2"
APP = "bench"
DEPLOYMENT: dict[str, Any] = {
    "num_replicas": 1,
    "max_ongoing_requests": 256,
    "ray_actor_options": {"num_cpus": 1},
}
LOGGING = {"enable_access_log": False, "log_level": "WARNING"}


def _deploy(address: str, port: int, model_dir: str, name: str) -> None:
    import ray
    from ray import serve
    from starlette.requests import Request
    from starlette.responses import Response

    class OnnxV2:
        def __init__(self, model_dir: str, name: str) -> None:
            from aicenter.runtime.serve_runtimes import OnnxRuntime

            self.name = name
            self.runtime = OnnxRuntime()
            self.runtime.load(Path(model_dir), {})
            self.inputs = self.runtime.metadata()["inputs"]

        async def __call__(self, request: Request) -> Response:
            from aicenter.runtime.serve_v2 import V2Error, encode_infer_response, parse_infer_request, validate_inputs

            try:
                parsed = parse_infer_request(await request.body())
                validate_inputs(parsed, self.inputs)
                body, _ = encode_infer_response(self.name, "1", parsed, self.runtime.predict(parsed.inputs))
            except V2Error as exc:
                return Response(json.dumps({"error": exc.message}), exc.status, media_type="application/json")
            return Response(body, media_type="application/json")

    ray.init(address=address, namespace="serve-bench", logging_level="WARNING", log_to_driver=False)
    serve.start(http_options={"host": HOST, "port": port}, logging_config=LOGGING)
    deployment = serve.deployment(OnnxV2, name="onnx", logging_config=LOGGING, **DEPLOYMENT)
    serve.run(deployment.bind(model_dir, name), name=APP, route_prefix="/")
    ray.shutdown()


def _shutdown(address: str) -> None:
    import ray
    from ray import serve

    ray.init(address=address, namespace="serve-bench", logging_level="WARNING", log_to_driver=False)
    serve.shutdown()
    ray.shutdown()


class _DefaultCluster(RayCluster):
    """The test cluster without its short health checks (0.5 s): Ray's defaults, as a deployment has them. Its
    workers (the replica) import aicenter from this tree, as the driver does."""

    def env(self, head: bool = False) -> dict[str, str]:
        path = os.pathsep.join(p for p in (str(ROOT / "src"), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, **COMMON_ENV, "PYTHONPATH": path}


@dataclass
class RayServe:
    """A one-node Ray cluster (2 CPUs offered, like the host) with Serve and the model's application on it."""

    model_dir: Path
    name: str
    port: int = field(default_factory=free_port)
    cluster: RayCluster | None = None
    start_s: float = 0.0

    def _driver(self, *args: str) -> None:
        assert self.cluster is not None
        done = subprocess.run(
            [sys.executable, __file__, *args, "--address", self.cluster.address],
            env=self.cluster.env(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"serving_ray.py {args[0]} exited {done.returncode}:\n{done.stderr[-3000:]}")

    def start(self) -> None:
        self.cluster = _DefaultCluster(nodes=(RayNodeSpec(HOST, cpus=os.cpu_count() or 2),))
        self.cluster.start()
        self._driver("deploy", "--port", str(self.port), "--model-dir", str(self.model_dir), "--name", self.name)

    def stop(self) -> None:
        if self.cluster is None:
            return
        try:
            if self.cluster.procs:
                self._driver("shutdown")
        finally:
            self.cluster.stop()
            self.cluster = None

    def config(self) -> dict[str, Any]:
        return {
            "ray": version("ray"),
            "deployment": DEPLOYMENT,
            "logging": LOGGING,
            "http": f"{HOST}:{self.port}, proxy on the head node (Serve's default)",
            "node": f"one `ray start --head` on {HOST}, {os.cpu_count()} CPUs offered",
            # RAY_SERVE_* in this environment reach the nodes (e.g. RAY_SERVE_THROUGHPUT_OPTIMIZED=1).
            "env": {k: v for k, v in os.environ.items() if k.startswith("RAY_SERVE_")},
            "handler": "async __call__(starlette Request): serve_v2 parse/validate/encode + OnnxRuntime.predict",
        }


def main() -> None:
    parser = argparse.ArgumentParser(description="Ray Serve driver calls for bench/serving.py")
    parser.add_argument("action", choices=["deploy", "shutdown"])
    parser.add_argument("--address", required=True)
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--model-dir", default=tempfile.gettempdir())
    parser.add_argument("--name", default="tiny")
    args = parser.parse_args()
    if args.action == "deploy":
        _deploy(args.address, args.port, args.model_dir, args.name)
    else:
        _shutdown(args.address)


if __name__ == "__main__":
    main()
