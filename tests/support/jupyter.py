"""Talking to a notebook's JupyterLab the way its front-end does: REST, and kernel messages over a WebSocket."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import httpx
from websockets.asyncio.client import connect


def wait_for_lab(http: httpx.Client, notebook_id: int, timeout: float = 60.0) -> float:
    """Poll ``/notebooks/<id>/api/status`` through the platform until JupyterLab answers 200; seconds waited."""
    started = time.monotonic()
    last = ""
    while time.monotonic() - started < timeout:
        answer = http.get(f"/notebooks/{notebook_id}/api/status")
        if answer.status_code == 200:
            return time.monotonic() - started
        last = f"{answer.status_code} {answer.text[:200]}"
        time.sleep(0.1)  # polling interval: the loop exits on the answer it reads
    raise AssertionError(f"JupyterLab of notebook {notebook_id} did not answer within {timeout} s: {last}")


def start_kernel(http: httpx.Client, notebook_id: int) -> str:
    answer = http.post(f"/notebooks/{notebook_id}/api/kernels", json={"name": "python3"})
    assert answer.status_code == 201, answer.text
    kernel_id: str = answer.json()["id"]
    return kernel_id


def _request(code: str) -> tuple[str, str]:
    msg_id = uuid.uuid4().hex
    header = {"msg_id": msg_id, "username": "test", "session": uuid.uuid4().hex, "msg_type": "execute_request",
              "version": "5.3", "date": ""}  # fmt: skip
    content = {"code": code, "silent": False, "store_history": True, "user_expressions": {}, "allow_stdin": False,
               "stop_on_error": True}  # fmt: skip
    message = {"header": header, "parent_header": {}, "metadata": {}, "content": content, "channel": "shell",
               "buffers": []}  # fmt: skip
    return msg_id, json.dumps(message)


async def _execute(url: str, headers: dict[str, str], code: str, *, wait: bool, limit_s: float) -> str:
    async with connect(url, additional_headers=headers, max_size=None, open_timeout=limit_s) as ws:
        msg_id, message = _request(code)
        await ws.send(message)
        out: list[str] = []
        if not wait:
            return ""
        while True:
            reply: dict[str, Any] = json.loads(await asyncio.wait_for(ws.recv(), limit_s))
            if reply.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = reply["msg_type"], reply["content"]
            if kind == "stream":
                out.append(content["text"])
            elif kind == "error":
                out.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "status" and content["execution_state"] == "idle":
                return "".join(out)


def execute(
    base_url: str,
    notebook_id: int,
    kernel_id: str,
    code: str,
    *,
    headers: dict[str, str],
    wait: bool = True,
    timeout: float = 60.0,
) -> str:
    """Run ``code`` in a kernel through the platform's WebSocket proxy; its output (stdout and errors).
    ``wait=False`` returns once the request is sent (a long-running cell keeps the kernel busy)."""
    ws_base = base_url.replace("http://", "ws://", 1)
    url = f"{ws_base}/notebooks/{notebook_id}/api/kernels/{kernel_id}/channels"
    return asyncio.run(_execute(url, headers, code, wait=wait, limit_s=timeout))
