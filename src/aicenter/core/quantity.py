"""Resource quantities as people write them: ``500m`` / ``2`` cpus, ``16Gi`` / ``512M`` memory."""

from __future__ import annotations

import math
import re

from aicenter.core.errors import ValidationFailed

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
_DECIMAL = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_MEM_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i|[kKMGTP])?[Bb]?\s*$")
_CPU_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(m)?\s*$")


def _finite(number: float, given: object, field: str) -> float:
    """JSON may carry NaN or Infinity, and "9" * 400 overflows a float: a 422, not a crash in int()."""
    if not math.isfinite(number):
        raise ValidationFailed(f"{given!r} is not a finite quantity", field=field)
    return number


def parse_memory(value: str | int | float, field: str = "memory") -> int:
    """Parse a memory quantity into bytes (``16Gi`` -> 17179869184, ``512M`` -> 512000000, ``1024`` -> 1024)."""
    if isinstance(value, bool):
        raise ValidationFailed(f"{value!r} is not a quantity", field=field)
    if isinstance(value, int | float):
        if value < 0:
            raise ValidationFailed(f"{value!r} must not be negative", field=field)
        return value if isinstance(value, int) else int(_finite(value, value, field))
    match = _MEM_RE.match(value)
    if not match:
        raise ValidationFailed(f'"{value}" is not a quantity (examples: 512Mi, 16Gi, 1T)', field=field)
    number, unit = match.groups()
    factor = _BINARY.get(unit or "", _DECIMAL.get(unit or "", 1))
    return int(_finite(float(number) * factor, value, field))


def parse_cpu(value: str | int | float, field: str = "cpu") -> int:
    """Parse a CPU quantity into milli-cores (``500m`` -> 500, ``2`` -> 2000, ``0.5`` -> 500)."""
    if isinstance(value, bool):
        raise ValidationFailed(f"{value!r} is not a quantity", field=field)
    if isinstance(value, int | float):
        if value < 0:
            raise ValidationFailed(f"{value!r} must not be negative", field=field)
        return value * 1000 if isinstance(value, int) else round(_finite(value * 1000, value, field))
    match = _CPU_RE.match(value)
    if not match:
        raise ValidationFailed(f'"{value}" is not a CPU quantity (examples: 500m, 2, 0.5)', field=field)
    number, milli = match.groups()
    return round(_finite(float(number) if milli else float(number) * 1000, value, field))


def format_memory(n_bytes: int) -> str:
    """Format bytes in the largest binary unit they reach, with at most two decimals, for people to read
    (``17179869184`` -> ``16Gi``, ``1610612736`` -> ``1.5Gi``, ``25275719680`` -> ``23.54Gi``)."""
    for unit in ("Pi", "Ti", "Gi", "Mi", "Ki"):
        factor = _BINARY[unit]
        if n_bytes >= factor:
            exact = (n_bytes * 100) % factor == 0
            text = f"{n_bytes / factor:.2f}"
            return (text.rstrip("0").rstrip(".") if exact else text) + unit
    return str(n_bytes)


def format_cpu(milli: int) -> str:
    return f"{milli // 1000}" if milli % 1000 == 0 else f"{milli}m"
