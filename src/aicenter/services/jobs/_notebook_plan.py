"""What makes a notebook's replica plan differ from a training replica's: the platform's command, a writable work
dir, published ports and the variables ``aicenter.runtime.notebook`` reads.

The JupyterLab token is derived from the server's secret key, the job and the attempt (``notebook_token``): the
proxy computes it again for every request it forwards, so it is stored nowhere, differs per attempt, and any
server replica that shares the key reaches any notebook.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import shlex
import sys
from pathlib import Path

from aicenter.executors.base import ReplicaPlan

__all__ = ["ACTIVITY_FILE", "NOTEBOOK_PORTS", "notebook_base_url", "notebook_plan", "notebook_token"]

NOTEBOOK_PORTS = 2
"""Ports a notebook replica gets: JupyterLab's, then the SSH agent's."""
ACTIVITY_FILE = "activity"
"""In the notebook's state dir: the time of the last SSH input, written by the agent."""


def notebook_token(secret_key: str, job_id: int, attempt: int) -> str:
    """JupyterLab's token for one attempt of a notebook (64 hex digits)."""
    message = f"notebook:{int(job_id)}:{int(attempt)}".encode()
    return hmac.new(secret_key.encode(), message, hashlib.sha256).hexdigest()


def notebook_base_url(job_id: int) -> str:
    """The path the platform serves the notebook's JupyterLab under."""
    return f"/notebooks/{int(job_id)}/"


def notebook_plan(
    plan: ReplicaPlan, *, work: Path, state: Path, ports: tuple[int, ...], token: str, publish_host: str
) -> ReplicaPlan:
    """``plan`` (as built for any job) turned into a notebook's: JupyterLab and the SSH agent in ``work``."""
    if len(ports) < NOTEBOOK_PORTS:
        raise ValueError(f"a notebook replica needs {NOTEBOOK_PORTS} ports, it has {len(ports)}")
    mine = ports[-NOTEBOOK_PORTS:]
    python = Path(plan.python_bin or Path(sys.executable).parent) / "python"
    env = dict(plan.env)
    env.update(
        AICENTER_CODE_DIR=str(work),
        AICENTER_NOTEBOOK_BIND=publish_host,
        AICENTER_NOTEBOOK_PORTS=",".join(str(p) for p in mine),
        AICENTER_NOTEBOOK_BASE_URL=notebook_base_url(plan.job_id),
        AICENTER_NOTEBOOK_TOKEN=token,
        AICENTER_NOTEBOOK_KERNEL_PYTHON=str(python),
        AICENTER_NOTEBOOK_STATE=str(state),
        AICENTER_NOTEBOOK_ACTIVITY=str(state / ACTIVITY_FILE),
        HOME=str(work),
    )
    return dataclasses.replace(
        plan,
        # The server's interpreter runs JupyterLab (the sandbox always shows it); the image's runs the kernel.
        command=f"exec {shlex.quote(sys.executable)} -m aicenter.runtime.notebook",
        env=env,
        workdir=work,
        read_write=(*plan.read_write, work, state),
        published=mine,
        publish_host=publish_host,
    )
