"""Every SDK model against the OpenAPI document the server publishes: drift fails here, not in a user's script.

The rule, per SDK model and the response schemas it parses (``SCHEMAS``):

- every field the model declares is a property of each of its schemas; a field with a default may be absent
  from some of them (a partial view, e.g. a job's ``replicas`` only in its detail) but must be in one;
- every property a schema requires is declared by the model (so it is typed, not only reachable as an extra);
- a field the model requires is required by each of its schemas (else parsing fails when the server omits it);
- every JSON type the schema allows for a property parses into the field's type (``null`` only into an
  optional field, a nested object only into the SDK model mapped to that schema, array items likewise).
"""

from __future__ import annotations

import types
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from aicenter.app import create_app
from aicenter.client import models, notebook_models
from aicenter.config import Settings

# SDK model -> the response schemas (components/schemas names) it parses.
SCHEMAS: dict[type[models.ApiModel], tuple[str, ...]] = {
    models.Health: ("HealthOut",),
    models.User: ("UserOut",),
    models.LoginResult: ("LoginResponse",),
    models.Token: ("TokenOut",),
    models.TokenCreated: ("TokenCreated",),
    models.Workspace: ("WorkspaceOut", "PoolWorkspaceOut"),
    models.MyWorkspace: ("MyWorkspaceOut",),
    models.Member: ("MemberOut",),
    models.Quota: ("QuotaOut",),
    models.AuditEvent: ("AuditEventOut",),
    models.NodeAccelerator: ("AcceleratorOut",),
    models.Node: ("NodeOut",),
    models.AcceleratorType: ("AcceleratorTypeOut",),
    models.Spec: ("SpecOut",),
    models.Pool: ("PoolOut",),
    models.Item: ("ItemOut",),
    models.Version: ("VersionOut",),
    models.FileInfo: ("FileOut",),
    models.Upload: ("UploadOut",),
    models.Build: ("BuildOut",),
    models.StorageUsage: ("StorageOut",),
    models.GcReport: ("GcOut",),
    models.FsckReport: ("FsckOut",),
    models.JobEvent: ("JobEventOut",),
    models.JobReplica: ("ReplicaOut",),
    models.Job: ("JobOut", "JobDetail"),
    models.JobTemplate: ("TemplateOut",),
    models.MetricPoint: ("MetricPointOut",),
    models.MetricSeries: ("MetricSeriesOut",),
    models.JobMetrics: ("JobMetricsOut",),
    notebook_models.Notebook: ("NotebookOut", "NotebookDetail"),
    notebook_models.NotebookSaved: ("SavedOut",),
    notebook_models.NotebookSsh: ("SshAccessOut",),
}
# SDK models written ahead of their endpoint; move a model from here into SCHEMAS when its endpoint lands.
PENDING: set[type[models.ApiModel]] = set()

# Python types and the JSON types (OpenAPI ``type``) each parses, as pydantic validates an SDK model.
_ACCEPTS: dict[Any, set[str]] = {
    str: {"string"},
    int: {"integer"},
    float: {"number", "integer"},
    Decimal: {"number", "integer", "string"},
    bool: {"boolean"},
    datetime: {"string"},
    date: {"string"},
    type(None): {"null"},
}


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    home: Path = tmp_path_factory.mktemp("openapi-home")
    settings = Settings(home=home, secret_key="test-secret-key-0123456789", register_host=False)
    document = create_app(settings, run_controllers=False).openapi()
    found: dict[str, Any] = document["components"]["schemas"]
    return found


def _sdk_models() -> set[type[models.ApiModel]]:
    found = {getattr(module, name) for module in (models, notebook_models) for name in module.__all__}
    return {
        m
        for m in found
        if isinstance(m, type) and issubclass(m, models.ApiModel) and m is not models.ApiModel and m not in PENDING
    }


