"""``--set PATH=VALUE`` overrides of a job document, applied before it is parsed.

Overrides change the document, not the parsed spec, so that the parser's errors name the real field: after
``--set tasks[0].replicas=0`` the error is ``tasks[0].replicas: must be at least 1``. Values are YAML, so
``4`` is a number, ``[a:1, b:2]`` a list, ``null`` removes a value's meaning, and ``name=resnet`` a string.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs._model import show
from aicenter.core.jobs._yaml import load_document

_STEP = re.compile(r"\.?([A-Za-z_][A-Za-z0-9_-]*)|\[([0-9]+)\]")


def parse_path(path: str) -> list[str | int]:
    """``tasks[0].resources.gpu`` -> ``["tasks", 0, "resources", "gpu"]``; ValueError when malformed."""
    steps: list[str | int] = []
    pos = 0
    while pos < len(path):
        match = _STEP.match(path, pos)
        if match is None or (pos == 0 and path.startswith(".")) or (pos > 0 and match.group(1) and path[pos] != "."):
            raise ValueError(path)
        key, index = match.groups()
        steps.append(key if key is not None else int(index))
        pos = match.end()
    if not steps or not isinstance(steps[0], str):
        raise ValueError(path)
    return steps


def parse_value(text: str, field: str = "--set") -> Any:
    """The value of an override. A number, ``true``/``false`` or ``null`` is that; text starting with ``[``,
    ``{`` or a quote is YAML (a list, a mapping, a quoted string); anything else is the text exactly as written,
    so ``command=python train.py --tag #3`` keeps its ``#3`` (YAML would read a comment) and ``a: b`` stays
    text. An empty value is the empty string."""
    text = text.strip()
    if text[:1] in ("[", "{", '"', "'"):
        try:
            return load_document(text, what="value")
        except ValidationFailed as exc:
            raise ValidationFailed(exc.message, field=field, details=exc.details) from None
    try:
        value = load_document(text, what="value") if text else text
    except ValidationFailed:
        return text
    return value if value is None or isinstance(value, bool | int | float) else text


def _kind(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"the value {show(value)}"


def _apply(doc: dict[str, Any], override: str) -> None:
    path_text, eq, value_text = override.partition("=")
    path_text = path_text.strip()
    field = f"--set {path_text or override}"
    if not eq:
        raise ValidationFailed("expected PATH=VALUE, e.g. tasks[0].replicas=4", field=field)
    try:
        steps = parse_path(path_text)
    except ValueError:
        raise ValidationFailed(
            f'"{path_text}" is not a field path (examples: name, tasks[0].replicas, retry.on)', field=field
        ) from None
    value = parse_value(value_text, field)

    node: Any = doc
    for depth, step in enumerate(steps[:-1]):
        where = _render(steps[: depth + 1])
        nxt = steps[depth + 1]
        if isinstance(step, str):
            if not isinstance(node, dict):
                raise ValidationFailed(f"{_render(steps[:depth])} is {_kind(node)}, not a mapping", field=field)
            if node.get(step) is None:
                if isinstance(nxt, int):
                    raise ValidationFailed(
                        f"{where} is not set, so it has no item {nxt}; set the whole list ({where}=[...])", field=field
                    )
                node[step] = {}  # a new key inside a mapping: make the mapping
            node = node[step]
        else:
            node = _index(node, step, steps[:depth], field)
    last = steps[-1]
    if isinstance(last, str):
        if not isinstance(node, dict):
            raise ValidationFailed(f"{_render(steps[:-1])} is {_kind(node)}, not a mapping", field=field)
        node[last] = value
    else:
        _index(node, last, steps[:-1], field)
        node[last] = value


def _index(node: Any, index: int, before: list[str | int], field: str) -> Any:
    where = _render(before)
    if not isinstance(node, list):
        raise ValidationFailed(f"{where} is {_kind(node)}, not a list", field=field)
    if index >= len(node):
        n = len(node)
        raise ValidationFailed(
            f"{where} has {n} item{'s' if n != 1 else ''}; index {index} is past the end", field=field
        )
    return node[index]


def _render(steps: Sequence[str | int]) -> str:
    out = ""
    for step in steps:
        out += f"[{step}]" if isinstance(step, int) else (f".{step}" if out else step)
    return out


def apply_overrides(data: Mapping[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """Return a copy of the job document ``data`` with each ``PATH=VALUE`` applied in order.

    Args:
        data: The document (as loaded from YAML/JSON, or a stored normalized spec). Not modified.
        overrides: ``tasks[0].replicas=4``, ``name=x``, ``datasets=[a:1, b:2]``, ``tasks[0].resources.gpu=1``.
            Setting a key a mapping lacks adds it (making missing mappings on the way); an index must exist.

    Raises:
        ValidationFailed: ``field`` is ``--set <path>`` of the bad override: malformed, an index past the end, a
            step through something that is not a mapping or a list, or a value that is not valid YAML.
    """
    doc: dict[str, Any] = copy.deepcopy(dict(data))
    for override in overrides:
        _apply(doc, override)
    return doc
