"""Form state for re-rendering a form after a failed POST: the values typed, and errors next to their fields."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from starlette.datastructures import FormData

from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.core.ids import MAX_ID
from aicenter.web.security import CSRF_FIELD

# Fields whose values are never echoed back into a re-rendered form.
_SECRET_FIELDS = frozenset({"password", "current_password", "new_password", "new_password_confirm", CSRF_FIELD})


@dataclass
class FormState:
    """One form on a page: ``name`` matches the form's ``data-form`` attribute and its fields' id prefix."""

    name: str
    values: dict[str, str] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    message: str | None = None

    def value(self, key: str, default: object = "") -> str:
        """What the user typed, else ``default`` (the stored value when editing)."""
        if key in self.values:
            return self.values[key]
        return "" if default is None else str(default)

    def error(self, key: str) -> str | None:
        return self.errors.get(key)

    @property
    def failed(self) -> bool:
        return bool(self.errors or self.message)


class Forms(dict[str, FormState]):
    """Form states by name; a form that was not posted reads as empty, so templates need no ``if``."""

    def __missing__(self, key: str) -> FormState:
        return FormState(key)


def form_values(data: FormData) -> dict[str, str]:
    """Plain string fields of a posted form (files are ignored; the console takes none), secrets left out."""
    return {k: v.strip() for k, v in data.multi_items() if isinstance(v, str) and k not in _SECRET_FIELDS}


def field_message(exc: AicenterError) -> str:
    """The error's message without the ``field: `` prefix that ValidationFailed adds (the field is shown)."""
    field_name = exc.details.get("field")
    if isinstance(field_name, str) and exc.message.startswith(f"{field_name}: "):
        return exc.message[len(field_name) + 2 :]
    return exc.message


def failed_form(
    name: str,
    values: Mapping[str, str],
    exc: AicenterError,
    fields: Iterable[str],
    *,
    aliases: Mapping[str, str] | None = None,
) -> FormState:
    """A FormState carrying ``exc``: next to its field when the form has that field, else above the form.

    ``aliases`` maps a service's field path to the form's field name where they differ (e.g. ``password`` of
    the password-strength check -> ``new_password``). Re-raises what no form can fix (see :func:`message_form`).
    """
    _reraise_if_not_about_the_form(exc)
    state = FormState(name, dict(values))
    field_name = exc.details.get("field")
    if isinstance(field_name, str):
        field_name = (aliases or {}).get(field_name, field_name)
    known = set(fields)
    if isinstance(field_name, str) and field_name not in known:
        # A path inside a field (``labels.gpu``, ``accelerators[2].type``) is shown at that field, in full.
        field_name = next((f for f in known if field_name.startswith((f"{f}.", f"{f}["))), field_name)
        if field_name in known:
            state.errors[field_name] = exc.message
            return state
    if isinstance(field_name, str) and field_name in known:
        state.errors[field_name] = field_message(exc)
    else:
        state.message = exc.message
    return state


def _reraise_if_not_about_the_form(exc: AicenterError) -> None:
    """Not allowed (403) or not there (404) is about the page, not the input: show the error page instead
    (the form may not even be on the page the viewer would see). Errors naming a field stay with the form,
    e.g. a wrong current password (403 on ``current_password``)."""
    if exc.status in (401, 403, 404) and not exc.details.get("field"):
        raise exc


def message_form(name: str, exc: AicenterError) -> FormState:
    """A FormState with ``exc`` shown above form ``name`` (for one-button forms without fields)."""
    _reraise_if_not_about_the_form(exc)
    return FormState(name, message=exc.message)


def invalid(field_name: str, message: str) -> ValidationFailed:
    """A validation error found by the console itself (e.g. a non-numeric id in a form)."""
    return ValidationFailed(message, field=field_name)


def parse_int(raw: str, field_name: str, *, default: int | None = None) -> int | None:
    """A whole number typed in a form; empty gives ``default``."""
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValidationFailed(f'"{raw}" is not a whole number', field=field_name) from None


def parse_id(raw: str, field_name: str) -> int | None:
    """An object's id typed in a filter (1 to ``MAX_ID``, as the API's ids); empty gives None."""
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit()) or not 1 <= int(raw) <= MAX_ID:
        raise ValidationFailed(f'"{raw}" is not an id (a whole number from 1)', field=field_name)
    return int(raw)


def parse_float(raw: str, field_name: str, *, default: float | None = None) -> float | None:
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValidationFailed(f'"{raw}" is not a number', field=field_name) from None


def parse_key_values(raw: str, field_name: str) -> dict[str, str]:
    """``key=value`` lines (or comma-separated pairs) typed in a textarea -> a dict; the service checks them."""
    out: dict[str, str] = {}
    for line in raw.replace(",", "\n").splitlines():
        line = line.strip()
        if not line:
            continue
        key, eq, value = line.partition("=")
        if not eq or not key.strip():
            raise ValidationFailed(f'"{line}" must look like key=value', field=field_name)
        out[key.strip()] = value.strip()
    return out


def format_key_values(value: object) -> str:
    """The inverse of :func:`parse_key_values`, one pair per line, for a textarea."""
    if not isinstance(value, dict):
        return ""
    return "\n".join(f"{k}={v}" for k, v in sorted(value.items()))
