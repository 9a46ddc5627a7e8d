"""Reading a job document (YAML or JSON text) the way a person means it.

PyYAML follows YAML 1.1, which reads ``on``, ``off``, ``yes`` and ``no`` as booleans: ``retry: {on: [error]}``
would arrive as ``{True: [...]}``. Here keys are always the text written, only ``true``/``false`` are booleans,
a key written twice is an error (PyYAML keeps the last silently), and a document that anchors expand past
``MAX_VALUES`` values is refused before anything walks it.
"""

from __future__ import annotations

import json
import re
from typing import Any

import yaml

from aicenter.core.errors import ValidationFailed

MAX_TEXT = 1 << 20
"""Largest document accepted, in characters (a job spec is a few hundred)."""
MAX_VALUES = 100_000
"""Most values (scalars, lists, mappings) a document may hold once anchors are expanded."""

_BOOL = "tag:yaml.org,2002:bool"
_MERGE = "tag:yaml.org,2002:merge"


class _Loader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        own = [key for key, _ in node.value if key.tag != _MERGE]
        seen: set[str] = set()
        for key in own:
            if not isinstance(key, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain word", key.start_mark)
            if key.value in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f'key "{key.value}" is written twice', key.start_mark
                )
            seen.add(key.value)
        self.flatten_mapping(node)  # "<<: *base" merges come first, so the mapping's own keys override them
        mapping: dict[Any, Any] = {}
        for key, value in node.value:
            if not isinstance(key, yaml.ScalarNode):
                raise yaml.constructor.ConstructorError(None, None, "a key must be a plain word", key.start_mark)
            mapping[key.value] = self.construct_object(value, deep=deep)
        return mapping


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(_BOOL, re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))


def _count_values(data: Any) -> int:
    """Values in ``data`` counting shared (anchored) ones each time they appear; stops past MAX_VALUES."""
    count, stack = 0, [data]
    while stack and count <= MAX_VALUES:
        item = stack.pop()
        count += 1
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return count


def load_document(text: str, what: str = "job spec") -> Any:
    """Parse YAML (or JSON, which is YAML) text.

    Raises:
        ValidationFailed: A syntax error, with ``details`` ``line`` and ``column`` (from 1); a document too
            large.
    """
    if len(text) > MAX_TEXT:
        raise ValidationFailed(f"the {what} is {len(text)} characters long; the limit is {MAX_TEXT}")
    if text.lstrip().startswith(("{", "[")):
        # JSON text goes to the JSON parser: PyYAML decodes a "\ud83d\ude00" escape pair as two lone surrogates.
        # YAML flow text ("{name: x}") is not JSON and falls through to YAML.
        try:
            data = json.loads(text)
        except ValueError:
            pass
        else:
            return _bounded(data, what)
    try:
        data = yaml.load(text, Loader=_Loader)  # noqa: S506 - _Loader is a SafeLoader
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "not valid YAML"
        if mark is None:
            raise ValidationFailed(f"the {what} is not valid YAML: {problem}") from None
        line, column = mark.line + 1, mark.column + 1
        raise ValidationFailed(
            f"the {what} is not valid YAML: {problem} (line {line}, column {column})",
            details={"line": line, "column": column},
        ) from None
    except yaml.YAMLError as exc:
        raise ValidationFailed(f"the {what} is not valid YAML: {exc}") from None
    return _bounded(data, what)


def _bounded(data: Any, what: str) -> Any:
    if _count_values(data) > MAX_VALUES:
        raise ValidationFailed(f"the {what} holds more than {MAX_VALUES} values once its anchors are expanded")
    return data
