"""What makes a service replica's plan differ from a training replica's: one published port, and either the
platform's model server (``aicenter.runtime.serve``) or the user's command serving HTTP on it.

The model server runs with the replica's own Python (the image's, so the user's framework and packages import;
a venv image gets the model server's stdlib-only modules on its ``PYTHONPATH``, ``aicenter.runtime.jobpath``).
It reads its configuration from ``AICENTER_SERVE_CONFIG`` (the spec's ``serving`` section as JSON); a custom
command reads ``$PORT``. Both listen on ``AICENTER_SERVE_BIND``: the node's address for an executor without a
job network namespace, else the namespace's 127.0.0.1, which the launcher relays the node's port to.

The published port is reachable by whatever reaches the node (host processes, a job on the host's network), not
only by the gateway. So every request the platform sends a replica carries its serve token
(``SERVE_TOKEN_HEADER``), derived like a notebook's JupyterLab token from the server's secret key, the job and
the attempt (``serve_token``): the route table and the controller compute it again, it is stored nowhere and
differs per attempt. The model server refuses a request without it; in a job network namespace the launcher's
relay also checks the first request of each connection (``publish_token``), which covers a custom command that
does not check it itself.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import json
import shlex
from pathlib import Path

from aicenter.core.jobs.serving import SERVE_COMMAND, SERVE_TOKEN_ENV
from aicenter.executors.base import ReplicaPlan

__all__ = ["SERVICE_PORTS", "serve_token", "service_plan"]

SERVICE_PORTS = 1
"""Ports a service replica gets: the one it serves HTTP on."""


def serve_token(secret_key: str, job_id: int, attempt: int) -> str:
    """The serve token of one attempt of a service replica (64 hex digits)."""
    message = f"serve:{int(job_id)}:{int(attempt)}".encode()
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()


def service_plan(
    plan: ReplicaPlan, *, ports: tuple[int, ...], publish_host: str, serving: dict[str, object], token: str = ""
) -> ReplicaPlan:
    """``plan`` (as built for any job) turned into a service replica's; ``token`` is its ``serve_token`` (empty:
    none, the replica answers anybody; only a server without a secret key plans so)."""
    if len(ports) < SERVICE_PORTS:
        raise ValueError(f"a service replica needs {SERVICE_PORTS} port, it has {len(ports)}")
    port = ports[-1]
    env = dict(plan.env)
    env.update(
        AICENTER_SERVE_BIND=publish_host,
        AICENTER_SERVE_PORT=str(port),
        AICENTER_SERVE_CONFIG=json.dumps(serving, separators=(",", ":")),
        PORT=str(port),
    )
    env.pop(SERVE_TOKEN_ENV, None)  # the platform's own, or none: never one from the spec's env
    if token:
        env[SERVE_TOKEN_ENV] = token
    command = plan.command
    if command == SERVE_COMMAND:
        python = Path(plan.python_bin) / "python" if plan.python_bin else Path("python")
        command = f"exec {shlex.quote(str(python))} -m aicenter.runtime.serve"
    return dataclasses.replace(
        plan, command=command, env=env, published=(port,), publish_host=publish_host, publish_token=token
    )
