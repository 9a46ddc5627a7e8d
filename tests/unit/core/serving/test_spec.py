"""The deploy and revision specs' rules that name their field (what the API's 422 and the CLI's line show)."""

from __future__ import annotations

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.serving.spec import parse_deploy_spec, parse_revision_spec

BASE = {"name": "chat", "resources": {"cpu": 1, "memory": "1Gi"}}


@pytest.mark.parametrize("path", ["health", "/a b", "/x\n", 5, "/a\tb", "/gesundheit-\u00fc", "/x\x00"])
def test_a_ready_path_is_an_absolute_path_and_the_error_names_it(path: object) -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_deploy_spec({**BASE, "runtime": "command", "command": "serve", "ready_path": path})
    assert caught.value.details["field"] == "ready_path"
    assert "starting with /" in caught.value.message


def test_a_custom_command_keeps_its_ready_path_and_a_model_revision_drops_the_command() -> None:
    spec = parse_deploy_spec({**BASE, "runtime": "command", "command": "serve", "ready_path": "/health"})
    assert (spec.runtime, spec.ready_path, spec.model) == ("command", "/health", None)
    base = spec.revision().model_dump(mode="json", exclude_none=True)
    assert parse_revision_spec({"command": "serve --v2"}, base).command == "serve --v2"
    onnx = parse_revision_spec(
        {"runtime": "onnx", "model": "m:1"}, {k: v for k, v in base.items() if k != "ready_path"}
    )
    assert (onnx.runtime, onnx.command, onnx.ready_path) == ("onnx", None, None)


def test_a_ready_path_is_for_a_command_only() -> None:
    with pytest.raises(ValidationFailed) as caught:
        parse_deploy_spec({**BASE, "model": "m:1", "ready_path": "/health"})
    assert caught.value.details["field"] == "ready_path"