def test_every_sdk_model_is_mapped_to_a_response_schema(schemas: dict[str, Any]) -> None:
    assert set(SCHEMAS) == _sdk_models(), "map each SDK model to the response schemas it parses"
    unknown = {name for names in SCHEMAS.values() for name in names} - set(schemas)
    assert not unknown, f"schemas not in the OpenAPI document: {sorted(unknown)}"


def _alternatives(annotation: Any) -> list[Any]:
    if get_origin(annotation) in (Union, types.UnionType):
        return [alt for arg in get_args(annotation) for alt in _alternatives(arg)]
    return [annotation]


def _branches(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    """The alternatives a property's schema allows, with enum references resolved to their JSON type."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            return [b for sub in schema[key] for b in _branches(sub, components)]
    ref = schema.get("$ref")
    if ref is not None:
        target = components[ref.rsplit("/", 1)[1]]
        return [target] if "enum" in target else [schema]
    return [schema]


def _problems(where: str, annotation: Any, schema: dict[str, Any], components: dict[str, Any]) -> list[str]:
    """Why a value the schema allows would not parse into ``annotation`` (empty: compatible)."""
    out: list[str] = []
    for branch in _branches(schema, components):
        if not any(_accepts(alt, branch, components) for alt in _alternatives(annotation)):
            shown = branch.get("$ref", "").rsplit("/", 1)[-1] or branch.get("type") or "any value"
            out.append(f"{where}: the schema allows {shown}, the SDK declares {annotation}")
    return out


def _accepts(annotation: Any, branch: dict[str, Any], components: dict[str, Any]) -> bool:
    if annotation is Any:
        return True
    ref = branch.get("$ref")
    json_type = branch.get("type")
    origin = get_origin(annotation)
    if ref is not None:  # a nested object: the SDK model mapped to that schema, or a plain mapping
        name = ref.rsplit("/", 1)[1]
        if isinstance(annotation, type) and issubclass(annotation, models.ApiModel):
            return name in SCHEMAS.get(annotation, ())
        return annotation is dict or origin is dict
    if json_type is None:  # any JSON value
        return False
    if origin is Literal:
        return all(type(v).__name__ == {"string": "str", "integer": "int"}.get(json_type) for v in get_args(annotation))
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        if json_type != "array":
            return False
        items = branch.get("items")
        args = get_args(annotation)
        return items is None or (bool(args) and not _problems("", args[0], items, components))
    if origin is dict or annotation is dict:
        if json_type != "object":
            return False
        values = branch.get("additionalProperties")
        args = get_args(annotation)
        return not isinstance(values, dict) or not args or not _problems("", args[1], values, components)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return False  # a nested model needs a $ref to its schema
    return json_type in _ACCEPTS.get(annotation, set())


def _name(name: str, field: FieldInfo) -> str:
    return field.alias or name


@pytest.mark.parametrize("model", sorted(SCHEMAS, key=lambda m: m.__name__), ids=lambda m: m.__name__)
def test_sdk_model_matches_its_response_schemas(model: type[models.ApiModel], schemas: dict[str, Any]) -> None:
    targets = {name: schemas[name] for name in SCHEMAS[model]}
    problems: list[str] = []
    for field_name, field in model.model_fields.items():
        key = _name(field_name, field)
        holders = [name for name, schema in targets.items() if key in schema.get("properties", {})]
        if not holders:
            problems.append(f"{model.__name__}.{key}: in none of {sorted(targets)}")
            continue
        if field.is_required():
            problems += [
                f"{model.__name__}.{key}: required by the SDK, optional or absent in {name}"
                for name, schema in targets.items()
                if key not in schema.get("required", [])
            ]
        for name in holders:
            where = f"{model.__name__}.{key} vs {name}"
            problems += _problems(where, field.annotation, targets[name]["properties"][key], schemas)
    declared = {_name(n, f) for n, f in model.model_fields.items()}
    for name, schema in targets.items():
        for key in schema.get("required", []):
            if key not in declared:
                problems.append(f"{model.__name__}: {name} requires {key!r}, which the SDK model does not declare")
    assert not problems, "\n".join(problems)
