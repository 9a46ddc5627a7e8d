"""Inference services end to end on a real ``aicenter up`` (as root here: every replica in its bubblewrap sandbox,
its own uid and network namespace).

alice trains a small linear model (a job that fits it with numpy and writes ``model.onnx``; the platform saves
it as model version ``lin:1``), deploys it, and calls it with a service key through the standard Triton V2 client
(JSON and binary tensors) and with plain HTTP. bob (a member) calls it with his own token; carol (another
workspace), a revoked key and the platform admin are refused, and carol's job cannot reach the replica's port;
from the host, a call straight to that port without the replica's serve token gets 401.
The service scales to zero when idle and the next request is answered, not failed (the activator holds it while
a replica starts). A second version deployed as a 10 % canary serves a share of a steady load, is promoted, and
the old revision drains and stops: no request failed along the way. The platform admin lists and force-stops it.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import textwrap
import time
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in
from tests.e2e.serving_support import SteadyLoad, revision_replicas, traffic, user_http, wait

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

PASSWORDS = {"alice": "alice-Passw0rd-1", "bob": "bob-Passw0rd-1", "carol": "carol-Passw0rd-1"}

TRAIN = textwrap.dedent(
    """\
    # Fit y = x @ W + b by least squares on the dataset, and write it as an ONNX graph (MatMul, Add).
    import os
    from pathlib import Path

    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    data = np.loadtxt(Path(os.environ["AICENTER_DATA_DIR"]) / "points" / "points.csv", delimiter=",")
    x, y = data[:, :2], data[:, 2:]
    design = np.hstack([x, np.ones((len(x), 1))])
    solution, *_ = np.linalg.lstsq(design, y, rcond=None)
    w, b = solution[:2].astype(np.float32), solution[2:].astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b.reshape(1), "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, Path(os.environ["AICENTER_OUTPUT_DIR"]) / "model.onnx")
    print("fitted", w.ravel().tolist(), b.ravel().tolist(), flush=True)
    """
)


def _points(slope: tuple[float, float], intercept: float) -> str:
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, size=(64, 2))
    y = x @ np.array(slope) + intercept
    return "\n".join(f"{a:.6f},{b:.6f},{c:.6f}" for (a, b), c in zip(x, y, strict=True)) + "\n"


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp = tmp_path_factory.mktemp("serving")
    server = Server(tmp / "home", env={"AICENTER_SERVING_INTERVAL_S": "0.5"}).start()
    try:
        admin = signed_in(tmp, server, "admin", ADMIN_PASSWORD)
        for user, password in PASSWORDS.items():
            admin.run("user", "create", user, "--password-stdin", stdin=f"{password}\n")
        admin.run("workspace", "create", "vision", "--admin", "alice")
        admin.run("member", "add", "bob", "--workspace", "vision")
        admin.run("workspace", "create", "other", "--admin", "carol")
        alice = signed_in(tmp, server, "alice", PASSWORDS["alice"])
        code = tmp / "fit"
        code.mkdir()
        (code / "train.py").write_text(TRAIN)
        alice.json("algorithm", "push", str(code), "--name", "fit", "--workspace", "vision", "--no-progress")
        tokens = {
            name: httpx.post(f"{server.url}/api/v1/auth/login", json={"username": name, "password": pw}).json()["token"]
            for name, pw in {**PASSWORDS, "admin": ADMIN_PASSWORD}.items()
        }
        yield {"server": server, "alice": alice, "tokens": tokens, "tmp": tmp}
    finally:
        if server.proc is not None:
            server.stop()


def _train(world: dict[str, Any], http: httpx.Client, version: int, slope: tuple[float, float], b: float) -> None:
    """Push the points as a dataset version and train: the output becomes model lin:<version>."""
    data = world["tmp"] / f"points-{version}"
    data.mkdir()
    (data / "points.csv").write_text(_points(slope, b))
    world["alice"].json("dataset", "push", str(data), "--name", "points", "--workspace", "vision", "--no-progress")
    spec = {
        "name": f"fit-{version}",
        "workspace": "vision",
        "algorithm": "fit:1",
        "datasets": [f"points:{version}"],
        "tasks": [{"name": "worker", "resources": {"cpu": 1, "memory": "1Gi"}, "command": "python -u train.py"}],
        "output_model": "lin",
    }
    job = http.post("/api/v1/jobs", json={"spec": spec})
    assert job.status_code == 201, job.text
    done = wait("training", lambda: (j := http.get(f"/api/v1/jobs/{job.json()['id']}").json())["finished_at"] and j)
    assert (done["status"], done["output_model_version_id"] is not None) == ("succeeded", True), done


def _infer(base: str, path: str, headers: dict[str, str], x: list[list[float]]) -> httpx.Response:
    body = {"inputs": [{"name": "x", "shape": [len(x), 2], "datatype": "FP32", "data": [v for row in x for v in row]}]}
    return httpx.post(f"{base}{path}/v2/models/lin/infer", json=body, headers=headers, timeout=60)


def test_train_deploy_call_scale_to_zero_canary_promote_force_stop(world: dict[str, Any]) -> None:
    server: Server = world["server"]
    alice, bob, carol, admin = (user_http(world, u) for u in ("alice", "bob", "carol", "admin"))
    _train(world, alice, 1, (2.0, -1.0), 0.5)

    deployed = alice.post(
        "/api/v1/services",
        json={
            "spec": {
                "name": "lin",
                "workspace": "vision",
                "model": "lin:1",
                "resources": {"cpu": 1, "memory": "1Gi"},
                "min_replicas": 0,
                "max_replicas": 2,
                "scale_to_zero_grace_s": 2,
                "stable_window_s": 4,
            }
        },
    )
    assert deployed.status_code == 201, deployed.text
    sid, path = deployed.json()["id"], deployed.json()["url"]
    assert (path, deployed.json()["runtime"]) == ("/serve/vision/lin", "onnx")
    wait("ready", lambda: alice.get(f"/api/v1/services/{sid}").json()["status"] == "ready")
    assert [bool(r["node"]) for r in alice.get(f"/api/v1/services/{sid}").json()["replicas"]] == [True]
    key = alice.post(f"/api/v1/services/{sid}/keys", json={"name": "app"}).json()["key"]

    # The standard V2 client, unchanged: JSON and binary tensors, through the platform's URL and a service key.
    tritonclient = pytest.importorskip("tritonclient.http")
    client = tritonclient.InferenceServerClient(
        url=server.url.removeprefix("http://") + path, ssl=False, connection_timeout=60, network_timeout=60
    )
    headers = {"X-Api-Key": key}
    x = np.array([[1.0, 1.0], [0.0, 2.0]], dtype=np.float32)
    for binary in (False, True):
        tensor = tritonclient.InferInput("x", list(x.shape), "FP32")
        tensor.set_data_from_numpy(x, binary_data=binary)
        out = tritonclient.InferRequestedOutput("y", binary_data=binary)
        # A copy: the client adds its binary header to the dict it is given.
        answer = client.infer("lin", [tensor], outputs=[out], headers=dict(headers))
        np.testing.assert_allclose(answer.as_numpy("y").ravel(), [1.5, -1.5], atol=1e-4)

    # curl with the key, as the service's API page shows; bob with his own token; refusals for everybody else.
    body = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [[1, 0]]}]}
    curl = subprocess.run(
        ["curl", "-sS", "--fail-with-body", "-X", "POST", f"{server.url}{path}/v2/models/lin/infer",
         "-H", f"Authorization: Bearer {key}", "-H", "Content-Type: application/json", "-d", json.dumps(body)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert curl.returncode == 0, curl.stdout + curl.stderr
    assert json.loads(curl.stdout)["outputs"][0]["data"] == [pytest.approx(2.5, abs=1e-4)]
    assert _infer(server.url, path, {"Authorization": f"Bearer {world['tokens']['bob']}"}, [[0, 0]]).status_code == 200
    for who, expected in (("carol", 403), ("admin", 403)):
        refused = _infer(server.url, path, {"Authorization": f"Bearer {world['tokens'][who]}"}, [[0, 0]])
        assert (refused.status_code, "error" in refused.json()) == (expected, True), who
    assert _infer(server.url, path, {}, [[0, 0]]).status_code == 401
    # Straight to the replicas' published ports, as a host process or a job on the host's network would: no valid
    # serve token, 401 (the gateway sends each replica its own with every request).
    assert _infer(server.url, path, headers, [[0, 0]]).status_code == 200  # a replica runs now
    refusals = []
    for replica in alice.get(f"/api/v1/services/{sid}").json()["replicas"]:
        ports = alice.get(f"/api/v1/jobs/{replica['job_id']}/replicas").json()[-1]["ports"]
        if replica["status"] != "running" or not ports:
            continue
        port = ports[-1]
        for forged in ({}, {"X-Aicenter-Serve-Token": "0" * 64}):
            with contextlib.suppress(httpx.TransportError):  # a replica scaled down meanwhile is gone
                direct = _infer(f"http://127.0.0.1:{port}", "", forged, [[0, 0]])
                refusals.append((direct.status_code, "serve token" in direct.json()["error"]))
    assert refusals
    assert set(refusals) == {(401, True)}, refusals
    bad = httpx.post(f"{server.url}{path}/v2/models/lin/infer", json={"inputs": [{"name": "z"}]}, headers=headers)
    assert (bad.status_code, "error" in bad.json()) == (400, True)
    assert httpx.get(f"{server.url}/serve/vision/nope/v2/health/ready", headers=headers).status_code == 404
    spare = alice.post(f"/api/v1/services/{sid}/keys", json={"name": "spare"}).json()
    alice.delete(f"/api/v1/services/{sid}/keys/{spare['id']}")
    wait("revoked", lambda: _infer(server.url, path, {"X-Api-Key": spare["key"]}, [[0, 0]]).status_code == 403, 10)

    # Idle: scale to zero; the next request is held while a replica starts, and answered.
    wait("scaled to zero", lambda: alice.get(f"/api/v1/services/{sid}").json()["replicas_total"] == 0, 60)
    started = time.monotonic()
    cold = _infer(server.url, path, headers, [[1, 1]])
    cold_s = time.monotonic() - started
    assert cold.status_code == 200, cold.text
    print(json.dumps({"cold_start_s": round(cold_s, 3)}))

    # A second version as a 10 % canary under steady load, then promoted: nothing fails.
    _train(world, alice, 2, (1.0, 1.0), 0.0)
    with SteadyLoad(server.url, path, key) as load:
        canary = {"spec": {"model": "lin:2", "rollout": {"strategy": "canary", "canary_percent": 10}}}
        assert alice.patch(f"/api/v1/services/{sid}", json=canary).status_code == 200
        wait("canary", lambda: traffic(alice, sid) == [90, 10])
        wait("canary answers", lambda: load.revisions.get("2", 0) >= 3, 60)
        assert alice.post(f"/api/v1/services/{sid}/promote").status_code == 200
        wait(
            "old revision gone",
            lambda: revision_replicas(alice, sid) == [("retired", 0), ("ready", 1)],
            60,
        )
        time.sleep(1.0)  # requests after the switch
    assert load.failures == [], load.failures[:5]
    assert load.statuses.get(200, 0) > 20
    assert _infer(server.url, path, headers, [[1, 1]]).json()["outputs"][0]["data"] == [pytest.approx(2.0, abs=1e-4)]

    # The platform admin sees every service and force-stops it: requests get 503.
    listed = admin.get("/api/v1/services").json()["items"]
    assert [s["name"] for s in listed] == ["lin"]
    assert carol.get(f"/api/v1/services/{sid}").status_code == 404
    stopped = admin.post(f"/api/v1/services/{sid}/stop").json()
    assert (stopped["status"], stopped["message"]) == ("stopped", "stopped by a platform admin")
    wait("503", lambda: _infer(server.url, path, headers, [[0, 0]]).status_code == 503, 10)
    del bob
