"""What makes a service replica's plan differ from a training replica's: one published port, and either the
platform's model server (``aicenter.runtime.serve``) or the user's command serving HTTP on it.

The model server runs with the replica's own Python (the image's, so the user's framework and packages import;
a venv image gets the model server's stdlib-only modules on its ``PYTHONPATH``, ``aicenter.runtime.jobpath``).
It reads its configuration from ``AICENTER_SERVE_CONFIG`` (the spec's ``serving`` section as JSON); a custom
command reads ``$PORT``. Both listen on ``AICENTER_SERVE_BIND``: the node's address for an executor without a
job network namespace, else the namespace's 127.0.0.1, which the launcher relays the node's port to.
"""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

from aicenter.core.jobs.serving import SERVE_COMMAND
from aicenter.executors.base import ReplicaPlan

__all__ = ["SERVICE_PORTS", "service_plan"]

SERVICE_PORTS = 1
"""Ports a service replica gets: the one it serves HTTP on."""


def service_plan(
    plan: ReplicaPlan, *, ports: tuple[int, ...], publish_host: str, serving: dict[str, object]
) -> ReplicaPlan:
    """``plan`` (as built for any job) turned into a service replica's."""
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
    command = plan.command
    if command == SERVE_COMMAND:
        python = Path(plan.python_bin) / "python" if plan.python_bin else Path("python")
        command = f"exec {shlex.quote(str(python))} -m aicenter.runtime.serve"
    return dataclasses.replace(plan, command=command, env=env, published=(port,), publish_host=publish_host)
