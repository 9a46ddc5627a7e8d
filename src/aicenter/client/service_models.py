"""Typed views of the services API's responses: services, revisions, replicas, API keys and load points."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aicenter.client.models import ApiModel

__all__ = ["CreatedServiceKey", "Service", "ServiceKey", "ServiceLoadPoint", "ServiceReplica", "ServiceRevision"]


class ServiceRevision(ApiModel):
    """One revision: a model version with its runtime, resources and env, and its share of the traffic."""

    number: int
    model: str
    runtime: str
    state: str
    message: str = ""
    traffic: int = 0
    target_traffic: int = 0
    header_value: str = ""
    desired_replicas: int = 0
    spec: dict[str, Any] = {}
    signature: dict[str, Any] | None = None
    created_at: datetime | None = None
    ready_at: datetime | None = None
    retired_at: datetime | None = None


class ServiceReplica(ApiModel):
    """A live replica: a job of kind ``service`` (its logs are the job's)."""

    job_id: int
    revision: int
    status: str
    ready: bool = False
    draining: bool = False
    node: str | None = None
    started_at: datetime | None = None


class Service(ApiModel):
    """An inference service. ``url`` is its path on the server (``<url>/v2/models/<name>/infer``).

    ``revisions`` and ``replicas`` are filled by :meth:`~aicenter.client.Client.get_service` and the lifecycle
    calls (the detail); lists leave them empty.
    """

    id: int
    name: str
    description: str = ""
    workspace_id: int
    workspace_name: str = ""
    user_id: int | None = None
    username: str | None = None
    status: str
    message: str = ""
    model: str = ""
    runtime: str = ""
    url: str = ""
    replicas_ready: int = 0
    replicas_total: int = 0
    created_at: datetime | None = None
    running_s: float = 0.0
    stopped_at: datetime | None = None
    ab_header: str = ""
    max_body_bytes: int = 0
    revisions: list[ServiceRevision] = []
    replicas: list[ServiceReplica] = []


class ServiceKey(ApiModel):
    """A service API key as listed: its name and prefix (the key itself is shown once, at creation)."""

    id: int
    name: str
    prefix: str
    created_at: datetime | None = None


class CreatedServiceKey(ServiceKey):
    """A key just created: ``key`` is shown this once, never again."""

    key: str


class ServiceLoadPoint(ApiModel):
    """Requests, errors, concurrency and latency of one revision over one report interval (all gateways)."""

    at: datetime
    revision: int
    requests: int = 0
    errors: int = 0
    concurrency: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
