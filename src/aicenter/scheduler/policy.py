"""The policy document: which plugins a pool's scheduler runs and how they are tuned.

Load it from a dict, a YAML or JSON file or string, or a built-in name (``PolicyConfig.load``). Every error names
the field path (``ValidationFailed.details['field']``), e.g. ``las_thresholds[1]``.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from aicenter.core.errors import ValidationFailed

QueueOrderName = Literal["fifo", "priority", "fair-share", "user-round-robin", "las", "sjf"]
PlacementName = Literal["binpack", "spread", "best-fit", "random-fit", "fgd"]


class TaskClass(BaseModel):
    """One class of the workload's task-size distribution (for FGD)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    accelerator_milli: int = Field(
        ge=0, description="Accelerator share per replica: 1..999 for a fraction, 1000*k for k whole devices."
    )
    cpu_milli: int = Field(default=0, ge=0, description="Cpu per replica.")
    memory_mib: int = Field(default=0, ge=0, description="Memory per replica.")
    weight: float = Field(gt=0, description="Relative popularity (normalised over all classes).")

    @field_validator("accelerator_milli")
    @classmethod
    def _whole_or_fraction(cls, v: int) -> int:
        if v > 1000 and v % 1000:
            raise ValueError("above 1000 it must be whole devices (a multiple of 1000)")
        return v


