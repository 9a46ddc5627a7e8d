"""Notebooks (debug environments): requests and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from aicenter.api.params import Id
from aicenter.api.schemas.common import Input, Schema
from aicenter.api.schemas.jobs import JobEventOut, ReplicaOut
from aicenter.services.notebooks import NotebookView

NotebookSpecSource = Annotated[
    dict[str, Any] | str,
    Field(
        description="The notebook: an object or its YAML/JSON text with name, image, algorithm, datasets, resources "
        "(a spec name or cpu/memory/gpu), env, pool, workspace, idle_timeout_s (0: never culled)."
    ),
]


class NotebookCreate(Input):
    spec: NotebookSpecSource
    workspace_id: Id | None = Field(
        default=None, description="The workspace; else the spec's `workspace`; else your default workspace."
    )


class NotebookUpdate(Input):
    idle_timeout_s: int | None = Field(
        description="Cull after this many idle seconds; 0: never; null: the workspace's (else the platform's) default."
    )


class NotebookSave(Input):
    algorithm: str | None = Field(
        default=None,
        description="The algorithm to add the version to (created if you have none of that name); default: the "
        "notebook's own.",
    )
    description: str = Field(default="", max_length=4096)


class NotebookOut(Schema):
    id: int
    name: str
    workspace_id: int
    workspace_name: str
    user_id: int | None
    username: str | None
    status: str
    failure_reason: str | None
    message: str
    pool_name: str | None
    image: str
    algorithm: str | None
    datasets: list[str]
    resources: dict[str, Any]
    restart_count: int = Field(description="How many times it was started again (its attempt).")
    submitted_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    idle_timeout_s: int = Field(description="The idle timeout in force; 0: never culled.")
    own_idle_timeout_s: int | None = Field(description="The notebook's own setting (null: the default).")
    idle_since: datetime | None = Field(description="Its last activity, as the idle culler last saw it.")
    cull_at: datetime | None = Field(description="When it will be culled unless it is used.")
    warned: bool = Field(description="Its owner was warned of the coming cull (and did nothing since).")
    culled_at: datetime | None
    saved_version_id: int | None
    saved_at: datetime | None
    lab_url: str = Field(description="JupyterLab through the platform (its owner only).")
    ssh_host: str = Field(description="The host name to reach it at through the SSH gateway (ProxyJump).")
    is_owner: bool

    @classmethod
    def from_view(cls, view: NotebookView) -> NotebookOut:
        job, nb, spec = view.job.job, view.notebook, view.job.job.spec
        warned = nb.warned_at is not None and (nb.idle_since is None or nb.warned_at >= nb.idle_since)
        return cls(
            id=job.id,
            name=job.name,
            workspace_id=job.workspace_id,
            workspace_name=view.job.workspace_name,
            user_id=job.user_id,
            username=view.job.username,
            status=job.status,
            failure_reason=job.failure_reason,
            message=job.message,
            pool_name=view.job.pool_name,
            image=spec.get("image", "host"),
            algorithm=spec.get("algorithm"),
            datasets=list(spec.get("datasets") or []),
            resources=dict(spec["tasks"][0]["resources"]),
            restart_count=job.restart_count,
            submitted_at=job.submitted_at,
            started_at=job.started_at,
            finished_at=job.finished_at,
            idle_timeout_s=view.idle_timeout_s,
            own_idle_timeout_s=nb.idle_timeout_s,
            idle_since=nb.idle_since,
            cull_at=nb.cull_at if job.status == "running" else None,
            warned=warned and job.status == "running",
            culled_at=nb.culled_at,
            saved_version_id=nb.saved_version_id,
            saved_at=nb.saved_at,
            lab_url=view.lab_path,
            ssh_host=view.ssh_host,
            is_owner=view.is_owner,
        )


class NotebookDetail(NotebookOut):
    replicas: list[ReplicaOut] = Field(description="Every attempt's replica: node, machine time.")
    events: list[JobEventOut] = Field(description="Status changes, oldest first.")

    @classmethod
    def from_view(cls, view: NotebookView) -> NotebookDetail:
        base = NotebookOut.from_view(view).model_dump()
        return cls.model_validate(
            {
                **base,
                "replicas": [ReplicaOut.model_validate(r) for r in view.job.replicas],
                "events": [JobEventOut.model_validate(e) for e in view.job.events],
            }
        )


class SavedOut(Schema):
    version_id: int
    reference: str = Field(description="The new version, as a job spec names it (name:number).")
    skipped_links: int = Field(description="Symbolic links of the work dir left out (a version holds files only).")


class TrainSpecOut(Schema):
    spec: dict[str, Any] = Field(description="A train job spec prefilled from the notebook; edit its command.")


class SshAccessOut(Schema):
    """How an SSH client (ssh, sftp, VS Code Remote-SSH, PyCharm) reaches the notebook: ProxyJump through the
    platform's SSH gateway, with the owner's registered key on both hops."""

    user: str = Field(description="The user name on both hops (the platform user).")
    gateway_host: str
    gateway_port: int
    host_alias: str = Field(description="The notebook's name behind the gateway: notebook-<id>.")
    known_hosts: list[str] = Field(description="known_hosts lines for the gateway and the notebook.")
    config: str = Field(description="~/.ssh/config blocks: the gateway, and the notebook as a ProxyJump through it.")
