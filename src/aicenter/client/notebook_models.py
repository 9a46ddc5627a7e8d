"""Typed views of the notebooks API's responses: notebooks, saves and SSH connection details."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aicenter.client.models import ApiModel, JobEvent, JobReplica

__all__ = ["Notebook", "NotebookSaved", "NotebookSsh"]


class Notebook(ApiModel):
    """A notebook (a job of kind ``notebook`` running JupyterLab): status, inputs, idle state, addresses.

    ``replicas`` and ``events`` are filled by :meth:`~aicenter.client.Client.get_notebook` and the lifecycle calls
    (the detail); lists leave them empty.
    """

    id: int
    name: str
    workspace_id: int
    workspace_name: str | None = None
    user_id: int | None = None
    username: str | None = None
    status: str
    failure_reason: str | None = None
    message: str = ""
    pool_name: str | None = None
    image: str = "host"
    algorithm: str | None = None
    datasets: list[str] = []
    resources: dict[str, Any] = {}
    restart_count: int = 0
    submitted_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    idle_timeout_s: int = 0  # the timeout in force (its own, else the workspace's, else the platform's); 0: never
    own_idle_timeout_s: int | None = None  # its own setting; None: the default
    idle_since: datetime | None = None
    cull_at: datetime | None = None
    warned: bool = False
    culled_at: datetime | None = None
    saved_version_id: int | None = None
    saved_at: datetime | None = None
    lab_url: str = ""  # a path on the server: /notebooks/<id>/lab
    ssh_host: str = ""  # the SSH gateway's name for it: notebook-<id>
    is_owner: bool = False
    replicas: list[JobReplica] = []
    events: list[JobEvent] = []


class NotebookSaved(ApiModel):
    """A save of a notebook's work dir: the new algorithm version and its reference (``name:number``)."""

    version_id: int
    reference: str
    skipped_links: int = 0  # symbolic links left out (a version holds regular files only)


class NotebookSsh(ApiModel):
    """How to reach a notebook over SSH: jump through the gateway to the notebook's alias.

    Attributes:
        user: The user name to give both the gateway and the notebook.
        gateway_host: The SSH gateway's host name.
        gateway_port: Its port.
        host_alias: The notebook's name behind the gateway (``notebook-<id>``).
        known_hosts: ``known_hosts`` lines for the gateway and for the alias, so that the first connection is
            verified rather than trusted blindly.
        config: A ready ``~/.ssh/config`` ``Host`` block (for ssh, VS Code Remote-SSH, PyCharm).
    """

    user: str
    gateway_host: str
    gateway_port: int
    host_alias: str
    known_hosts: list[str] = []
    config: str = ""
