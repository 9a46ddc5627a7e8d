"""Inference services: requests and answers."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from aicenter.api.params import Id
from aicenter.api.schemas.common import Input, Schema
from aicenter.db.models import ServiceKey, ServiceRevision
from aicenter.services.serving import CreatedKey, LoadPoint, ReplicaView, ServiceView

ServiceSpecSource = Annotated[
    dict[str, Any] | str,
    Field(
        description="The service: an object or its YAML/JSON text with name, model (name:version), runtime (auto, "
        "onnx, torchscript, sklearn, python, command), entry, algorithm, image, command, ready_path, resources, "
        "env, pool, min_replicas, max_replicas, target_concurrency, scale_to_zero_grace_s, activation_timeout_s, "
        "ready_timeout_s, description, ab_header, max_body_bytes."
    ),
]


class ServiceDeploy(Input):
    spec: ServiceSpecSource
    workspace_id: Id | None = Field(
        default=None, description="The workspace; else the spec's `workspace`; else your default workspace."
    )


class ServiceUpdate(Input):
    spec: Annotated[
        dict[str, Any] | str,
        Field(
            description="What the new revision changes (model, runtime, resources, env, scaling, header_value, ...) "
            "and `rollout`: {strategy: all | steps | canary, canary_percent, step_percent, step_interval_s}."
        ),
    ]


class TrafficIn(Input):
    traffic: dict[str, int] = Field(description='Revision number -> percent, summing to 100: {"1": 90, "2": 10}.')


class ScaleIn(Input):
    min_replicas: int | None = Field(default=None, ge=0, le=100)
    max_replicas: int | None = Field(default=None, ge=1, le=100)
    target_concurrency: float | None = Field(default=None, gt=0, le=10_000)


class KeyIn(Input):
    name: str = Field(description="A name for the key (who uses it).")


class RevisionOut(Schema):
    number: int
    model: str
    runtime: str
    state: str
    message: str
    traffic: int
    target_traffic: int
    header_value: str
    desired_replicas: int
    spec: dict[str, Any]
    signature: dict[str, Any] | None
    created_at: datetime
    ready_at: datetime | None
    retired_at: datetime | None

    @classmethod
    def from_row(cls, r: ServiceRevision) -> RevisionOut:
        return cls(
            number=r.number,
            model=r.model_ref,
            runtime=r.runtime,
            state=r.state,
            message=r.message,
            traffic=r.traffic,
            target_traffic=r.target_traffic,
            header_value=r.header_value,
            desired_replicas=r.desired_replicas,
            spec=r.spec,
            signature=r.signature,
            created_at=r.created_at,
            ready_at=r.ready_at,
            retired_at=r.retired_at,
        )


class ServiceReplicaOut(Schema):
    job_id: int
    revision: int
    status: str
    ready: bool
    draining: bool
    node: str | None = Field(None, description="The node it runs on, once placed.")
    started_at: datetime | None

    @classmethod
    def from_view(cls, r: ReplicaView) -> ServiceReplicaOut:
        return cls(
            job_id=r.job_id,
            revision=r.revision,
            status=r.status,
            ready=r.ready,
            draining=r.draining,
            node=r.node,
            started_at=r.started_at,
        )


class ServiceOut(Schema):
    id: int
    name: str
    description: str
    workspace_id: int
    workspace_name: str
    user_id: int | None
    username: str | None
    status: str
    message: str
    model: str = Field(description="The model version the stable revision serves.")
    runtime: str
    url: str = Field(description="Its path on this server: <url>/v2/models/<name>/infer and so on.")
    replicas_ready: int
    replicas_total: int
    created_at: datetime
    running_s: float = Field(description="Seconds since it first served (0 while stopped).")
    stopped_at: datetime | None

    @classmethod
    def from_view(cls, v: ServiceView) -> ServiceOut:
        s = v.service
        return cls(
            id=s.id,
            name=s.name,
            description=s.description,
            workspace_id=s.workspace_id,
            workspace_name=v.workspace_name,
            user_id=s.user_id,
            username=v.username,
            status=s.status,
            message=s.message,
            model=v.model_ref,
            runtime=v.runtime,
            url=v.url_path,
            replicas_ready=v.replicas_ready,
            replicas_total=v.replicas_total,
            created_at=s.created_at,
            running_s=round(v.running_s, 1),
            stopped_at=s.stopped_at,
        )


class ServiceDetail(ServiceOut):
    ab_header: str
    max_body_bytes: int
    revisions: list[RevisionOut]
    replicas: list[ServiceReplicaOut]

    @classmethod
    def from_view(cls, v: ServiceView) -> ServiceDetail:
        base = ServiceOut.from_view(v).model_dump()
        return cls(
            **base,
            ab_header=v.service.ab_header,
            max_body_bytes=v.service.max_body_bytes,
            revisions=[RevisionOut.from_row(r) for r in v.revisions],
            replicas=[ServiceReplicaOut.from_view(r) for r in v.replicas],
        )


class KeyOut(Schema):
    id: int
    name: str
    prefix: str
    created_at: datetime

    @classmethod
    def from_row(cls, k: ServiceKey) -> KeyOut:
        return cls(id=k.id, name=k.name, prefix=k.prefix, created_at=k.created_at)


class CreatedKeyOut(KeyOut):
    key: str = Field(description="The key itself: shown this once, never again.")

    @classmethod
    def from_created(cls, c: CreatedKey) -> CreatedKeyOut:
        return cls(**KeyOut.from_row(c.row).model_dump(), key=c.key)


class LoadPointOut(Schema):
    at: datetime
    revision: int
    requests: int
    errors: int
    concurrency: float
    p50_ms: float | None
    p99_ms: float | None

    @classmethod
    def from_point(cls, p: LoadPoint) -> LoadPointOut:
        return cls(
            at=p.at,
            revision=p.revision,
            requests=p.requests,
            errors=p.errors,
            concurrency=p.concurrency,
            p50_ms=p.p50_ms,
            p99_ms=p.p99_ms,
        )
