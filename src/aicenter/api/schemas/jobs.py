"""Jobs, their replicas and events, and job templates."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from aicenter.api.params import Id
from aicenter.api.schemas.common import Input, Schema
from aicenter.services.jobs import JobView, TemplateView

SpecSource = Annotated[
    dict[str, Any] | str,
    Field(description="The job spec: an object, or its YAML/JSON text (as `aicenter job submit` reads it)."),
]
Overrides = Annotated[
    list[str],
    Field(
        default_factory=list,
        max_length=256,
        description='"PATH=VALUE" changes applied before the spec is checked, in order: "tasks[0].replicas=4".',
    ),
]


class JobSubmit(Input):
    spec: SpecSource
    overrides: Overrides
    workspace_id: Id | None = Field(
        default=None, description="The workspace; else the spec's `workspace`; else your default workspace."
    )


class JobResubmit(Input):
    overrides: Overrides


class ReplicaOut(Schema):
    """One replica attempt: where it runs, what it holds, and its machine-time record (started/finished)."""

    id: int
    task: str
    index: int
    attempt: int
    status: str
    node_name: str | None
    devices: list[int] = Field(description="Accelerator indices on the node.")
    cpus: list[int] | None = Field(description="CPU cores the replica is pinned to; null: any.")
    cpu_milli: int
    memory_bytes: int
    gpu: int
    gpu_type: str | None
    gpu_share: float | None
    spec_id: int | None
    billing_weight: float
    exit_code: int | None
    reason: str | None
    ports: list[int] = Field(description="Ports reserved for the replica on its node.")
    started_at: datetime | None
    finished_at: datetime | None


class JobEventOut(Schema):
    id: int
    at: datetime
    actor_id: int | None
    actor_name: str
    from_status: str | None
    to_status: str
    reason: str | None
    message: str


class JobOut(Schema):
    id: int
    name: str
    kind: str
    workspace_id: int
    workspace_name: str
    user_id: int | None
    username: str | None
    status: str
    pending_reason: str = Field(description="Why the scheduler has not placed a queued job yet.")
    failure_reason: str | None
    exit_code: int | None
    message: str
    priority: int
    pool_id: int | None
    pool_name: str | None
    restart_count: int
    counted_restarts: int
    image_version_id: int | None
    algorithm_version_id: int | None
    dataset_version_ids: list[int]
    output_model_version_id: int | None
    stop_requested_by: int | None
    stop_requested_at: datetime | None
    submitted_at: datetime
    scheduled_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    created_at: datetime
    updated_at: datetime
    spec: dict[str, Any] = Field(description="The normalized spec, as submitted after overrides.")

    @classmethod
    def from_view(cls, view: JobView) -> JobOut:
        job = view.job
        fields = {name: getattr(job, name) for name in cls.model_fields if hasattr(job, name)}
        return cls.model_validate(
            {**fields, "workspace_name": view.workspace_name, "username": view.username, "pool_name": view.pool_name}
        )


class JobDetail(JobOut):
    replicas: list[ReplicaOut] = Field(description="Every replica attempt, by attempt then rank order.")
    events: list[JobEventOut] = Field(description="Status changes, oldest first.")

    @classmethod
    def from_view(cls, view: JobView) -> JobDetail:
        base = JobOut.from_view(view).model_dump()
        return cls.model_validate(
            {
                **base,
                "replicas": [ReplicaOut.model_validate(r) for r in view.replicas],
                "events": [JobEventOut.model_validate(e) for e in view.events],
            }
        )


class TemplateCreate(Input):
    name: str
    spec: SpecSource
    workspace_id: Id | None = Field(
        default=None, description="The workspace; else the spec's `workspace`; else your default workspace."
    )
    description: str = ""


class TemplateFromJob(Input):
    name: str
    description: str = ""


class TemplateUpdate(Input):
    name: str | None = None
    description: str | None = None
    spec: SpecSource | None = None


class TemplateSubmit(Input):
    overrides: Overrides


class TemplateOut(Schema):
    id: int
    workspace_id: int
    workspace_name: str
    user_id: int | None
    username: str | None
    name: str
    description: str
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_view(cls, view: TemplateView) -> TemplateOut:
        t = view.template
        fields = {name: getattr(t, name) for name in cls.model_fields if hasattr(t, name)}
        return cls.model_validate({**fields, "workspace_name": view.workspace_name, "username": view.username})
