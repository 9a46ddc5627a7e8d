"""The base of the job-spec models and the translation of pydantic's errors into ours.

Pydantic validates; people read our messages. Every error becomes one ``ValidationFailed`` whose ``field`` is
the exact path in the document (``tasks[0].resources.memory``) and whose message reads like a person wrote it.
Validators never raise ``ValidationFailed`` themselves (pydantic would not catch it and the path would be lost);
they raise through ``fail``, which carries the message and, for checks that span fields, the sub-path.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping, Sequence
from enum import StrEnum
from typing import Any, ClassVar, NoReturn, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from aicenter.core.errors import ValidationFailed

_ERROR_TYPE = "aicenter"
T = TypeVar("T")
E = TypeVar("E", bound=StrEnum)


def fail(message: str, at: str | None = None) -> NoReturn:
    """Refuse the value being validated. ``at`` extends the path, for a model-level check that blames one of
    the model's fields (``"memory"``, ``"tasks[1].name"``)."""
    raise PydanticCustomError(_ERROR_TYPE, "{message}", {"message": message, "at": at or ""})


def core_check(check: Callable[..., T], value: Any) -> T:
    """Run a core check (``check_name``, ``parse_memory``, ...) inside a validator, keeping its message."""
    try:
        return check(value, "")  # an empty field name keeps the message unprefixed
    except ValidationFailed as exc:
        fail(exc.message)


def show(value: Any) -> str:
    """A value as it appeared in the document: strings quoted, others as JSON."""
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except (TypeError, ValueError):  # keys json cannot write
        return repr(value)


def choice(enum: type[E], value: Any, allowed: Sequence[E] | None = None, at: str | None = None) -> E:
    """``value`` as a member of ``enum`` (or of ``allowed``), or an error that lists the allowed values."""
    options = list(allowed if allowed is not None else enum)
    if isinstance(value, str):
        for member in options:
            if member.value == value:
                return member
    names = ", ".join(m.value for m in options)
    fail(f"{show(value)} is not one of {names}", at=at)


class SpecModel(BaseModel):
    """A part of a job spec: immutable, unknown keys refused with a suggestion of the nearest known one."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_names: ClassVar[Mapping[str, str]] = {}
    """Input key -> field, for fields people write under another name (``cpu`` for ``cpu_milli``). Field names
    are accepted too (code builds models by field name) but suggestions show the input names."""

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data: Any) -> Any:
        if isinstance(data, dict):
            public = (set(cls.model_fields) - set(cls.input_names.values())) | set(cls.input_names)
            for key in data:
                if key not in public and key not in cls.model_fields:
                    fail(unknown_field_message(str(key), public), at=str(key))
        return data


def unknown_field_message(key: str, known: set[str]) -> str:
    close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
    if close:
        return f'unknown field "{key}" (did you mean "{close[0]}"?)'
    return f'unknown field "{key}" (known fields: {", ".join(sorted(known))})'


def field_path(loc: Sequence[str | int], at: str = "") -> str:
    """``("tasks", 0, "resources")`` + ``"memory"`` -> ``tasks[0].resources.memory``."""
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    if at:
        path += at if at.startswith("[") or not path else f".{at}"
    return path


def _message(err: Any) -> str:
    kind: str = err["type"]
    ctx: dict[str, Any] = err.get("ctx") or {}
    given = err.get("input")
    if kind == _ERROR_TYPE:
        return str(ctx["message"])
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return f'unknown field "{err["loc"][-1]}"'
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be a whole number (got {show(given)})"
    if kind in ("float_type", "float_parsing", "finite_number"):
        return f"must be a number (got {show(given)})"
    if kind == "bool_type":
        return f"must be true or false (got {show(given)})"
    if kind == "string_type":
        if isinstance(given, int | float) and not isinstance(given, bool):
            return f'must be a string (got {show(given)}; quote it: "{given}")'
        return f"must be a string (got {show(given)})"
    if kind == "list_type":
        return f"must be a list (got {show(given)})"
    if kind in ("dict_type", "model_type", "model_attributes_type"):
        return f"must be a mapping of keys to values (got {show(given)})"
    if kind == "greater_than_equal":
        return f"must be at least {ctx['ge']}"
    if kind == "less_than_equal":
        return f"must be at most {ctx['le']}"
    if kind == "greater_than":
        return f"must be greater than {ctx['gt']}"
    if kind == "less_than":
        return f"must be less than {ctx['lt']}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_too_long":
        return f"is {len(given)} characters long; the limit is {ctx['max_length']}"
    if kind == "too_short":
        n = ctx["min_length"]
        return f"must have at least {n} item{'s' if n != 1 else ''}"
    if kind == "too_long":
        return f"has {len(given)} items; the limit is {ctx['max_length']}"
    return str(err["msg"])


def translate(exc: ValidationError) -> ValidationFailed:
    """Our error for pydantic's: the first problem as message and field, every problem in ``details``."""
    problems = [
        {"field": field_path(err["loc"], str((err.get("ctx") or {}).get("at", ""))), "message": _message(err)}
        for err in exc.errors(include_url=False)
    ]
    first = problems[0]
    return ValidationFailed(first["message"], field=first["field"] or None, details={"errors": problems})
