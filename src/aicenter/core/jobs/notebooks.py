"""Notebooks, pure: what a user asks for (``NotebookSpec``), the job spec it becomes, and idle culling's decision.

A notebook is a job of kind ``notebook`` with one replica running the platform's JupyterLab and SSH agent in the
replica's sandbox (``aicenter.runtime.notebook``). The user names an image, an algorithm version (checked out
*writable* into the notebook's work dir), datasets and resources, like a training job, but no command.

Idleness is what the user did, not the wall clock: a notebook is idle when no kernel is busy, JupyterLab saw no
request or terminal input, no SSH session had input, no proxied request arrived and its GPUs (where NVML reports
them) were not used, all for the idle timeout. ``decide_idle`` turns those observations into keep, warn or cull.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from pydantic import Field, ValidationError, field_validator

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs._model import SpecModel, fail, translate
from aicenter.core.jobs._yaml import load_document
from aicenter.core.jobs.spec import NOTEBOOK_COMMAND, NOTEBOOK_TASK, JobKind, JobSpec, ResourceRequest, parse_job_spec

__all__ = [
    "MAX_IDLE_TIMEOUT_S",
    "MIN_IDLE_TIMEOUT_S",
    "IdleDecision",
    "IdleVerdict",
    "NotebookActivity",
    "NotebookSpec",
    "check_idle_timeout",
    "decide_idle",
    "last_activity",
    "parse_notebook_spec",
]

MIN_IDLE_TIMEOUT_S = 60
MAX_IDLE_TIMEOUT_S = 30 * 24 * 3600
_SPEC_KEYS = ("name", "workspace", "pool", "description", "image", "algorithm", "datasets", "env", "priority")


def check_idle_timeout(value: Any, field: str) -> int | None:
    """An idle timeout in seconds: None (the workspace's or platform's default), 0 (never cull) or 60 s..30 d."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed(f"must be a whole number of seconds (got {value!r})", field=field)
    if value != 0 and not MIN_IDLE_TIMEOUT_S <= value <= MAX_IDLE_TIMEOUT_S:
        raise ValidationFailed(
            f"must be 0 (never cull) or between {MIN_IDLE_TIMEOUT_S} and {MAX_IDLE_TIMEOUT_S} seconds (got {value})",
            field=field,
        )
    return value


class NotebookSpec(SpecModel):
    """A notebook as a user asks for it: the job spec's inputs without tasks, framework or command.

    Attributes:
        resources: One ``ResourceRequest`` (a spec name, or cpu/memory/gpu).
        idle_timeout_s: Cull after this long idle; None takes the workspace's (else the platform's) default;
            0 never culls.
    """

    name: str
    workspace: str | None = None
    pool: str | None = None
    description: str = ""
    image: str = "host"
    algorithm: str | None = None
    datasets: list[str] = Field(default_factory=list)
    resources: ResourceRequest
    env: dict[str, str] = Field(default_factory=dict)
    priority: str = "normal"
    idle_timeout_s: int | None = None

    @field_validator("idle_timeout_s", mode="before")
    @classmethod
    def _idle(cls, value: Any) -> int | None:
        try:
            return check_idle_timeout(value, "")
        except ValidationFailed as exc:
            fail(exc.message)

    def job_spec(self) -> JobSpec:
        """The notebook's job spec (kind ``notebook``, one task ``notebook``), validated by the job spec's own
        rules, so an image or dataset reference is refused exactly as for a training job."""
        data: dict[str, Any] = {key: getattr(self, key) for key in _SPEC_KEYS if getattr(self, key) is not None}
        data["kind"] = JobKind.NOTEBOOK.value
        data["tasks"] = [
            {
                "name": NOTEBOOK_TASK,
                "replicas": 1,
                "resources": self.resources.model_dump(mode="json"),
                "command": NOTEBOOK_COMMAND,
            }
        ]
        return parse_job_spec(data)


