"""--set overrides: paths with indices, new keys, errors naming the override, and errors after parsing."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs import apply_overrides, parse_job_spec, parse_value


def doc() -> dict[str, Any]:
    return {
        "name": "job",
        "datasets": ["a:1"],
        "tasks": [
            {"name": "worker", "replicas": 1, "resources": {"cpu": 1, "memory": "1Gi"}, "command": "python t.py"}
        ],
    }


def test_overrides_set_values_by_path_and_leave_the_input_alone() -> None:
    original = doc()
    before = copy.deepcopy(original)
    out = apply_overrides(
        original,
        [
            "tasks[0].replicas=4",
            "name=x",
            "datasets=[a:1, b:2]",
            "tasks[0].resources.gpu=1",
            "retry.max_restarts=3",  # a new key, and the mapping it lives in
            "tasks[0].env.LR=0.1",
        ],
    )
    assert original == before
    assert out["name"] == "x"
    assert out["datasets"] == ["a:1", "b:2"]
    assert out["tasks"][0]["replicas"] == 4
    assert out["tasks"][0]["resources"] == {"cpu": 1, "memory": "1Gi", "gpu": 1}
    assert out["retry"] == {"max_restarts": 3}
    assert out["tasks"][0]["env"] == {"LR": 0.1}
    spec = parse_job_spec(out)
    assert spec.tasks[0].replicas == 4
    assert spec.tasks[0].env == {"LR": "0.1"}


def test_later_overrides_win() -> None:
    assert apply_overrides(doc(), ["name=a", "name=b"])["name"] == "b"


def test_cpu_override_replaces_the_normalized_cpu() -> None:
    """A stored (normalized) spec writes cpu as a quantity, so --set cpu=8 replaces it, no conflict."""
    normalized = parse_job_spec(doc()).normalized()
    spec = parse_job_spec(apply_overrides(normalized, ["tasks[0].resources.cpu=8"]))
    assert spec.tasks[0].resources.cpu_milli == 8000


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("4", 4),
        ("0.5", 0.5),
        ("true", True),
        ("null", None),
        ("", ""),
        ("resnet", "resnet"),
        ("resnet:3", "resnet:3"),
        ("[a:1, b:2]", ["a:1", "b:2"]),
        ("{cpu: 4, memory: 8Gi}", {"cpu": 4, "memory": "8Gi"}),
        ('"4"', "4"),
        ("'on'", "on"),
        ("on", "on"),
        ("python train.py --tag #3", "python train.py --tag #3"),  # YAML would drop "#3" as a comment
        ("echo a: b", "echo a: b"),  # YAML would read a mapping
        ("2024-01-01", "2024-01-01"),  # YAML would read a date
    ],
)
def test_values(text: str, value: Any) -> None:
    assert parse_value(text) == value


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ("tasks[1].replicas=4", "--set tasks[1].replicas", "tasks has 1 item; index 1 is past the end"),
        ("datasets[5]=c:1", "--set datasets[5]", "datasets has 1 item; index 5 is past the end"),
        ("name", "--set name", "expected PATH=VALUE, e.g. tasks[0].replicas=4"),
        (
            "tasks[0]replicas=1",
            "--set tasks[0]replicas",
            '"tasks[0]replicas" is not a field path (examples: name, tasks[0].replicas, retry.on)',
        ),
        ("=1", "--set =1", '"" is not a field path (examples: name, tasks[0].replicas, retry.on)'),
        ("tasks[-1].name=a", "--set tasks[-1].name", None),
        ("name.first=a", "--set name.first", 'name is the value "job", not a mapping'),
        ("tasks.name=a", "--set tasks.name", "tasks is a list, not a mapping"),
        ("name[0]=a", "--set name[0]", 'name is the value "job", not a list'),
        (
            "env[0]=a",
            "--set env[0]",
            "env is not set, so it has no item 0; set the whole list (env=[...])",
        ),
        (
            "datasets=[a:1",
            "--set datasets",
            "the value is not valid YAML: expected ',' or ']', but got '<stream end>' (line 1, column 5)",
        ),
    ],
)
def test_bad_overrides_name_the_override(override: str, field: str, message: str | None) -> None:
    original = doc()
    with pytest.raises(ValidationFailed) as info:
        apply_overrides(original, [override])
    assert info.value.details["field"] == field
    if message is not None:
        assert info.value.message == f"{field}: {message}"
    assert original == doc()


@pytest.mark.parametrize(
    ("override", "field", "message"),
    [
        ("tasks[0].replicas=0", "tasks[0].replicas", "must be at least 1"),
        ("tasks[0].replicas=many", "tasks[0].replicas", 'must be a whole number (got "many")'),
        ("tasks[0].resources.memory=8Gx", "tasks[0].resources.memory", None),
        ("tasks[0].replica=2", "tasks[0].replica", 'unknown field "replica" (did you mean "replicas"?)'),
        ("priority=critical", "priority", '"critical" is not one of low, normal, high, urgent'),
        ("datasets=a:1", "datasets", 'must be a list (got "a:1")'),
        ("tasks[0].command=", "tasks[0].command", "must not be empty"),
    ],
)
def test_type_errors_surface_after_parsing_with_the_real_field(override: str, field: str, message: str | None) -> None:
    changed = apply_overrides(doc(), [override])
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec(changed)
    assert info.value.details["field"] == field
    if message is not None:
        assert info.value.message == f"{field}: {message}"
