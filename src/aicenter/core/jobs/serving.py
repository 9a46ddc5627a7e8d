"""A service replica as a job, pure: the ``serving`` part of a job spec of kind ``service`` and its rules.

A replica of an inference service is a job of kind ``service`` with one task (``server``) and one replica, so it
is scheduled, sandboxed, executed and charged exactly like a training replica. ``services.serving`` writes these
specs (users deploy services, never submit such jobs); the spec carries everything the replica's plan needs: the
model version (the job's ``model``, mounted read-only at ``$AICENTER_MODEL_DIR``), and ``serving``: what serves
it (the platform's model server with a runtime, or the user's own command) and how the platform checks it is ready.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator

from aicenter.core.jobs._model import SpecModel, fail

__all__ = [
    "COMMAND_RUNTIME",
    "MODEL_SERVER_RUNTIMES",
    "SERVE_COMMAND",
    "SERVE_TOKEN_ENV",
    "SERVE_TOKEN_HEADER",
    "SERVICE_PRIORITY",
    "SERVICE_TASK",
    "V2_READY_PATH",
    "ServingConfig",
    "check_ready_path",
    "service_rules",
]

SERVICE_TASK = "server"
SERVE_COMMAND = "aicenter-serve"
"""What a model-server replica's stored spec says it runs: ``aicenter.runtime.serve``, started by the plan."""
SERVICE_PRIORITY = 35
"""Service replicas are placed before every training priority but ``urgent`` (40): a service that scales up under
traffic must not wait behind a queue of training jobs."""
MODEL_SERVER_RUNTIMES = ("onnx", "torchscript", "sklearn", "python")
COMMAND_RUNTIME = "command"
V2_READY_PATH = "/v2/health/ready"
SERVE_TOKEN_HEADER = "x-aicenter-serve-token"  # noqa: S105 - a header's name, not a secret
"""The request header that carries a replica's serve token: every request the platform sends a replica has it (the
gateway's, its readiness probes, the controller's), and the model server and the launcher's published-port relay
refuse a request without it. ``aicenter.runtime.serve`` and ``aicenter.runtime.relay`` (stdlib only) spell it
again; ``tests/unit/runtime`` checks that they agree."""
SERVE_TOKEN_ENV = "AICENTER_SERVE_TOKEN"  # noqa: S105 - a variable's name, not a secret
"""The variable that gives a replica its serve token (a custom command should check the header against it)."""
MAX_BODY_BYTES = 1024 * 1024 * 1024


class ServingConfig(SpecModel):
    """How a service replica serves.

    Attributes:
        service: The service's name: the model name of its Open Inference Protocol paths.
        revision: The revision's number.
        runtime: ``onnx``, ``torchscript``, ``sklearn``, ``python`` (the model server) or ``command`` (the task's
            command serves HTTP on ``$PORT`` itself).
        entry: The custom predictor (``file.py:Class`` or ``module:Class``) of the ``python`` runtime.
        ready_path: The path answered 200 once the replica can serve (the readiness gate covers model load).
        model_version: The model version's number, reported by the V2 metadata.
        signature: The model's inputs and outputs (``{"inputs": [...], "outputs": [...]}``), from the version's
            metadata; infer requests are checked against it.
        max_body_bytes: The largest request body.
        workers: Threads running ``predict`` at once in the model server.
    """

    service: str
    revision: int = Field(ge=1, strict=True)
    runtime: str
    entry: str | None = None
    ready_path: str = V2_READY_PATH
    model_version: str = ""
    signature: dict[str, Any] | None = None
    max_body_bytes: int = Field(default=64 * 1024 * 1024, ge=1024, le=MAX_BODY_BYTES, strict=True)
    workers: int = Field(default=1, ge=1, le=64, strict=True)

    @field_validator("runtime", mode="before")
    @classmethod
    def _runtime(cls, value: Any) -> str:
        known = (*MODEL_SERVER_RUNTIMES, COMMAND_RUNTIME)
        if value not in known:
            fail(f"{value!r} is not a runtime; use one of {', '.join(known)}")
        return str(value)

    @field_validator("ready_path", mode="before")
    @classmethod
    def _ready_path(cls, value: Any) -> str:
        return check_ready_path(value)


def check_ready_path(value: Any) -> str:
    """A readiness path as the gateway and the controller both probe it: starting with /, printable ASCII
    without spaces (the gateway writes it into a request line as it is), at most 512 characters."""
    if (
        not isinstance(value, str)
        or not value.startswith("/")
        or len(value) > 512
        or not (value.isascii() and value.isprintable())
        or " " in value
    ):
        fail(f"must be a path starting with / (got {value!r})")
    return value


def service_rules(spec: Any) -> None:
    """A service replica (kind ``service``): one task ``server`` with one replica, a ``serving`` section, a model
    (except for a custom command, which may bring its own), the model server's command unless the runtime is
    ``command``, no framework and no output model."""
    serving: ServingConfig | None = spec.serving
    if serving is None:
        fail("a service replica needs its serving section", at="serving")
    if len(spec.tasks) != 1 or spec.tasks[0].name != SERVICE_TASK or spec.tasks[0].replicas != 1:
        fail(f'a service replica has one task, named "{SERVICE_TASK}", with 1 replica', at="tasks")
    command = spec.tasks[0].command
    if serving.runtime == COMMAND_RUNTIME:
        if command == SERVE_COMMAND:
            fail("a command runtime runs the task's own command", at="tasks[0].command")
    else:
        if command != SERVE_COMMAND:
            fail(f'the model server runs as "{SERVE_COMMAND}"', at="tasks[0].command")
        if spec.model is None:
            fail(f"the {serving.runtime} runtime serves a model version: name it", at="model")
    if str(spec.framework) != "none":
        fail("a service replica has no framework", at="framework")
    if spec.output_model is not None:
        fail("a service replica saves no output model", at="output_model")
