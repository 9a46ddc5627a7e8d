"""Inference services in a real browser against a real server, the issue's "Done when": one click deploys a model
version. alice uploads a small ONNX model (y = x @ [2, 3] + 1) with its signature, clicks "Deploy" on the model
version's page, submits the form, watches the service become ready, and sends the "try it" form's request,
prefilled from the signature, through the gateway as herself: the answer's output is the model's."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.e2e.conftest import ADMIN_PASSWORD, Server, signed_in

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.browser]

DEADLINE_S = 180.0
PASSWORD = "alice-Passw0rd-1"
SIGNATURE = {
    "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 2]}],
    "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1, 1]}],
}


def _onnx_model(path: Path) -> None:
    """y = x @ [[2], [3]] + 1 as an ONNX graph (MatMul, Add)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    w = np.array([[2.0], [3.0]], dtype=np.float32)
    b = np.array([1.0], dtype=np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["xw"]), helper.make_node("Add", ["xw", "b"], ["y"])],
        "lin",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, 1])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.save(model, path / "model.onnx")


def test_one_click_deploy_then_try_it(server: Server, browser_page: Any, tmp_path: Path) -> None:
    admin = signed_in(tmp_path, server, "admin", ADMIN_PASSWORD)
    admin.run("user", "create", "alice", "--password-stdin", stdin=f"{PASSWORD}\n")
    admin.run("workspace", "create", "vision", "--admin", "alice")
    alice = signed_in(tmp_path, server, "alice", PASSWORD)
    model_dir = tmp_path / "lin"
    model_dir.mkdir()
    _onnx_model(model_dir)
    version = alice.json("model", "push", str(model_dir), "--name", "lin", "--workspace", "vision", "--no-progress")
    token = httpx.post(f"{server.url}/api/v1/auth/login", json={"username": "alice", "password": PASSWORD}).json()
    meta = httpx.patch(
        f"{server.url}/api/v1/models/{version['item_id']}/versions/{version['number']}",
        json={"metadata": {"signature": SIGNATURE}},
        headers={"Authorization": f"Bearer {token['token']}"},
    )
    assert meta.status_code == 200, meta.text

    page = browser_page
    base = server.url
    page.goto(f"{base}/login")
    page.fill("#login-username", "alice")
    page.fill("#login-password", PASSWORD)
    with page.expect_navigation():
        page.click("#login-submit")

    page.goto(f"{base}/models/{version['item_id']}/versions/{version['number']}")
    with page.expect_navigation():
        page.click("[data-testid=version-deploy]")
    assert page.input_value("#service-deploy-model") == version["ref"]
    page.fill("#service-deploy-name", "lin")
    # The model's workspace is chosen already (alice's own workspace is her default).
    assert page.locator("#service-deploy-workspace-id option:checked").inner_text() == "vision"
    page.fill("#service-deploy-description", "a line")
    with page.expect_navigation():
        page.click("#service-deploy-submit")
    assert page.locator("[data-testid=page-title]").inner_text() == "Service lin"
    assert "is deploying" in page.locator("body").inner_text()

    deadline = time.monotonic() + DEADLINE_S
    while page.locator("[data-testid=service-status][data-status=ready]").count() == 0:
        status = page.locator("[data-testid=service-status]").get_attribute("data-status")
        assert status in ("deploying", "ready"), page.locator("[data-testid=service-summary]").inner_text()
        assert time.monotonic() < deadline, "the service did not become ready"
        time.sleep(1.0)  # polling interval: the loop exits on what the page says
        page.reload()

    # The body is prefilled from the signature: x of shape [1, 2], zeros; y = 0 * 2 + 0 * 3 + 1.
    body = json.loads(page.input_value("#service-try-body"))
    assert [(t["name"], t["shape"]) for t in body["inputs"]] == [("x", [1, 2])]
    with page.expect_navigation():
        page.click("[data-testid=service-try-submit]")
    assert page.locator("[data-testid=service-try-status]").inner_text() == "200"
    answer = json.loads(page.locator("[data-testid=service-try-answer]").inner_text())
    assert [(o["name"], o["data"]) for o in answer["outputs"]] == [("y", [1.0])]

    # Another input, typed in: [1, 1] -> 2 + 3 + 1.
    body["inputs"][0]["data"] = [1.0, 1.0]
    page.fill("#service-try-body", json.dumps(body))
    with page.expect_navigation():
        page.click("[data-testid=service-try-submit]")
    answer = json.loads(page.locator("[data-testid=service-try-answer]").inner_text())
    assert answer["outputs"][0]["data"] == [6.0]
    # The request rate chart shows the two requests once the gateway has reported them.
    page.reload()
    line = page.locator("[data-testid=chart-request-rate] [data-testid=chart-line][data-series='revision 1']")
    line.wait_for(timeout=30_000)
    assert int(line.get_attribute("data-points") or 0) > 1
    assert page.locator("[data-testid=chart-latency] [data-series='revision 1 p50']").count() == 1
    # The replica that ran, and was ready, in the replicas chart.
    replicas = page.locator("[data-testid=chart-replicas]")
    assert replicas.locator("[data-testid=chart-line][data-series='revision 1 ready']").count() == 1
    assert replicas.locator("[data-testid=chart-line][data-series=running]").count() == 1
