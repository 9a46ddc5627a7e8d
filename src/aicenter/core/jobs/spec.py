"""The job spec: what a user submits (YAML for the CLI, JSON for the API; one schema), parsed and normalized.

``parse_job_spec`` is the only way in. Errors name the exact field (``tasks[0].resources.memory``) with a message
a person can act on; ``JobSpec.normalized()`` is the JSON form stored on the job and in templates, and parses
back to an equal spec (``parse_job_spec(spec.normalized()) == spec``).
"""

from __future__ import annotations

import math
import re
import shlex
from collections.abc import Iterator, Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import (
    Field,
    ValidationError,
    field_validator,
    model_serializer,
    model_validator,
)

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs._model import SpecModel, choice, core_check, fail, show, translate
from aicenter.core.jobs._yaml import load_document
from aicenter.core.jobs.retry import RetryPolicy
from aicenter.core.jobs.serving import SERVICE_PRIORITY, ServingConfig, service_rules
from aicenter.core.names import NAME_RE, USERNAME_RE, check_name, check_text
from aicenter.core.quantity import format_cpu, parse_cpu, parse_memory


class JobKind(StrEnum):
    TRAIN = "train"
    NOTEBOOK = "notebook"
    TRIAL = "trial"
    SERVICE = "service"  # one replica of an inference service (core/jobs/serving.py)


class Framework(StrEnum):
    PYTORCH = "pytorch"
    TENSORFLOW = "tensorflow"
    PADDLE = "paddle"
    MINDSPORE = "mindspore"
    MPI = "mpi"
    NONE = "none"


class Priority(StrEnum):
    LOW = "low"
    NORMAL = "normal"
    HIGH = "high"
    URGENT = "urgent"


# Spaced by 10 so that a level can be added between two without rewriting stored jobs.
PRIORITY_VALUES: Mapping[Priority, int] = {
    Priority.LOW: 10,
    Priority.NORMAL: 20,
    Priority.HIGH: 30,
    Priority.URGENT: 40,
}


def priority_value(priority: Priority) -> int:
    """The scheduler's integer priority (higher runs first and may preempt lower)."""
    return PRIORITY_VALUES[priority]


TENSORFLOW_TASKS = ("chief", "worker", "ps", "evaluator")
NOTEBOOK_TASK = "notebook"
NOTEBOOK_COMMAND = "aicenter-notebook"
"""What a notebook's stored spec says it runs: the platform's JupyterLab and SSH agent (``aicenter.runtime.notebook``),
started by the plan, never by a command the user wrote."""
MPI_LAUNCHER = "launcher"
MAX_TASKS = 16
MAX_REPLICAS = 1024
MAX_GPUS = 64
MAX_DATASETS = 32
MAX_COMMAND = 65_536
MAX_ENV = 256
MAX_ENV_VALUE = 32_768
RESERVED_ENV_PREFIX = "AICENTER_"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_VERSION = re.compile(r"[1-9][0-9]{0,9}")
_REF_EXAMPLES = "examples: resnet:3, resnet, alice/resnet:3, preset/resnet:3, #42"


def ref_name(ref: str) -> str | None:
    """The item name a catalog reference names (``alice/resnet:3`` -> ``resnet``); ``None`` for ``#<id>``, and
    for text that is not a reference."""
    if ref.startswith("#"):
        return None
    owner, _, rest = ref.rpartition("/")
    name, colon, version = rest.partition(":")
    if owner and not USERNAME_RE.fullmatch(owner):
        return None
    if colon and not _VERSION.fullmatch(version):
        return None
    return name if NAME_RE.fullmatch(name) else None


def _ref(value: Any, at: str | None = None) -> str:
    if not isinstance(value, str):
        fail(f"must be a string (got {show(value)})", at=at)
    if not (value.startswith("#") and _VERSION.fullmatch(value[1:])) and ref_name(value) is None:
        fail(f"{show(value)} is not a catalog reference ({_REF_EXAMPLES})", at=at)
    return value


def _env(value: Any) -> dict[str, str]:
    """Variable name -> value. Numbers and booleans become text (YAML writes ``EPOCHS: 3``)."""
    if not isinstance(value, dict):
        fail(f"must be a mapping of variable names to values (got {show(value)})")
    if len(value) > MAX_ENV:
        fail(f"has {len(value)} variables; the limit is {MAX_ENV}")
    env: dict[str, str] = {}
    for key, raw in value.items():
        if not isinstance(key, str) or not _ENV_NAME.fullmatch(key):
            fail(f"{show(key)} is not a variable name (letters, digits and _, not starting with a digit)", at=str(key))
        if key.startswith(RESERVED_ENV_PREFIX):
            fail(f"names starting with {RESERVED_ENV_PREFIX} are set by aicenter", at=key)
        if isinstance(raw, bool):
            text = "true" if raw else "false"
        elif isinstance(raw, str | int) or (isinstance(raw, float) and math.isfinite(raw)):
            text = str(raw)
        else:
            fail(f"must be a string, a number or true/false (got {show(raw)})", at=key)
        if "\x00" in text:
            fail("must not contain NUL characters", at=key)
        if len(text) > MAX_ENV_VALUE:
            fail(f"is {len(text)} characters long; the limit is {MAX_ENV_VALUE}", at=key)
        env[key] = text
    return env