class PolicyConfig(BaseModel):
    """A pool's scheduling policy. The defaults are the recommended policy (``default``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(default="custom", description="Label shown in reports.")
    queue_order: QueueOrderName = Field(
        default="fair-share",
        description="fifo; priority; fair-share (DRF across workspaces with quotas); user-round-robin; "
        "las (Tiresias discretised 2D-LAS on attained service); sjf (shortest estimate first).",
    )
    user_round_robin: bool = Field(
        default=True, description="Inside a workspace (fair-share), alternate between users."
    )
    las_thresholds: tuple[float, ...] = Field(
        default=(3600.0 * 8, 3600.0 * 64),
        description="2D-LAS queue limits in accelerator-seconds of attained service, increasing.",
    )
    las_starvation_factor: float = Field(
        default=4.0,
        ge=0,
        description="A LAS job waiting longer than factor x its last run goes back to the top queue (0 = off).",
    )
    las_starvation_s: float = Field(
        default=3600.0 * 6,
        ge=0,
        description="A LAS job waiting this long in any case goes back to the top queue (0 = off).",
    )
    placement: PlacementName = Field(
        default="binpack", description="How whole-device and cpu-only replicas choose nodes."
    )
    fractional_placement: PlacementName = Field(
        default="fgd", description="How replicas sharing a device choose the device."
    )
    fgd_task_classes: tuple[TaskClass, ...] = Field(
        default=(), description="FGD's task-size distribution; empty = learned from the jobs the scheduler sees."
    )
    fgd_candidates: int = Field(
        default=64,
        ge=1,
        description="FGD scores at most this many partly used nodes, the tightest (plus a few with only whole "
        "devices free). 64 keeps a 10,000-node cycle under 0.5 s; the fgd policy uses 1024 for quality.",
    )
    topology: bool = Field(default=True, description="Keep a gang on one node, NVLink domain, leaf, spine.")
    topology_limit: Literal["none", "leaf", "spine"] = Field(
        default="none", description="Refuse to spread a gang wider than this (none = prefer only)."
    )
    gang: bool = Field(default=True, description="All-or-nothing start at the job's gang minimum.")
    backfill: Literal["none", "easy", "greedy"] = Field(
        default="easy",
        description="none: strict order, the first job that does not fit blocks the rest; easy: it keeps a "
        "reservation and later jobs run only where they cannot delay it; greedy: any job that fits runs.",
    )
    preemption: bool = Field(default=True, description="Evict lower-ranked jobs and reclaim lent quota.")
    preemption_protect_s: float = Field(
        default=600.0, ge=0, description="A job started by preemption is not a victim for this long."
    )
    max_victims: int = Field(default=64, ge=1, description="Victims considered for one preemptor.")
    cache_affinity: bool = Field(default=True, description="Prefer nodes caching the job's datasets.")
    max_jobs_per_cycle: int = Field(default=1000, ge=1, description="Head of the queue examined per cycle.")
    seed: int = Field(default=0, description="Seed of random-fit.")

    @field_validator("las_thresholds")
    @classmethod
    def _increasing(cls, v: tuple[float, ...]) -> tuple[float, ...]:
        if any(b <= a for a, b in itertools.pairwise(v)) or any(x <= 0 for x in v):
            raise ValueError("thresholds must be positive and increasing")
        return v

    # ----- loading ------------------------------------------------------------------------------------------
    @classmethod
    def builtin(cls, name: str) -> PolicyConfig:
        """A built-in policy by name.

        Raises:
            ValidationFailed: On an unknown name.
        """
        try:
            doc = BUILTIN[name]
        except KeyError:
            raise ValidationFailed(
                f"unknown policy {name!r}; built-in: {', '.join(sorted(BUILTIN))}", field="policy"
            ) from None
        return cls.from_dict({"name": name, **doc})

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> PolicyConfig:
        """Validate a policy document. A ``base`` key starts from a built-in policy.

        Raises:
            ValidationFailed: Naming the first bad field's path.
        """
        if isinstance(doc, str):  # a bare word: a built-in name
            return cls.builtin(doc)
        if not isinstance(doc, Mapping):
            raise ValidationFailed("a policy document is a mapping", field="policy")
        data = dict(doc)
        base = data.pop("base", None)
        if base is not None:
            if not isinstance(base, str) or base not in BUILTIN:
                raise ValidationFailed(f"unknown base policy {base!r}", field="base")
            data = {**BUILTIN[base], "name": base, **data}
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            err = e.errors()[0]
            path = _path(err["loc"])
            raise ValidationFailed(err["msg"], field=path, details={"errors": len(e.errors())}) from None

    @classmethod
    def from_text(cls, text: str) -> PolicyConfig:
        """Parse YAML (JSON is YAML) text.

        Raises:
            ValidationFailed: On unparsable text or a bad field.
        """
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ValidationFailed(f"not YAML/JSON: {e}", field="policy") from None
        return cls.from_dict(doc)

    @classmethod
    def load(cls, source: str | Path | Mapping[str, Any] | PolicyConfig) -> PolicyConfig:
        """A built-in name, a path to a YAML/JSON file, YAML/JSON text, a dict, or a PolicyConfig.

        Raises:
            ValidationFailed: When it is none of these or invalid.
        """
        if isinstance(source, PolicyConfig):
            return source
        if isinstance(source, Mapping):
            return cls.from_dict(source)
        if isinstance(source, str) and source in BUILTIN:
            return cls.builtin(source)
        path = Path(source)
        if isinstance(source, Path) or (path.suffix in {".yaml", ".yml", ".json"} and "\n" not in str(source)):
            try:
                text = path.read_text()
            except OSError as e:
                raise ValidationFailed(f"cannot read policy file: {e.strerror}", field="policy") from None
            if path.suffix == ".json":
                try:
                    return cls.from_dict(json.loads(text))
                except json.JSONDecodeError as e:
                    raise ValidationFailed(f"not JSON: {e}", field="policy") from None
            return cls.from_text(text)
        return cls.from_text(str(source))


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out or "policy"


BUILTIN: dict[str, dict[str, Any]] = {
    "default": {},
    "fifo": {
        "queue_order": "fifo",
        "backfill": "none",
        "preemption": False,
        "placement": "binpack",
        "fractional_placement": "best-fit",
    },
    "priority": {"queue_order": "priority", "backfill": "easy", "preemption": True},
    "fair-share": {"queue_order": "fair-share", "backfill": "easy", "preemption": True},
    "tiresias": {"queue_order": "las", "backfill": "greedy", "preemption": True, "topology": True},
    "sjf": {"queue_order": "sjf", "backfill": "easy", "preemption": False},
    "best-fit": {
        "queue_order": "fifo",
        "backfill": "greedy",
        "preemption": False,
        "placement": "best-fit",
        "fractional_placement": "best-fit",
        "cache_affinity": False,
    },
    "random-fit": {
        "queue_order": "fifo",
        "backfill": "greedy",
        "preemption": False,
        "placement": "random-fit",
        "fractional_placement": "random-fit",
        "cache_affinity": False,
    },
    "fgd": {
        "fgd_candidates": 1024,
        "queue_order": "fifo",
        "backfill": "greedy",
        "preemption": False,
        "placement": "fgd",
        "fractional_placement": "fgd",
        "cache_affinity": False,
    },
}
"""Built-in policies: overrides of the defaults."""
