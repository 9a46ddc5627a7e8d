"""What a user asks to deploy, pure: a service's first revision (``DeploySpec``), a new revision
(``RevisionSpec``), how traffic moves to it (``Rollout``), and the rules of traffic percentages.

A revision is a model version served by a runtime on a replica spec, scaled between ``min_replicas`` and
``max_replicas`` around ``target_concurrency`` requests in flight per replica. ``replica_job_spec`` turns a
revision into the job spec every one of its replicas is submitted with (kind ``service``), so references,
pools, quota and the sandbox are those of any job.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs import (
    JobKind,
    JobSpec,
    ResourceRequest,
    SpecModel,
    fail,
    load_document,
    parse_job_spec,
    translate,
)
from aicenter.core.jobs.serving import (
    COMMAND_RUNTIME,
    MODEL_SERVER_RUNTIMES,
    SERVE_COMMAND,
    SERVICE_TASK,
    V2_READY_PATH,
    check_ready_path,
)
from aicenter.core.names import check_name

__all__ = [
    "AUTO_RUNTIME",
    "DeploySpec",
    "RevisionSpec",
    "RevisionState",
    "Rollout",
    "RolloutStrategy",
    "ServiceStatus",
    "check_traffic",
    "parse_deploy_spec",
    "parse_revision_spec",
    "replica_job_spec",
]

AUTO_RUNTIME = "auto"
_REVISION_KEYS = ("image", "algorithm", "pool", "env")


class ServiceStatus(StrEnum):
    DEPLOYING = "deploying"  # no revision has served yet
    READY = "ready"  # its traffic is served by ready revisions
    UPDATING = "updating"  # a new revision is starting or taking traffic step by step
    FAILED = "failed"  # its only revision failed
    STOPPED = "stopped"  # stopped by its owner or an admin: no replicas, every request 503


class RevisionState(StrEnum):
    STARTING = "starting"  # replicas are starting; it takes no traffic until one is ready
    READY = "ready"  # it has served (a ready replica answered); it may take traffic
    FAILED = "failed"  # it never became ready (the reason is its message); the old revision keeps serving
    RETIRED = "retired"  # replaced or rolled back: no traffic, no replicas


class RolloutStrategy(StrEnum):
    ALL = "all"  # all traffic moves once the new revision is ready
    STEPS = "steps"  # traffic moves by ``step_percent`` every ``step_interval_s``
    CANARY = "canary"  # ``canary_percent`` moves and stays until promoted or rolled back


class Rollout(SpecModel):
    """How traffic moves to a new revision once it is ready."""

    strategy: RolloutStrategy = RolloutStrategy.ALL
    canary_percent: int = Field(default=10, ge=0, le=99, strict=True)  # 0: by header only
    step_percent: int = Field(default=25, ge=1, le=100, strict=True)
    step_interval_s: int = Field(default=30, ge=1, le=3600, strict=True)

    @field_validator("strategy", mode="before")
    @classmethod
    def _strategy(cls, value: Any) -> RolloutStrategy:
        if value not in tuple(s.value for s in RolloutStrategy):
            fail(f"{value!r} is not a rollout strategy; use all, steps or canary")
        return RolloutStrategy(value)


class RevisionSpec(SpecModel):
    """One revision as a user asks for it.

    Attributes:
        model: The model version (``name:version``, ``#id``); optional only for ``runtime: command``.
        runtime: ``auto`` (from the model's format and files), ``onnx``, ``torchscript``, ``sklearn``,
            ``python`` (a custom predictor class, ``entry``) or ``command`` (``command`` serves HTTP on $PORT).
        entry: The custom predictor, ``file.py:Class`` or ``module:Class``, in ``algorithm`` or the model.
        algorithm: An algorithm version with the predictor's code (mounted read-only at $AICENTER_CODE_DIR).
        command: The custom command (``runtime: command``).
        ready_path: The custom command's readiness path (200 once it can answer).
        resources: Each replica's resources.
        min_replicas / max_replicas: Scale bounds; 0 allows scale to zero.
        target_concurrency: Requests in flight one replica is meant to handle.
        scale_to_zero_grace_s: Idle time before the last replica goes (min_replicas 0).
        stable_window_s: The autoscaler's averaging window (its panic window is a tenth of it).
        activation_timeout_s: How long the gateway holds a request while a replica starts.
        ready_timeout_s: A revision not ready after this long fails (the old one keeps serving).
        header_value: The value of the service's A/B header that routes to this revision.
    """

    model: str | None = None
    runtime: str = AUTO_RUNTIME
    entry: str | None = None
    image: str = "host"
    algorithm: str | None = None
    pool: str | None = None
    command: str | None = None
    ready_path: str | None = None
    resources: ResourceRequest = Field(
        default_factory=lambda: ResourceRequest.model_validate({"cpu": "1", "memory": "1Gi"})
    )
    env: dict[str, str] = Field(default_factory=dict)
    min_replicas: int = Field(default=0, ge=0, le=100, strict=True)
    max_replicas: int = Field(default=3, ge=1, le=100, strict=True)
    target_concurrency: float = Field(default=8.0, gt=0, le=10_000)
    scale_to_zero_grace_s: int = Field(default=300, ge=0, le=7 * 24 * 3600, strict=True)
    stable_window_s: int = Field(default=60, ge=2, le=3600, strict=True)
    activation_timeout_s: int = Field(default=60, ge=1, le=900, strict=True)
    ready_timeout_s: int = Field(default=600, ge=5, le=24 * 3600, strict=True)
    workers: int = Field(default=1, ge=1, le=64, strict=True)
    header_value: str = Field(default="", max_length=128)

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> str:
        known = (AUTO_RUNTIME, *MODEL_SERVER_RUNTIMES, COMMAND_RUNTIME)
        if value not in known:
            fail(f"{value!r} is not a runtime; use one of {', '.join(known)}")
        return str(value)

    @field_validator("ready_path", mode="before")
    @classmethod
    def _ready_path(cls, value: Any) -> Any:
        # Checked here, not only by the replica's job spec: the error then names ready_path, not serving.ready_path.
        return None if value is None else check_ready_path(value)

    @model_validator(mode="after")
    def _rules(self) -> RevisionSpec:
        if self.min_replicas > self.max_replicas:
            fail(f"is more than max_replicas ({self.max_replicas})", at="min_replicas")
        if self.runtime == COMMAND_RUNTIME:
            if not (self.command or "").strip():
                fail("a command runtime needs the command that serves HTTP on $PORT", at="command")
        else:
            if self.command is not None:
                fail('a command is for runtime "command" (the model server needs none)', at="command")
            if self.ready_path is not None:
                fail('ready_path is for runtime "command" (the model server has its own)', at="ready_path")
            if self.model is None:
                fail("name the model version to serve (e.g. mnist:3)", at="model")
        if self.runtime == "python" and not self.entry:
            fail("the python runtime needs entry: the predictor class, e.g. predictor.py:Model", at="entry")
        return self

    def scaling_floor(self) -> int:
        """The replicas a starting revision runs: its minimum, and at least one to show it can become ready."""
        return max(1, self.min_replicas)


class DeploySpec(RevisionSpec):
    """A new service: its name and settings, and its first revision."""

    name: str
    workspace: str | None = None
    description: str = Field(default="", max_length=4096)
    ab_header: str = Field(default="", max_length=64)
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=1024 * 1024 * 1024, strict=True)

    @field_validator("name", "workspace", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        if value is None:
            return value
        try:
            return check_name(value, "")
        except ValidationFailed as exc:
            fail(exc.message)

    @field_validator("ab_header", mode="before")
    @classmethod
    def _header(cls, value: Any) -> str:
        if not isinstance(value, str) or (value and not all(c.isalnum() or c == "-" for c in value)):
            fail(f"must be an HTTP header name (letters, digits and -), got {value!r}")
        return value.lower()

    def revision(self) -> RevisionSpec:
        """The first revision's part of the request."""
        own = set(DeploySpec.model_fields) - set(RevisionSpec.model_fields)
        return RevisionSpec.model_validate(self.model_dump(exclude=own))


def _load(source: str | Mapping[str, Any], what: str) -> dict[str, Any]:
    data = load_document(source) if isinstance(source, str) else source
    if not isinstance(data, Mapping):
        raise ValidationFailed(f"{what} is a mapping of fields (model, runtime, resources, ...)")
    return dict(data)


def parse_deploy_spec(source: str | Mapping[str, Any]) -> DeploySpec:
    """Parse a deploy request; ``ValidationFailed.field`` names the first problem."""
    try:
        return DeploySpec.model_validate(_load(source, "a service"))
    except ValidationError as exc:
        raise translate(exc) from None


def parse_revision_spec(source: str | Mapping[str, Any], base: Mapping[str, Any] | None = None) -> RevisionSpec:
    """Parse a new revision: ``base`` (the current revision's spec) overlaid with what the request changes."""
    given = _load(source, "a revision")
    data = {**(base or {}), **given}
    if data.get("runtime") != COMMAND_RUNTIME:
        # Leaving a custom command for the model server: the old command and readiness path are not carried over.
        for key in ("command", "ready_path"):
            if key not in given:
                data.pop(key, None)
    try:
        return RevisionSpec.model_validate(data)
    except ValidationError as exc:
        raise translate(exc) from None


def check_traffic(traffic: Mapping[int, int], known: set[int]) -> dict[int, int]:
    """A traffic assignment (revision number -> percent): known revisions, whole percents 0..100 summing to 100.

    Raises:
        ValidationFailed: The field is ``traffic`` (or ``traffic.<n>``) and the message says what is off.
    """
    out: dict[int, int] = {}
    for number, percent in traffic.items():
        if number not in known:
            raise ValidationFailed(f"revision {number} does not exist in this service", field=f"traffic.{number}")
        if isinstance(percent, bool) or not isinstance(percent, int) or not 0 <= percent <= 100:
            raise ValidationFailed(
                f"must be a whole percent from 0 to 100 (got {percent!r})", field=f"traffic.{number}"
            )
        out[number] = percent
    total = sum(out.values())
    if total != 100:
        raise ValidationFailed(f"traffic percentages must sum to 100 (they sum to {total})", field="traffic")
    return out


def replica_job_spec(
    *,
    service: str,
    revision: int,
    spec: RevisionSpec,
    runtime: str,
    model_version_id: int | None,
    model_version: str,
    algorithm_version_id: int | None,
    image_version_id: int | None,
    signature: Mapping[str, Any] | None,
    max_body_bytes: int,
) -> JobSpec:
    """The job spec of every replica of a revision: references by version id (``#42``), so a replica started
    at night serves exactly the version deployed, whatever was published under the name since."""
    data: dict[str, Any] = {
        "kind": JobKind.SERVICE.value,
        "name": f"{service}-r{revision}"[:64],
        "image": "host" if image_version_id is None else f"#{image_version_id}",
        "env": dict(spec.env),
        "tasks": [
            {
                "name": SERVICE_TASK,
                "replicas": 1,
                "resources": spec.resources.model_dump(mode="json"),
                "command": spec.command if runtime == COMMAND_RUNTIME else SERVE_COMMAND,
            }
        ],
        "serving": {
            "service": service,
            "revision": revision,
            "runtime": runtime,
            "ready_path": spec.ready_path or V2_READY_PATH,
            "model_version": model_version,
            "max_body_bytes": max_body_bytes,
            "workers": spec.workers,
        },
    }
    if spec.pool is not None:
        data["pool"] = spec.pool
    if spec.entry:
        data["serving"]["entry"] = spec.entry
    if signature:
        data["serving"]["signature"] = dict(signature)
    if model_version_id is not None:
        data["model"] = f"#{model_version_id}"
    if algorithm_version_id is not None:
        data["algorithm"] = f"#{algorithm_version_id}"
    return parse_job_spec(data)