def parse_notebook_spec(source: str | Mapping[str, Any]) -> tuple[NotebookSpec, JobSpec]:
    """Parse a notebook request (YAML/JSON text or a mapping) and the job spec it becomes.

    Raises:
        ValidationFailed: ``field`` names the first problem (``resources.memory``, ``datasets[1]``).
    """
    data = load_document(source) if isinstance(source, str) else source
    if not isinstance(data, Mapping):
        raise ValidationFailed("a notebook is a mapping of fields (name, image, resources, ...)")
    try:
        spec = NotebookSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise translate(exc) from None
    try:
        job = spec.job_spec()
    except ValidationFailed as exc:  # tasks[0].resources.x is resources.x to whoever wrote the notebook
        field = str(exc.details.get("field") or "")
        if field.startswith("tasks[0]."):
            field = field.removeprefix("tasks[0].")
        raise ValidationFailed(exc.message, field=field or None) from None
    return spec, job


# -- idleness -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NotebookActivity:
    """What was observed of one running notebook, each the latest time a user did something (None: never/unknown).

    Attributes:
        running_since: When the current attempt started running (idleness never reaches back before it).
        jupyter_readable: Whether JupyterLab answered its status; when it did not, nothing is decided.
        kernel_busy: A kernel is executing now.
        jupyter: JupyterLab's ``last_activity`` (API requests, kernel messages, terminal input).
        ssh: The last input of an SSH session (the agent's activity file).
        proxy: The last request the platform's proxy passed to it.
        gpu: The last time one of its GPUs showed utilization.
    """

    running_since: datetime
    jupyter_readable: bool = True
    kernel_busy: bool = False
    jupyter: datetime | None = None
    ssh: datetime | None = None
    proxy: datetime | None = None
    gpu: datetime | None = None


def last_activity(activity: NotebookActivity, now: datetime) -> datetime:
    """The latest sign of use: now while a kernel is busy, else the newest observation (at least the start)."""
    if activity.kernel_busy:
        return now
    seen: Iterable[datetime | None] = (activity.jupyter, activity.ssh, activity.proxy, activity.gpu)
    return max([activity.running_since, *(t for t in seen if t is not None)])


class IdleVerdict(StrEnum):
    KEEP = "keep"
    WARN = "warn"  # tell the user (event, console banner) that it will be culled at ``cull_at``
    CULL = "cull"  # stop it (never delete): idle for the whole timeout, and warned before


@dataclass(frozen=True, slots=True)
class IdleDecision:
    """What to do with one notebook now, and why.

    Attributes:
        verdict: Keep, warn or cull.
        idle_since: The last activity.
        cull_at: When it will be culled if nothing happens (None: never, culling is off).
    """

    verdict: IdleVerdict
    idle_since: datetime
    cull_at: datetime | None


def decide_idle(
    activity: NotebookActivity,
    *,
    now: datetime,
    timeout_s: int,
    warning_s: int,
    warned_at: datetime | None,
) -> IdleDecision:
    """Keep, warn or cull one running notebook.

    A notebook is culled only after a warning that came at least ``warning_s`` before (or at its cull time when
    the warning period is longer than the timeout): a user who sees the banner has time to come back. A warning
    older than the last activity no longer counts (the user came back; the next idle period warns again).

    Args:
        activity: What was observed.
        now: The current time.
        timeout_s: Idle time after which it is culled; 0 turns culling off.
        warning_s: How long before the cull the warning comes.
        warned_at: When it was last warned, if ever.
    """
    since = last_activity(activity, now)
    if timeout_s <= 0 or not activity.jupyter_readable:
        return IdleDecision(IdleVerdict.KEEP, since, None)
    cull_at = since + timedelta(seconds=timeout_s)
    warn_at = cull_at - timedelta(seconds=min(warning_s, timeout_s))
    warned = warned_at is not None and warned_at >= since
    if now < warn_at:
        return IdleDecision(IdleVerdict.KEEP, since, cull_at)
    if not warned:
        # A warning is always given its full period, even when the culler saw the notebook late.
        return IdleDecision(IdleVerdict.WARN, since, max(cull_at, now + timedelta(seconds=min(warning_s, timeout_s))))
    assert warned_at is not None
    due = max(cull_at, warned_at + timedelta(seconds=min(warning_s, timeout_s)))
    if now >= due:
        return IdleDecision(IdleVerdict.CULL, since, due)
    return IdleDecision(IdleVerdict.KEEP, since, due)
