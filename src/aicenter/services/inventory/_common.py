"""Checks shared by the inventory services: labels, selectors, topology names and resource quantities."""

from __future__ import annotations

import math
from collections.abc import Mapping
from enum import Enum
from typing import Any, Final, Literal

from aicenter.core.errors import ValidationFailed
from aicenter.core.labels import is_label_name, is_label_prefix, is_label_value
from aicenter.core.quantity import parse_cpu, parse_memory


class _Unset(Enum):
    UNSET = 0


# "Leave as is" in partial updates, where None means "clear".
UNSET: Final = _Unset.UNSET
Unset = Literal[_Unset.UNSET]

MAX_LABELS = 64
# Bounds keep values inside BIGINT and make typos such as "16Pi" for "16Gi" visible: a million cores, 1 EiB.
MAX_CPU_MILLI = 10**9
MAX_MEMORY_BYTES = 2**60


def check_label_key(key: str, field: str) -> None:
    """Raise ValidationFailed unless ``key`` is ``[prefix/]name`` (e.g. ``aicenter.io/hostname``, ``zone``)."""
    prefix, slash, name = key.rpartition("/")
    if slash and not is_label_prefix(prefix):
        raise ValidationFailed(
            f'"{key}" has an invalid prefix: use a lower-case DNS name such as "example.com/"', field=field
        )
    if not is_label_name(name):
        raise ValidationFailed(
            f'"{key}" is not a valid label key: at most 63 letters, digits, ".", "_" or "-", '
            'starting and ending with a letter or digit, optionally after a "<dns-prefix>/"',
            field=field,
        )


def check_label_value(value: Any, field: str, *, allow_empty: bool = True) -> str:
    """Return ``value`` if it is a valid label value (or topology name), else raise ValidationFailed."""
    if not isinstance(value, str):
        raise ValidationFailed("must be a string", field=field)
    if value == "" and allow_empty:
        return value
    if not is_label_value(value):
        raise ValidationFailed(
            f'"{value}" is not a valid value: at most 64 letters, digits, ".", "_" or "-", '
            "starting and ending with a letter or digit",
            field=field,
        )
    return value


def check_labels(labels: Mapping[str, Any], field: str = "labels") -> dict[str, str]:
    """Validate a label map (or a pool selector) and return it as a plain ``dict[str, str]``."""
    if len(labels) > MAX_LABELS:
        raise ValidationFailed(f"has {len(labels)} entries; the limit is {MAX_LABELS}", field=field)
    out: dict[str, str] = {}
    for key, value in labels.items():
        check_label_key(key, f"{field}.{key}")
        out[key] = check_label_value(value, f"{field}.{key}")
    return out


def check_topology(value: str | None, field: str) -> str | None:
    """A rack, leaf, spine or NVLink domain name; None (or "") clears it."""
    if value is None or value == "":
        return None
    return check_label_value(value, field, allow_empty=False)


def parse_label_filter(value: str, field: str = "label") -> tuple[str, str]:
    """``key=value`` (as in ``?label=aicenter.io/hostname=gpu-01``) -> ``(key, value)``."""
    key, eq, label_value = value.partition("=")
    if not eq:
        raise ValidationFailed(f'"{value}" must look like key=value', field=field)
    check_label_key(key, field)
    check_label_value(label_value, field)
    return key, label_value


def _finite(value: str | int | float, field: str) -> None:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValidationFailed(f"{value!r} is not a quantity", field=field)


def cpu_milli(value: str | int | float, field: str = "cpu", *, positive: bool = True) -> int:
    """Parse a CPU quantity into bounded milli-cores (``positive``: zero is refused)."""
    _finite(value, field)
    try:
        milli = parse_cpu(value, field)
    except OverflowError:
        milli = MAX_CPU_MILLI + 1
    if positive and milli <= 0:
        raise ValidationFailed("must be more than 0", field=field)
    if milli > MAX_CPU_MILLI:
        raise ValidationFailed(f"{value!r} is more than {MAX_CPU_MILLI // 1000} CPUs", field=field)
    return milli


def memory_bytes(value: str | int | float, field: str = "memory", *, positive: bool = True) -> int:
    """Parse a memory quantity into bounded bytes (``positive``: zero is refused)."""
    _finite(value, field)
    try:
        n = parse_memory(value, field)
    except OverflowError:
        n = MAX_MEMORY_BYTES + 1
    if positive and n <= 0:
        raise ValidationFailed("must be more than 0", field=field)
    if n > MAX_MEMORY_BYTES:
        raise ValidationFailed(f"{value!r} is more than 1Ei", field=field)
    return n
