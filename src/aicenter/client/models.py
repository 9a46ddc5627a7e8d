"""Typed views of the API's responses, mirroring docs/dev/api-surface.md.

Models accept fields they do not know (``extra="allow"``), so an SDK keeps working against a newer server, and
:meth:`ApiModel.to_json` gives back exactly what the server sent (fields it omitted stay omitted).
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AcceleratorType",
    "ApiModel",
    "AuditEvent",
    "Build",
    "FileInfo",
    "FsckReport",
    "GcReport",
    "Health",
    "Item",
    "Job",
    "JobEvent",
    "JobMetrics",
    "JobReplica",
    "JobTemplate",
    "LoginResult",
    "Member",
    "MetricPoint",
    "MetricSeries",
    "MyWorkspace",
    "Node",
    "NodeAccelerator",
    "Page",
    "Pool",
    "Quota",
    "Spec",
    "StorageUsage",
    "Token",
    "TokenCreated",
    "Upload",
    "User",
    "Version",
    "Workspace",
]

M = TypeVar("M", bound="ApiModel")


class ApiModel(BaseModel):
    """Base of every response model."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)

    def to_json(self) -> dict[str, Any]:
        """The JSON object as the server sent it."""
        return self.model_dump(mode="json", exclude_unset=True)


class Page(BaseModel, Generic[M]):
    """One page of a list: ``items`` and the cursor of the next page (``None`` on the last one)."""

    items: list[M]
    next_cursor: str | None = None


class Health(ApiModel):
    status: str
    version: str


class User(ApiModel):
    id: int
    username: str
    display_name: str = ""
    email: str | None = None
    is_platform_admin: bool = False
    state: str = "active"
    default_workspace_id: int | None = None
    created_at: datetime | None = None


class LoginResult(ApiModel):
    token: str = Field(repr=False)
    expires_at: datetime | None = None
    user: User


class Token(ApiModel):
    id: int
    name: str
    kind: str = "api"
    created_at: datetime | None = None
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    last_used_at: datetime | None = None


class TokenCreated(Token):
    token: str = Field(repr=False, description="The secret; the server never shows it again.")


class Workspace(ApiModel):
    id: int
    name: str
    description: str = ""
    balance: Decimal | None = None  # coins; absent in the pool-grant listing
    created_by_id: int | None = None
    admins_read_logs: bool = False  # whether platform admins outside it may read its job logs
    notebook_idle_timeout_s: int | None = None  # its notebooks' idle timeout; None: the platform's default, 0: never
    created_at: datetime | None = None
    updated_at: datetime | None = None


class MyWorkspace(ApiModel):
    workspace: Workspace
    role: str


class Member(ApiModel):
    user_id: int
    username: str
    display_name: str = ""
    role: str
    created_at: datetime | None = None


class Quota(ApiModel):
    """Resources are normalized: ``cpu`` in milli-cores, ``memory`` in bytes, accelerators in devices."""

    id: int | None = None
    workspace_id: int
    pool_id: int
    pool_name: str | None = None
    guaranteed: dict[str, int] = {}
    maximum: dict[str, int] = {}
    used: dict[str, int] = {}


class AuditEvent(ApiModel):
    id: int
    at: datetime
    actor_id: int | None = None
    actor_name: str | None = None
    action: str
    target_type: str | None = None
    target_id: str | int | None = None
    workspace_id: int | None = None
    client_address: str | None = None
    request_id: str | None = None
    details: dict[str, Any] = {}


class NodeAccelerator(ApiModel):
    index: int
    type: str
    model: str | None = None  # the product name the driver reports
    memory_bytes: int | None = None
    nvlink_domain: str | None = None


class Node(ApiModel):
    id: int
    name: str
    address: str | None = None
    executor: str | None = None
    cpu_milli: int
    memory_bytes: int
    accelerators: list[NodeAccelerator] = []
    labels: dict[str, str] = {}
    rack: str | None = None
    leaf: str | None = None
    spine: str | None = None
    nvlink_domain: str | None = None
    schedule: str = "schedulable"
    state: str = "ready"
    last_heartbeat_at: datetime | None = None
    pools: list[str] = []
    created_at: datetime | None = None
    updated_at: datetime | None = None


class AcceleratorType(ApiModel):
    id: int
    name: str
    vendor: str
    memory_bytes: int = 0
    description: str = ""
    created_at: datetime | None = None


class Spec(ApiModel):
    id: int
    name: str
    description: str = ""
    cpu_milli: int
    memory_bytes: int
    accelerators: int = 0
    accelerator_share: int = 0
    accelerator_type: str | None = None
    price_per_hour: Decimal = Decimal(0)  # sent as a decimal string: money never goes through a float
    billing_weight: float = 1.0
    pool_id: int | None = None
    enabled: bool = True
    created_at: datetime | None = None
    updated_at: datetime | None = None


class Pool(ApiModel):
    id: int
    name: str
    description: str = ""
    selector: dict[str, str] = {}
    is_default: bool = False
    node_count: int = 0
    workspaces: list[int] | None = None  # platform admins only
    created_at: datetime | None = None


# -- catalog ----------------------------------------------------------------------------------------------------


class Item(ApiModel):
    """A dataset, algorithm, image or model: a name with immutable versions."""

    id: int
    kind: str
    name: str
    is_preset: bool = False
    owner_id: int | None = None
    owner_name: str | None = None
    workspace_id: int | None = None
    workspace_name: str | None = None
    description: str = ""
    tags: list[str] = []
    metadata: dict[str, Any] = {}
    version_count: int = 0
    latest_version: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


