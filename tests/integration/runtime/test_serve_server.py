"""The model server as a replica runs it: ``python -m aicenter.runtime.serve`` in a subprocess, real tiny models
(ONNX, TorchScript, scikit-learn, a custom predictor), spoken to over HTTP with httpx and the Triton client."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[3] / "src"

PREDICTOR = """
import os, time
from pathlib import Path
import numpy as np

def _wait(variable):
    gate = os.environ.get(variable)
    while gate and not Path(gate).exists():
        time.sleep(0.01)

class Predictor:
    def load(self, model_dir):
        _wait("GATE_LOAD")
        self.scale = float((Path(model_dir) / "scale.txt").read_text())

    def predict(self, inputs):
        if "fail" in inputs:
            raise RuntimeError("the predictor broke")
        if "wait" in inputs:
            Path(os.environ["PREDICT_STARTED"]).touch()
            _wait("GATE_PREDICT")
        return {"y": inputs["x"] * self.scale, "n": np.array([b"ok"], dtype=object)}

    def metadata(self):
        return {"inputs": [{"name": "x", "datatype": "FP64", "shape": [-1]}], "outputs": []}
"""


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    port: int

    def infer_url(self, model: str = "m") -> str:
        return f"{self.url}/v2/models/{model}/infer"


# The server as an image without uvloop runs it: the stdlib event loop (uvloop is used where it is installed).
STDLIB_LOOP = (
    "import runpy, sys; sys.modules['uvloop'] = None; runpy.run_module('aicenter.runtime.serve', run_name='__main__')"
)


def _start(
    model_dir: Path, config: dict[str, Any], *, stdlib_loop: bool = False, bare: bool = False, **env: str
) -> Server:
    environ = {
        **os.environ,
        "PYTHONPATH": str(SRC),
        "AICENTER_SERVE_BIND": "127.0.0.1",
        "AICENTER_SERVE_PORT": "0",
        "AICENTER_MODEL_DIR": str(model_dir),
        "AICENTER_SERVE_CONFIG": json.dumps({"model_name": "m", "model_version": "3", **config}),
        **env,
    }
    flags = ["-S"] if bare else []  # -S: no site-packages beyond PYTHONPATH, like a venv without aicenter
    process = subprocess.Popen(
        [sys.executable, *flags, *(["-c", STDLIB_LOOP] if stdlib_loop else ["-m", "aicenter.runtime.serve"])],
        env=environ,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert process.stderr is not None
    line = process.stderr.readline()
    assert "listening on 127.0.0.1:" in line, line
    port = int(line.split("127.0.0.1:", 1)[1].split(",", 1)[0])
    return Server(process, f"http://127.0.0.1:{port}", port)


def _stop(server: Server) -> str:
    if server.process.poll() is None:
        server.process.send_signal(signal.SIGTERM)
    server.process.wait(timeout=30)
    assert server.process.stderr is not None
    return server.process.stderr.read()


@pytest.fixture
def start() -> Iterator[Any]:
    servers: list[Server] = []

    def run(
        model_dir: Path, config: dict[str, Any], *, stdlib_loop: bool = False, bare: bool = False, **env: str
    ) -> Server:
        servers.append(_start(model_dir, config, stdlib_loop=stdlib_loop, bare=bare, **env))
        return servers[-1]

    yield run
    for server in servers:
        if server.process.poll() is None:
            server.process.kill()
            server.process.wait()


def _wait_ready(client: httpx.Client, server: Server) -> None:
    while client.get(f"{server.url}/v2/health/ready").status_code != 200:
        assert server.process.poll() is None, "the server exited while loading"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def onnx_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Mul", ["X", "two"], ["T"]), helper.make_node("Add", ["T", "one"], ["Y"])],
        "affine",
        [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["batch", 3])],
        [
            helper.make_tensor("two", TensorProto.FLOAT, [], [2.0]),
            helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8  # what the installed onnxruntime reads
    directory = tmp_path_factory.mktemp("onnx")
    onnx.save(model, str(directory / "model.onnx"))
    return directory


def test_onnx_json_and_binary_infer_metadata_and_errors(start: Any, onnx_dir: Path) -> None:
    server = start(onnx_dir, {"runtime": "onnx", "max_body_bytes": 4096})
    with httpx.Client() as client:
        _wait_ready(client, server)
        meta = client.get(f"{server.url}/v2/models/m").json()
        assert meta["inputs"] == [{"name": "X", "datatype": "FP32", "shape": [-1, 3]}]
        assert meta["versions"] == ["3"]
        assert client.get(f"{server.url}/v2/models/m/versions/3/ready").status_code == 200

        body = {
            "id": "a",
            "inputs": [{"name": "X", "shape": [2, 3], "datatype": "FP32", "data": [[1, 2, 3], [4, 5, 6]]}],
        }
        answer = client.post(server.infer_url(), json=body)
        assert answer.status_code == 200, answer.text
        assert answer.json() == {
            "model_name": "m",
            "model_version": "3",
            "id": "a",
            "outputs": [{"name": "Y", "datatype": "FP32", "shape": [2, 3], "data": [3, 5, 7, 9, 11, 13]}],
        }

        # The binary extension, written by hand: JSON header, then the raw little-endian tensor.
        x = np.array([[0.5, 1, 2]], dtype="<f4")
        header = json.dumps(
            {
                "inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "parameters": {"binary_data_size": 12}}],
                "outputs": [{"name": "Y", "parameters": {"binary_data": True}}],
            }
        ).encode()
        answer = client.post(
            f"{server.url}/v2/models/m/versions/3/infer",
            content=header + x.tobytes(),
            headers={"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"},
        )
        assert answer.status_code == 200, answer.text
        length = int(answer.headers["Inference-Header-Content-Length"])
        doc = json.loads(answer.content[:length])
        assert doc["outputs"] == [
            {"name": "Y", "datatype": "FP32", "shape": [1, 3], "parameters": {"binary_data_size": 12}}
        ]
        np.testing.assert_array_equal(np.frombuffer(answer.content[length:], dtype="<f4"), [2, 3, 5])

        wrong = {"inputs": [{"name": "X", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
        answer = client.post(server.infer_url(), json=wrong)
        assert answer.status_code == 400
        assert "input 'X'" in answer.json()["error"]
        wrong["inputs"][0]["datatype"] = "FP64"
        assert "datatype FP64" in client.post(server.infer_url(), json=wrong).json()["error"]

        assert client.post(server.infer_url("other"), json=body).status_code == 404
        assert "unknown model 'other'" in client.post(server.infer_url("other"), json=body).json()["error"]
        assert client.post(f"{server.url}/v2/models/m/versions/9/infer", json=body).status_code == 404
        assert client.get(f"{server.url}/v2/nothing").status_code == 404
        assert client.get(server.infer_url()).status_code == 405
        assert client.post(server.infer_url(), content=b"{not json").status_code == 400

        too_big = client.post(server.infer_url(), content=b" " * 5000)
        assert too_big.status_code == 413
        assert "over the limit" in too_big.json()["error"]

        def chunks() -> Iterator[bytes]:  # Transfer-Encoding: chunked, in two pieces
            raw = json.dumps(body).encode()
            yield raw[:10]
            yield raw[10:]

        answer = client.post(server.infer_url(), content=chunks())
        assert answer.status_code == 200, answer.text
        assert answer.json()["outputs"][0]["data"] == [3, 5, 7, 9, 11, 13]
    assert "stopped" in _stop(server)
    assert server.process.returncode == 0


@pytest.mark.slow  # imports torch and scikit-learn in the model server: ~20 s
def test_torchscript_and_sklearn_models_serve(start: Any, tmp_path: Path) -> None:
    torch = pytest.importorskip("torch")
    joblib = pytest.importorskip("joblib")
    linear_model = pytest.importorskip("sklearn.linear_model")

    class Twice(torch.nn.Module):  # type: ignore[misc,name-defined]
        def forward(self, x: Any) -> Any:
            return x * 2, x.sum(dim=1)

    torch_dir = tmp_path / "torch"
    torch_dir.mkdir()
    # Traced rather than scripted: scripting reads annotations, and ``torch`` is not a global of this module.
    torch.jit.trace(Twice(), torch.ones(1, 2)).save(str(torch_dir / "model.pt"))
    sklearn_dir = tmp_path / "sklearn"
    sklearn_dir.mkdir()
    regression = linear_model.LinearRegression().fit(np.array([[0.0, 0], [1, 0], [0, 1]]), np.array([1.0, 3, 4]))
    joblib.dump(regression, sklearn_dir / "model.joblib")

    torch_server = start(torch_dir, {"runtime": "torchscript"})
    # The config as the job spec's ``serving`` section writes it: the model name is the service's.
    sklearn_server = start(sklearn_dir, {"runtime": "sklearn", "service": "m", "model_name": None, "workers": 2})
    with httpx.Client() as client:
        _wait_ready(client, torch_server)
        data = {"inputs": [{"name": "x", "shape": [1, 2], "datatype": "FP32", "data": [1, 2]}]}
        outputs = client.post(torch_server.infer_url(), json=data).json()["outputs"]
        assert [(o["name"], o["data"]) for o in outputs] == [("output__0", [2, 4]), ("output__1", [3])]

        _wait_ready(client, sklearn_server)
        data = {"inputs": [{"name": "x", "shape": [2, 2], "datatype": "FP64", "data": [1, 1, 2, 0]}]}
        answer = client.post(sklearn_server.infer_url(), json=data).json()
        assert answer["outputs"][0]["name"] == "predict"
        np.testing.assert_allclose(answer["outputs"][0]["data"], [6, 5])
        data = {"inputs": [{"name": "x", "shape": [1, 3], "datatype": "FP64", "data": [1, 1, 2]}]}
        wrong = client.post(sklearn_server.infer_url(), json=data)
        assert wrong.status_code == 400
        assert "input 'x'" in wrong.json()["error"]


@pytest.fixture
def predictor_dirs(tmp_path: Path) -> tuple[Path, Path]:
    code, model = tmp_path / "code", tmp_path / "model"
    code.mkdir()
    model.mkdir()
    (code / "predictor.py").write_text(PREDICTOR)
    (model / "scale.txt").write_text("3")
    return code, model


def test_readiness_waits_for_the_load_and_the_predictor_signature_is_checked(
    start: Any, tmp_path: Path, predictor_dirs: tuple[Path, Path]
) -> None:
    code, model = predictor_dirs
    gate = tmp_path / "load.gate"
    config = {"runtime": "python", "entry": "predictor.py:Predictor"}
    server = start(model, config, AICENTER_CODE_DIR=str(code), GATE_LOAD=str(gate))
    body = {"inputs": [{"name": "x", "shape": [2], "datatype": "FP64", "data": [1, 2]}]}
    with httpx.Client() as client:
        assert client.get(f"{server.url}/v2/health/live").status_code == 200
        assert client.get(f"{server.url}/v2/health/ready").status_code == 400
        assert client.get(f"{server.url}/v2/models/m/ready").json() == {"name": "m", "ready": False}
        assert client.post(server.infer_url(), json=body).status_code == 503
        gate.touch()
        _wait_ready(client, server)
        assert client.get(f"{server.url}/v2/models/m/ready").status_code == 200
        assert client.get(f"{server.url}/v2/models/m").json()["inputs"] == [
            {"name": "x", "datatype": "FP64", "shape": [-1]}
        ]
        answer = client.post(server.infer_url(), json=body).json()
        assert answer["outputs"] == [
            {"name": "y", "datatype": "FP64", "shape": [2], "data": [3, 6]},
            {"name": "n", "datatype": "BYTES", "shape": [1], "data": ["ok"]},
        ]
        # The predictor's metadata is its signature: an unknown input is refused before predict.
        extra = {"inputs": [*body["inputs"], {"name": "fail", "shape": [1], "datatype": "INT8", "data": [1]}]}
        assert "unexpected input 'fail'" in client.post(server.infer_url(), json=extra).json()["error"]
    assert _stop(server)


def test_a_failing_predict_is_a_500_with_the_reason(start: Any, predictor_dirs: tuple[Path, Path]) -> None:
    code, model = predictor_dirs
    # No predictor metadata here: the revision's own (empty) signature lets any input through to predict.
    (code / "plain.py").write_text(PREDICTOR.replace("def metadata(self):", "def _unused(self):"))
    server = start(model, {"runtime": "python", "entry": "plain.py:Predictor"}, AICENTER_CODE_DIR=str(code))
    body = {"inputs": [{"name": "fail", "shape": [1], "datatype": "INT8", "data": [1]}]}
    with httpx.Client() as client:
        _wait_ready(client, server)
        answer = client.post(server.infer_url(), json=body)
        assert answer.status_code == 500
        assert answer.json() == {"error": "RuntimeError: the predictor broke"}
    assert "predict failed: RuntimeError" in _stop(server)


def test_a_model_that_cannot_load_exits_non_zero_with_the_reason(start: Any, predictor_dirs: tuple[Path, Path]) -> None:
    code, model = predictor_dirs
    server = start(model, {"runtime": "python", "entry": "predictor.py:Missing"}, AICENTER_CODE_DIR=str(code))
    assert server.process.wait(timeout=60) == 1
    assert server.process.stderr is not None
    assert "failed to load: ValueError: predictor.py has no class 'Missing'" in server.process.stderr.read()


@pytest.mark.parametrize("stdlib_loop", [False, True], ids=["default-loop", "stdlib-loop"])
def test_sigterm_finishes_the_request_in_flight_and_exits_zero(
    start: Any, tmp_path: Path, predictor_dirs: tuple[Path, Path], stdlib_loop: bool
) -> None:
    code, model = predictor_dirs
    started, gate = tmp_path / "started", tmp_path / "predict.gate"
    (code / "plain.py").write_text(PREDICTOR.replace("def metadata(self):", "def _unused(self):"))
    server = start(
        model,
        {"runtime": "python", "entry": "plain:Predictor"},
        stdlib_loop=stdlib_loop,
        AICENTER_CODE_DIR=str(code),
        PREDICT_STARTED=str(started),
        GATE_PREDICT=str(gate),
    )
    body = {
        "inputs": [
            {"name": "x", "shape": [1], "datatype": "FP64", "data": [2]},
            {"name": "wait", "shape": [1], "datatype": "INT8", "data": [1]},
        ]
    }
    results: list[httpx.Response] = []
    with httpx.Client(timeout=60) as client:
        _wait_ready(client, server)
        thread = threading.Thread(target=lambda: results.append(client.post(server.infer_url(), json=body)))
        thread.start()
        while not started.exists():
            time.sleep(0.01)
        server.process.send_signal(signal.SIGTERM)
        while True:  # the listener closes first: new connections are refused while the request runs
            try:
                socket.create_connection(("127.0.0.1", server.port), timeout=5).close()
            except ConnectionRefusedError:
                break
            time.sleep(0.01)
        assert server.process.poll() is None
        gate.touch()
        thread.join(timeout=60)
    assert results[0].status_code == 200
    assert results[0].json()["outputs"][0]["data"] == [6]
    assert server.process.wait(timeout=60) == 0


def test_the_standard_triton_client_works_unchanged(start: Any, onnx_dir: Path) -> None:
    triton = pytest.importorskip("tritonclient.http")
    server = start(onnx_dir, {"runtime": "onnx"})
    client = triton.InferenceServerClient(f"127.0.0.1:{server.port}")
    try:
        while not client.is_server_ready():
            time.sleep(0.02)
        assert client.is_server_live()
        assert client.is_model_ready("m")
        assert client.get_model_metadata("m")["inputs"][0]["name"] == "X"
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        for binary in (False, True):
            tensor = triton.InferInput("X", [2, 3], "FP32")
            tensor.set_data_from_numpy(x, binary_data=binary)
            requested = [triton.InferRequestedOutput("Y", binary_data=binary)]
            np.testing.assert_array_equal(client.infer("m", [tensor], outputs=requested).as_numpy("Y"), x * 2 + 1)
            # No outputs named: the client asks for binary_data_output on all of them.
            np.testing.assert_array_equal(client.infer("m", [tensor], model_version="3").as_numpy("Y"), x * 2 + 1)
    finally:
        client.close()


def _read_response(sock: socket.socket) -> tuple[bytes, bytes]:
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        chunk = sock.recv(65536)
        assert chunk, "the server closed the connection"
        buffer += chunk
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
    while len(rest) < length:
        rest += sock.recv(65536)
    return head, rest


def test_http_keep_alive_expect_continue_and_a_malformed_chunk(start: Any, onnx_dir: Path) -> None:
    server = start(onnx_dir, {"runtime": "onnx"}, stdlib_loop=True)
    with httpx.Client() as client:
        _wait_ready(client, server)
    body = json.dumps({"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [0, 0, 0]}]}).encode()
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        head, answer = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 200")
        assert answer == b'{"live":true}'
        # The same connection: a client that waits for 100 Continue before it sends the body.
        sock.sendall(
            b"POST /v2/models/m/infer HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        interim = b""
        while len(interim) < 25:
            interim += sock.recv(25 - len(interim))
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(body)
        head, answer = _read_response(sock)
        assert json.loads(answer)["outputs"][0]["data"] == [1, 1, 1]
        sock.sendall(b"POST /v2/models/m/infer HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n")
        head, answer = _read_response(sock)
        assert head.startswith(b"HTTP/1.1 400")
        assert b"Connection: close" in head
        assert json.loads(answer) == {"error": "malformed chunked body"}
        assert sock.recv(1) == b""  # closed: the rest of a broken body cannot be told from the next request


def test_the_server_runs_from_a_job_pythonpath_without_aicenter(start: Any, onnx_dir: Path, tmp_path: Path) -> None:
    # A venv image: its own site-packages (numpy, onnxruntime) and the model server's files from the job's
    # PYTHONPATH directory (aicenter.runtime.jobpath), no aicenter installed.
    from aicenter.runtime.jobpath import write_job_pythonpath

    packages = Path(np.__file__).parent.parent
    if (packages / "aicenter").exists():
        pytest.skip("numpy shares its directory with an installed aicenter")
    path = write_job_pythonpath(tmp_path / "jobs")
    server = start(onnx_dir, {"runtime": "onnx"}, bare=True, PYTHONPATH=os.pathsep.join([str(path), str(packages)]))
    body = {"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 1, 1]}]}
    with httpx.Client() as client:
        _wait_ready(client, server)
        assert client.post(server.infer_url(), json=body).json()["outputs"][0]["data"] == [3, 3, 3]


def test_with_a_serve_token_every_request_without_it_gets_401(start: Any, onnx_dir: Path) -> None:
    """As a replica runs it (``AICENTER_SERVE_TOKEN`` set): the platform's requests carry the token, nobody
    else's do; liveness and readiness too, and the connection of a refused request is closed."""
    token = "5e" * 32
    server = start(onnx_dir, {"runtime": "onnx"}, AICENTER_SERVE_TOKEN=token)
    body = {"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 1, 1]}]}
    with httpx.Client(headers={"X-Aicenter-Serve-Token": token}) as client:
        _wait_ready(client, server)
        assert client.post(server.infer_url(), json=body).json()["outputs"][0]["data"] == [3, 3, 3]
    with httpx.Client() as client:
        for headers in ({}, {"X-Aicenter-Serve-Token": "0" * 64}, {"X-Aicenter-Serve-Token": token + "0"}):
            for answer in (
                client.get(f"{server.url}/v2/health/live", headers=headers),
                client.get(f"{server.url}/v2/health/ready", headers=headers),
                client.post(server.infer_url(), json=body, headers=headers),
            ):
                assert answer.status_code == 401, answer.text
                assert answer.headers["connection"] == "close"
                assert "serve token" in answer.json()["error"]
    # Keep-alive: each request is checked, not only a connection's first.
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\nX-Aicenter-Serve-Token: %s\r\n\r\n" % token.encode())
        assert _read_response(sock)[0].startswith(b"HTTP/1.1 200")
        sock.sendall(b"GET /v2/health/live HTTP/1.1\r\nHost: t\r\n\r\n")
        assert _read_response(sock)[0].startswith(b"HTTP/1.1 401")
        assert sock.recv(1) == b""