class ResourceRequest(SpecModel):
    """What each replica of a task gets: a resource spec by name, or explicit amounts.

    Input keys: ``spec``, or ``cpu`` and ``memory`` (quantities) with optional ``gpu``, ``gpu_type`` and
    ``gpu_share``. The normalized JSON writes ``cpu`` as a quantity (``"4"``, ``"500m"``) and ``memory`` in
    bytes, so that it parses back and ``--set tasks[0].resources.cpu=8`` replaces it.

    Attributes:
        spec: A ResourceSpec name (resolved by the jobs service); nothing else may be given with it.
        cpu_milli: Milli-cores.
        memory_bytes: Bytes.
        gpu: Whole accelerators; 1 with ``gpu_share``.
        gpu_type: Accelerator type (``nvidia-a100``); any type when absent.
        gpu_share: A fraction of ONE accelerator, 0.001..0.999 (thousandths: what the scheduler counts).
    """

    input_names: ClassVar[Mapping[str, str]] = {"cpu": "cpu_milli", "memory": "memory_bytes"}

    spec: str | None = None
    cpu_milli: int | None = Field(default=None, gt=0, strict=True)
    memory_bytes: int | None = Field(default=None, gt=0, strict=True)
    gpu: int = Field(default=0, ge=0, le=MAX_GPUS, strict=True)
    gpu_type: str | None = None
    gpu_share: float | None = None

    @model_validator(mode="before")
    @classmethod
    def _quantities(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for key, field, parse in (("cpu", "cpu_milli", parse_cpu), ("memory", "memory_bytes", parse_memory)):
            if key not in data:
                continue
            if data.get(field) is not None:
                fail(f"give {key} or {field}, not both", at=key)
            raw = data.pop(key)
            if raw is None:
                continue
            if not isinstance(raw, str | int | float) or isinstance(raw, bool):
                fail(f"{show(raw)} is not a quantity", at=key)
            try:
                amount = parse(raw, "")
            except ValidationFailed as exc:
                fail(exc.message, at=key)
            if amount <= 0:
                fail("must be greater than 0", at=key)
            if key == "memory" and amount < 2**20:
                bare = not isinstance(raw, str) or raw.strip().replace(".", "", 1).isdigit()
                hint = f"; write a unit, e.g. {str(raw).strip()}Gi" if bare else ""
                fail(f"{amount} bytes is less than 1Mi{hint}", at=key)
            data[field] = amount
        return data

    @field_validator("spec", "gpu_type", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return value if value is None else core_check(check_name, _string(value))

    @field_validator("gpu_share", mode="before")
    @classmethod
    def _share(cls, value: Any) -> float | None:
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
            fail(f"must be a number between 0 and 1 (got {show(value)})")
        if not 0 < value < 1:
            fail(f"must be greater than 0 and less than 1, e.g. 0.25 (got {show(value)})")
        share = round(float(value), 3)
        if not 0 < share < 1:
            fail("is finer than the thousandths of a device the scheduler counts")
        return share

    @model_validator(mode="after")
    def _rules(self) -> ResourceRequest:
        if self.spec is not None:
            for field, key in (("cpu_milli", "cpu"), ("memory_bytes", "memory"), ("gpu_type", "gpu_type"),
                               ("gpu_share", "gpu_share"), ("gpu", "gpu")):  # fmt: skip
                if getattr(self, field):
                    fail("give either spec or explicit amounts (cpu, memory, gpu), not both", at=key)
        else:
            for field, key in (("cpu_milli", "cpu"), ("memory_bytes", "memory")):
                if getattr(self, field) is None:
                    fail("is required (or give spec: the name of a resource spec)", at=key)
        if self.gpu_share is not None and self.gpu != 1:
            fail("needs gpu: 1 (a share is a fraction of one device)", at="gpu_share")
        if self.gpu_type is not None and self.gpu == 0:
            fail("needs gpu: 1 or more", at="gpu_type")
        return self

    @model_serializer
    def _serialize(self) -> dict[str, Any]:
        """The normalized form uses the input keys, with cpu as a quantity and memory in bytes."""
        out: dict[str, Any] = {
            "spec": self.spec,
            "cpu": None if self.cpu_milli is None else format_cpu(self.cpu_milli),
            "memory": self.memory_bytes,
            "gpu": self.gpu,
            "gpu_type": self.gpu_type,
            "gpu_share": self.gpu_share,
        }
        return {k: v for k, v in out.items() if v is not None}

    @property
    def accelerator_milli(self) -> int:
        """Accelerator share in milli: 1000 per whole device, or the fraction of one."""
        if self.gpu_share is not None:
            return round(self.gpu_share * 1000)
        return self.gpu * 1000

    @property
    def memory_mib(self) -> int | None:
        """Memory in MiB, rounded up (the scheduler's unit)."""
        return None if self.memory_bytes is None else -(-self.memory_bytes // 2**20)


def _string(value: Any) -> str:
    if not isinstance(value, str):
        if isinstance(value, int | float) and not isinstance(value, bool):
            fail(f'must be a string (got {show(value)}; quote it: "{value}")')
        fail(f"must be a string (got {show(value)})")
    return value


class TaskSpec(SpecModel):
    """A role of the job: ``replicas`` copies of one command with one resource request each."""

    name: str = "worker"
    replicas: int = Field(default=1, ge=1, le=MAX_REPLICAS, strict=True)
    resources: ResourceRequest
    command: str
    env: dict[str, str] = Field(default_factory=dict)

    @field_validator("name", mode="before")
    @classmethod
    def _name(cls, value: Any) -> str:
        return core_check(check_name, _string(value))

    @field_validator("command", mode="before")
    @classmethod
    def _command(cls, value: Any) -> str:
        """A shell command line, or a list of arguments (quoted into one line)."""
        if isinstance(value, list):
            if not value or not all(isinstance(a, str) for a in value):
                fail("a list command must hold one or more strings")
            value = shlex.join(value)
        text = _string(value)
        if not text.strip():
            fail("must not be empty")
        if "\x00" in text:
            fail("must not contain NUL characters")
        if len(text) > MAX_COMMAND:
            fail(f"is {len(text)} characters long; the limit is {MAX_COMMAND}")
        return text

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> dict[str, str]:
        return _env(value)


class JobSpec(SpecModel):
    """A job as submitted. See docs/jobs.md for every field and rule.

    ``pool`` names the pool the job runs in; when absent, the jobs service takes the pool of the tasks' resource
    specs, else the default pool.
    """

    kind: JobKind = JobKind.TRAIN
    name: str
    workspace: str | None = None
    pool: str | None = None
    description: str = ""
    image: str = "host"
    algorithm: str | None = None
    datasets: list[str] = Field(default_factory=list, max_length=MAX_DATASETS)
    framework: Framework = Framework.NONE
    tasks: list[TaskSpec] = Field(min_length=1, max_length=MAX_TASKS)
    priority: Priority = Priority.NORMAL
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    output_model: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    # A model version the job reads, mounted read-only at $AICENTER_MODEL_DIR (what a service replica serves).
    model: str | None = None
    serving: ServingConfig | None = None

    @field_validator("kind", mode="before")
    @classmethod
    def _kind(cls, value: Any) -> JobKind:
        return choice(JobKind, value)

    @field_validator("framework", mode="before")
    @classmethod
    def _framework(cls, value: Any) -> Framework:
        return choice(Framework, value)

    @field_validator("priority", mode="before")
    @classmethod
    def _priority(cls, value: Any) -> Priority:
        return choice(Priority, value)

    @field_validator("name", "workspace", "pool", "output_model", mode="before")
    @classmethod
    def _names(cls, value: Any) -> Any:
        return value if value is None else core_check(check_name, _string(value))

    @field_validator("description", mode="before")
    @classmethod
    def _description(cls, value: Any) -> str:
        return core_check(lambda v, f: check_text(v, f, 4096), _string(value))

    @field_validator("image", mode="before")
    @classmethod
    def _image(cls, value: Any) -> str:
        return "host" if value == "host" else _ref(value)

    @field_validator("algorithm", "model", mode="before")
    @classmethod
    def _algorithm(cls, value: Any) -> Any:
        return value if value is None else _ref(value)

    @field_validator("datasets", mode="before")
    @classmethod
    def _datasets(cls, value: Any) -> Any:
        """Each dataset is mounted at $AICENTER_DATA_DIR/<name>, so a name may appear once."""
        if not isinstance(value, list):
            return value  # pydantic says "must be a list"
        first_at: dict[str, int] = {}
        for i, ref in enumerate(value):
            name = ref_name(_ref(ref, at=f"[{i}]"))
            if name is not None:
                if name in first_at:
                    fail(f'dataset "{name}" is already mounted by datasets[{first_at[name]}]', at=f"[{i}]")
                first_at[name] = i
        return value

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> dict[str, str]:
        return _env(value)

    @model_validator(mode="after")
    def _rules(self) -> JobSpec:
        seen: dict[str, int] = {}
        for i, task in enumerate(self.tasks):
            if task.name in seen:
                fail(f'duplicate task name "{task.name}" (also tasks[{seen[task.name]}])', at=f"tasks[{i}].name")
            seen[task.name] = i
        _framework_rules(self.framework, self.tasks)
        if self.kind is JobKind.NOTEBOOK:
            _notebook_rules(self)
        if self.kind is JobKind.SERVICE:
            service_rules(self)
        elif self.serving is not None:
            fail("only a service replica has a serving section", at="serving")
        return self

    def normalized(self) -> dict[str, Any]:
        """The JSON form stored on the job and in templates; ``parse_job_spec`` reads it back to an equal spec."""
        return self.model_dump(mode="json", exclude_none=True)

    def task(self, name: str) -> TaskSpec:
        """The task called ``name``; KeyError when there is none."""
        for task in self.tasks:
            if task.name == name:
                return task
        raise KeyError(name)

    def env_for(self, task: TaskSpec) -> dict[str, str]:
        """The job's env overlaid with the task's (the task wins)."""
        return {**self.env, **task.env}

    def ranks(self) -> Iterator[tuple[TaskSpec, int]]:
        """Every replica as (task, index within the task), in rank order: tasks in spec order."""
        for task in self.tasks:
            for index in range(task.replicas):
                yield task, index

    @property
    def replica_count(self) -> int:
        return sum(t.replicas for t in self.tasks)

    @property
    def priority_value(self) -> int:
        if self.kind is JobKind.SERVICE:
            return SERVICE_PRIORITY
        return PRIORITY_VALUES[self.priority]


def _framework_rules(framework: Framework, tasks: list[TaskSpec]) -> None:
    """The task layout each framework's launcher understands (runtime/env.py builds its variables from it)."""
    if framework is Framework.MPI:
        launchers = [i for i, t in enumerate(tasks) if t.name == MPI_LAUNCHER]
        if not launchers:
            fail('an mpi job needs a task named "launcher" (1 replica, runs mpirun) and worker tasks', at="tasks")
        if tasks[launchers[0]].replicas != 1:
            fail("the mpi launcher runs as 1 replica", at=f"tasks[{launchers[0]}].replicas")
        if len(tasks) == 1:
            fail('an mpi job needs worker tasks besides the "launcher"', at="tasks")
    elif framework is Framework.TENSORFLOW:
        for i, task in enumerate(tasks):
            if task.name not in TENSORFLOW_TASKS:
                fail(
                    f'"{task.name}" is not a tensorflow task; use {", ".join(TENSORFLOW_TASKS)}', at=f"tasks[{i}].name"
                )
            if task.name in ("chief", "evaluator") and task.replicas != 1:
                fail(f'a tensorflow "{task.name}" runs as 1 replica', at=f"tasks[{i}].replicas")
    elif framework is Framework.PYTORCH:
        for i, task in enumerate(tasks):
            if task.name == "master" and (i != 0 or task.replicas != 1):
                fail('a pytorch "master" task is the first task, with 1 replica (it is rank 0)', at=f"tasks[{i}]")


def _notebook_rules(spec: JobSpec) -> None:
    """A notebook is one replica of the platform's JupyterLab: one task, named ``notebook``, no framework."""
    if len(spec.tasks) != 1 or spec.tasks[0].name != NOTEBOOK_TASK:
        fail(f'a notebook has one task, named "{NOTEBOOK_TASK}"', at="tasks")
    if spec.tasks[0].replicas != 1:
        fail("a notebook runs as 1 replica", at="tasks[0].replicas")
    if spec.tasks[0].command != NOTEBOOK_COMMAND:
        fail(f'a notebook runs JupyterLab: its command is "{NOTEBOOK_COMMAND}"', at="tasks[0].command")
    if spec.framework is not Framework.NONE:
        fail("a notebook has no framework", at="framework")
    if spec.output_model is not None:
        fail("a notebook saves its work dir as an algorithm version, not an output model", at="output_model")


def parse_job_spec(source: str | Mapping[str, Any]) -> JobSpec:
    """Parse and normalize a job spec.

    Args:
        source: YAML or JSON text, or the document as a mapping (overrides already applied).

    Returns:
        The validated spec.

    Raises:
        ValidationFailed: ``field`` is the path of the first problem (``tasks[0].resources.memory``), the message
            says what is wrong; ``details['errors']`` lists every problem found as ``{field, message}``; YAML
            syntax errors carry ``details['line']`` and ``details['column']``.
    """
    data = load_document(source) if isinstance(source, str) else source
    if data is None:
        raise ValidationFailed("the job spec is empty")
    if not isinstance(data, Mapping):
        raise ValidationFailed(f"the job spec must be a mapping of fields (name: ..., tasks: ...), got {show(data)}")
    try:
        return JobSpec.model_validate(dict(data))
    except ValidationError as exc:
        raise translate(exc) from None