class Version(ApiModel):
    """One immutable version of an item; ``ref`` names it the way the CLI takes it (``imagenet-mini:2``)."""

    id: int
    item_id: int
    kind: str
    item_name: str
    owner_name: str | None = None
    number: int
    visibility: str = "private"
    shared_workspace_id: int | None = None
    shared_workspace_name: str | None = None
    state: str = "ready"
    description: str = ""
    metadata: dict[str, Any] = {}
    file_count: int = 0
    size_bytes: int = 0
    manifest_sha256: str | None = None
    created_by_id: int | None = None
    created_by_name: str | None = None
    copied_from_id: int | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    ref: str = ""
    can_read_content: bool = False


class FileInfo(ApiModel):
    """A file of a version: relative POSIX path, size, sha256 and mode."""

    path: str
    size: int
    sha256: str
    mode: int = 0o644


class Upload(ApiModel):
    """An upload session. ``missing`` lists, per needed file, the parts the server has not received yet."""

    id: int
    item_id: int
    kind: str
    state: str
    part_size: int
    expires_at: datetime | None = None
    file_count: int = 0
    total_bytes: int = 0
    needed: list[int] = []
    missing: list[dict[str, Any]] = []
    version_id: int | None = None


class Build(ApiModel):
    """The build of a venv image version: state, the environment's hash and the tail of its log."""

    version_id: int
    state: str
    env_hash: str | None = None
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    log_tail: str = ""


class StorageUsage(ApiModel):
    """A workspace's logical storage use and its quota (``limit_bytes`` None: unlimited)."""

    workspace_id: int
    limit_bytes: int | None = None
    used_bytes: int = 0


class GcReport(ApiModel):
    scanned: int = 0
    deleted: int = 0
    freed_bytes: int = 0
    kept_young: int = 0
    expired_uploads: int = 0


class FsckReport(ApiModel):
    checked: int = 0
    missing: list[str] = []
    damaged: list[str] = []
    quarantined: list[str] = []


# -- jobs -------------------------------------------------------------------------------------------------------


class JobEvent(ApiModel):
    """One status change of a job: who (``actor_name``: a user, ``system`` or ``scheduler``), when, and why."""

    id: int | None = None
    at: datetime
    actor_id: int | None = None
    actor_name: str = "system"
    from_status: str | None = None  # None: the job was created
    to_status: str
    reason: str | None = None
    message: str = ""


class JobReplica(ApiModel):
    """One attempt of one replica: where it runs (node, devices), its resources and how it ended."""

    id: int | None = None
    task: str
    index: int
    attempt: int = 0
    status: str = "pending"
    node_name: str | None = None
    devices: list[int] = []
    cpus: list[int] | None = None  # CPU cores it is pinned to; None: any
    cpu_milli: int = 0
    memory_bytes: int = 0
    gpu: int = 0
    gpu_type: str | None = None
    gpu_share: float | None = None
    spec_id: int | None = None
    billing_weight: float = 1.0
    exit_code: int | None = None
    reason: str | None = None
    ports: list[int] = []
    started_at: datetime | None = None
    finished_at: datetime | None = None


class Job(ApiModel):
    """A submitted job. ``replicas`` and ``events`` come with :meth:`Client.get_job`, not in lists."""

    id: int
    name: str
    kind: str = "train"
    status: str
    workspace_id: int
    workspace_name: str | None = None
    user_id: int | None = None
    username: str | None = None
    pool_id: int | None = None
    pool_name: str | None = None
    priority: int | None = None
    pending_reason: str = ""
    failure_reason: str | None = None
    exit_code: int | None = None
    message: str = ""
    restart_count: int = 0
    counted_restarts: int = 0  # the restarts that count against the spec's retry limit
    image_version_id: int | None = None
    algorithm_version_id: int | None = None
    dataset_version_ids: list[int] = []
    output_model_version_id: int | None = None  # the model version saved from the job's output
    stop_requested_by: int | None = None
    stop_requested_at: datetime | None = None
    spec: dict[str, Any] = {}
    submitted_at: datetime | None = None
    scheduled_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None
    replicas: list[JobReplica] = []
    events: list[JobEvent] = []

    @property
    def is_finished(self) -> bool:
        return self.status in ("succeeded", "failed", "stopped")


class JobTemplate(ApiModel):
    """A job spec saved in a workspace under a name, submitted later with overrides."""

    id: int
    name: str
    workspace_id: int
    workspace_name: str | None = None
    user_id: int | None = None
    username: str | None = None
    description: str = ""
    spec: dict[str, Any] = {}
    created_at: datetime | None = None
    updated_at: datetime | None = None


class MetricPoint(ApiModel):
    """One value a job reported: its step (None when ``report`` got none), time, and value (None: NaN/inf)."""

    step: int | None = None
    at: datetime
    value: float | None = None


class MetricSeries(ApiModel):
    name: str
    points: list[MetricPoint] = []


class JobMetrics(ApiModel):
    """What one replica of a job reported with ``aicenter.runtime.report``: one page of series and the latest
    value of every metric. ``cursor`` passed back later returns only the points reported since."""

    job_id: int
    task: str
    replica: int
    reporting: list[str] = []
    latest: dict[str, MetricPoint] = {}
    series: list[MetricSeries] = []
    next_cursor: str | None = None
    cursor: str = ""


class SeriesPoint(ApiModel):
    """One step of a series: its start, and the mean, min and max of the values within it."""

    at: datetime
    value: float
    min: float
    max: float


class SeriesData(ApiModel):
    labels: dict[str, str] = {}
    workspace_id: int | None = None
    job_id: int | None = None
    node_id: int | None = None
    points: list[SeriesPoint] = []


class Series(ApiModel):
    """A range query's answer: every matching series at ``step_s`` seconds per point, read from the ``raw``,
    ``5m`` or ``1h`` tier (``resolution``)."""

    name: str
    step_s: int
    resolution: str
    series: list[SeriesData] = []
