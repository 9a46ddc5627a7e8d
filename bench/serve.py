"""Model server latency: ``python -m aicenter.runtime.serve`` with a trivial ONNX model (Y = 2X + 1, 1x3 FP32);
prints one JSON object.

One keep-alive raw-socket client (TCP_NODELAY) sends ``--requests`` requests of each kind after 300 warm-up
ones: ``GET /v2/health/live``, a JSON infer, a binary infer (``Inference-Header-Content-Length``); p50/p90 in us.
``floor`` is the same client against a bare asyncio server that answers a fixed 200 without parsing anything:
the round trip no Python HTTP server can beat on this host. The server's own cost per infer is about
``infer_json.p50 - floor.p50``. ``httpx_infer_json`` is the same infer from an ``httpx.Client``, for scale.

    python bench/serve.py [--requests 3000]

Measured here (2 shared CPUs, Python 3.11, onnxruntime 1.32, uvloop 0.23), on a quiet run: floor p50 131 us,
live 139 us, JSON infer 164 us, binary infer 163 us: ~35 us of server work per infer (the ONNX run is ~10 us of
it); httpx's own client costs put its infer at 725 us. Busy runs on this shared host read 80-150 us more
everywhere, the floor included.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np

SRC = Path(__file__).resolve().parents[1] / "src"
FLOOR = """
import asyncio
RESP = b"HTTP/1.1 200 OK\\r\\nContent-Type: application/json\\r\\nContent-Length: 2\\r\\n\\r\\n{}"
class Echo(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buffer = transport, b""
    def data_received(self, data):
        self.buffer += data
        while b"\\r\\n\\r\\n" in self.buffer:
            head, _, self.buffer = self.buffer.partition(b"\\r\\n\\r\\n")
            length = [l for l in head.split(b"\\r\\n") if l.lower().startswith(b"content-length")]
            self.buffer = self.buffer[int(length[0].split(b":")[1]) if length else 0:]
            self.transport.write(RESP)
async def main():
    server = await asyncio.get_running_loop().create_server(Echo, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def _model(directory: Path) -> None:
    import onnx
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
    model.ir_version = 8
    onnx.save(model, str(directory / "model.onnx"))


def _exchange(sock: socket.socket, request: bytes) -> bytes:
    sock.sendall(request)
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        buffer += sock.recv(65536)
    head, _, rest = buffer.partition(b"\r\n\r\n")
    length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
    while len(rest) < length:
        rest += sock.recv(65536)
    return rest


def _measure(port: int, request: bytes, count: int) -> dict[str, float]:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for _ in range(300):
            _exchange(sock, request)
        times = []
        for _ in range(count):
            started = time.perf_counter()
            _exchange(sock, request)
            times.append(time.perf_counter() - started)
    return _summary(times)


def _summary(times: list[float]) -> dict[str, float]:
    times.sort()
    return {"p50_us": round(times[len(times) // 2] * 1e6, 1), "p90_us": round(times[int(len(times) * 0.9)] * 1e6, 1)}


def _post(path: str, body: bytes, extra: str = "") -> bytes:
    return f"POST {path} HTTP/1.1\r\nHost: bench\r\nContent-Length: {len(body)}\r\n{extra}\r\n".encode("latin-1") + body


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=3000)
    count = parser.parse_args().requests
    json_body = json.dumps({"inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "data": [1, 2, 3]}]}).encode()
    header = json.dumps(
        {
            "inputs": [{"name": "X", "shape": [1, 3], "datatype": "FP32", "parameters": {"binary_data_size": 12}}],
            "parameters": {"binary_data_output": True},
        }
    ).encode()
    binary_body = header + np.array([1, 2, 3], dtype="<f4").tobytes()
    requests = {
        "live": b"GET /v2/health/live HTTP/1.1\r\nHost: bench\r\n\r\n",
        "infer_json": _post("/v2/models/m/infer", json_body, "Content-Type: application/json\r\n"),
        "infer_binary": _post("/v2/models/m/infer", binary_body, f"Inference-Header-Content-Length: {len(header)}\r\n"),
    }
    result: dict[str, object] = {"requests": count, "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        _model(Path(tmp))
        env = {
            **os.environ,
            "PYTHONPATH": str(SRC),
            "AICENTER_SERVE_PORT": "0",
            "AICENTER_MODEL_DIR": tmp,
            "AICENTER_SERVE_CONFIG": json.dumps({"runtime": "onnx", "model_name": "m", "model_version": "1"}),
        }
        server = subprocess.Popen([sys.executable, "-m", "aicenter.runtime.serve"], env=env, stderr=subprocess.PIPE)
        floor = subprocess.Popen([sys.executable, "-c", FLOOR], stdout=subprocess.PIPE)
        try:
            assert server.stderr is not None
            assert floor.stdout is not None
            port = int(server.stderr.readline().split(b"127.0.0.1:")[1].split(b",")[0])
            with httpx.Client() as client:
                while client.get(f"http://127.0.0.1:{port}/v2/health/ready").status_code != 200:
                    time.sleep(0.05)
                result["floor"] = _measure(int(floor.stdout.readline()), requests["live"], count)
                for name, request in requests.items():
                    result[name] = _measure(port, request, count)
                times = []
                for _ in range(count):
                    started = time.perf_counter()
                    client.post(f"http://127.0.0.1:{port}/v2/models/m/infer", content=json_body)
                    times.append(time.perf_counter() - started)
                result["httpx_infer_json"] = _summary(times)
        finally:
            floor.kill()
            server.send_signal(signal.SIGTERM)
            server.wait()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
