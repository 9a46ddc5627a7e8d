"""What ``aicenter service deploy`` and ``update`` send: a revision's fields from a ``--spec`` file and the
options laid over it, checked before anything is sent (one line naming the option, exit 2)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from aicenter.cli.common import invalid, pairs, quantity, read_text_file
from aicenter.core.errors import AicenterError
from aicenter.core.jobs import load_document

__all__ = [
    "AlgorithmOpt",
    "CommandOpt",
    "ConcurrencyOpt",
    "CpuOpt",
    "EntryOpt",
    "EnvOpt",
    "GpuOpt",
    "GpuTypeOpt",
    "HeaderValueOpt",
    "ImageOpt",
    "MaxOpt",
    "MemoryOpt",
    "MinOpt",
    "PoolOpt",
    "ReadyPathOpt",
    "ReadyTimeoutOpt",
    "ResourcesSpecOpt",
    "RuntimeOpt",
    "load_spec",
    "model_ref",
    "revision_fields",
]


# Options of a revision, shared by deploy and update (the names are the notebook and job CLIs' where they exist).
RuntimeOpt = Annotated[str | None, typer.Option(help="auto, onnx, torchscript, sklearn, python or command.")]
EntryOpt = Annotated[str | None, typer.Option(help="A predictor class, file.py:Class (runtime python).")]
ImageOpt = Annotated[str | None, typer.Option(help="A catalog image version (default: host, the server's).")]
AlgorithmOpt = Annotated[str | None, typer.Option(help="Code (name:version), read-only at $AICENTER_CODE_DIR.")]
CommandOpt = Annotated[str | None, typer.Option(help="A custom server serving HTTP on $PORT (runtime command).")]
ReadyPathOpt = Annotated[str | None, typer.Option(help="The custom server's readiness path, e.g. /health.")]
PoolOpt = Annotated[str | None, typer.Option(help="The pool its replicas run in.")]
ResourcesSpecOpt = Annotated[str | None, typer.Option(help="A resource spec name (`aicenter spec list`).")]
CpuOpt = Annotated[str | None, typer.Option(help="CPU cores per replica: 2, 500m.")]
MemoryOpt = Annotated[str | None, typer.Option(help="Memory per replica: 4Gi.")]
GpuOpt = Annotated[int | None, typer.Option(min=0, help="Whole accelerators per replica.")]
GpuTypeOpt = Annotated[str | None, typer.Option(help="Accelerator type (nvidia-a100); default: any.")]
MinOpt = Annotated[int | None, typer.Option(min=0, max=100, help="0 allows scale to zero.")]
MaxOpt = Annotated[int | None, typer.Option(min=1, max=100)]
ConcurrencyOpt = Annotated[float | None, typer.Option(help="In-flight requests per replica the autoscaler aims at.")]
ReadyTimeoutOpt = Annotated[int | None, typer.Option(min=5, help="Seconds to become ready before it fails.")]
HeaderValueOpt = Annotated[str | None, typer.Option(help="The --ab-header value routing to this revision.")]
EnvOpt = Annotated[list[str] | None, typer.Option(help="NAME=VALUE environment variable; repeatable.")]


def revision_fields(data: dict[str, Any], **options: Any) -> dict[str, Any]:
    """Lay the revision options given over ``data`` (a --spec file's fields): resources as a whole, ``env``
    merged, a ``--command`` without ``--runtime`` is runtime command and an ``--entry`` runtime python."""
    env = options.pop("env")
    resources_spec, cpu, memory, gpu, gpu_type = (
        options.pop(k) for k in ("resources_spec", "cpu", "memory", "gpu", "gpu_type")
    )
    if options.get("target_concurrency") is not None and options["target_concurrency"] <= 0:
        raise invalid("--target-concurrency", "must be above 0")
    if None not in (options.get("min_replicas"), options.get("max_replicas")) and (
        options["min_replicas"] > options["max_replicas"]
    ):
        raise invalid("--min-replicas", f"{options['min_replicas']} is above --max-replicas {options['max_replicas']}")
    if options.get("ready_path") is not None and not options["ready_path"].startswith("/"):
        raise invalid("--ready-path", f"a path starting with /, e.g. /health (got {options['ready_path']!r})")
    for key, value in (("image", options.get("image")), ("algorithm", options.get("algorithm"))):
        if value is not None and value != "host" and not value.startswith("#") and ":" not in value:
            raise invalid(f"--{key}", f"expected NAME:VERSION (a catalog {key} and its version), got {value!r}")
    data.update({k: v for k, v in options.items() if v is not None})
    if options.get("command") is not None and options.get("runtime") is None:
        data["runtime"] = "command"
    elif options.get("entry") is not None and options.get("runtime") is None:
        data["runtime"] = "python"
    if resources_spec is not None:
        if cpu or memory or gpu or gpu_type:
            raise invalid("--resources-spec", "a resource spec names its own cpu/memory/gpu; give one or the other")
        data["resources"] = {"spec": resources_spec}
    elif cpu or memory or gpu or gpu_type:
        if not (cpu and memory):
            raise invalid("--cpu", "give both --cpu and --memory (or --resources-spec NAME)")
        data["resources"] = {
            "cpu": quantity(cpu),
            "memory": quantity(memory),
            **({"gpu": gpu} if gpu else {}),
            **({"gpu_type": gpu_type} if gpu_type else {}),
        }
    if env:
        data["env"] = {**(data.get("env") or {}), **pairs(env, "--env")}
    return data


def load_spec(file: Path) -> dict[str, Any]:
    try:
        document = load_document(read_text_file(file, "--spec"))
    except AicenterError as exc:
        raise invalid("--spec", f"{file}: {exc}") from None
    if not isinstance(document, dict):
        raise invalid("--spec", "a service is a mapping of fields (name, model, runtime, resources, ...)")
    return dict(document)


def model_ref(value: str, option: str) -> str:
    name, sep, version = value.rpartition(":")
    if value.startswith("#") and value[1:].isdigit():
        return value
    if not sep or not name or not version.isdigit():
        raise invalid(option, f"expected MODEL:VERSION (a catalog model and its version number), got {value!r}")
    return value
