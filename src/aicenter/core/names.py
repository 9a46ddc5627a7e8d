"""Names of things people create: lower-case DNS-like names, so they are safe in URLs, paths and labels."""

from __future__ import annotations

import re

from aicenter.core.errors import ValidationFailed

NAME_RE = re.compile(r"^[a-z0-9]([a-z0-9._-]{0,62}[a-z0-9])?$")
USERNAME_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,62}[A-Za-z0-9])?$")


def check_name(value: str, field: str = "name") -> str:
    """Return ``value`` if it is a valid name, else raise ValidationFailed naming ``field``."""
    if not value:
        raise ValidationFailed("must not be empty", field=field)
    if len(value) > 64:
        raise ValidationFailed(f"is {len(value)} characters long; the limit is 64", field=field)
    if not NAME_RE.fullmatch(value):  # fullmatch: "$" would accept a trailing newline
        raise ValidationFailed(
            f'"{value}" is not a valid name: use lower-case letters, digits, ".", "_" and "-", '
            "starting and ending with a letter or digit",
            field=field,
        )
    return value


def check_username(value: str, field: str = "username") -> str:
    if not value:
        raise ValidationFailed("must not be empty", field=field)
    if len(value) > 64:
        raise ValidationFailed(f"is {len(value)} characters long; the limit is 64", field=field)
    if not USERNAME_RE.fullmatch(value):
        raise ValidationFailed(
            f'"{value}" is not a valid user name: use letters, digits, ".", "_" and "-"', field=field
        )
    return value


def check_text(value: str, field: str, max_len: int) -> str:
    """Free text (descriptions, display names): printable and bounded."""
    if len(value) > max_len:
        raise ValidationFailed(f"is {len(value)} characters long; the limit is {max_len}", field=field)
    if any(not ch.isprintable() and ch not in "\n\t" for ch in value):
        raise ValidationFailed("contains characters that are not printable", field=field)
    return value
