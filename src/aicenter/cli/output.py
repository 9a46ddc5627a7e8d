"""Rendering: readable tables (rich) by default; ``-o json`` prints exactly the API's JSON, ``-o yaml`` the same."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import typer

from aicenter.cli.common import Output
from aicenter.core.quantity import format_memory

Column = tuple[str, Callable[[Any], Any]]


def jsonable(data: Any) -> Any:
    """SDK models back to the JSON the server sent; lists item by item."""
    if hasattr(data, "to_json"):
        return data.to_json()
    if isinstance(data, list | tuple):
        return [jsonable(d) for d in data]
    return data


def cores(milli: int | None) -> str:
    """``8000`` -> ``8``, ``500`` -> ``500m``."""
    if milli is None:
        return ""
    return str(milli // 1000) if milli % 1000 == 0 else f"{milli}m"


def size(n: int | None) -> str:
    """Bytes in the largest binary unit they reach, e.g. ``68719476736`` -> ``64Gi``, ``25275871232`` ->
    ``23.54Gi`` (not ``24683468Ki``: a node's memory is rarely a round number); ``-o json`` keeps the bytes."""
    if n is None:
        return ""
    return format_memory(n)


def when(value: datetime | None) -> str:
    return value.strftime("%Y-%m-%d %H:%M:%S") if value else ""


def resources(values: dict[str, int] | None) -> str:
    """``{"cpu": 64000, "memory": 2**38, "nvidia-a100": 16}`` -> ``cpu=64 memory=256Gi nvidia-a100=16``."""
    if not values:
        return "-"
    parts = []
    for name, value in values.items():
        shown = cores(value) if name == "cpu" else size(value) if name == "memory" else str(value)
        parts.append(f"{name}={shown}")
    return " ".join(parts)


def labels(values: dict[str, Any] | None) -> str:
    return ",".join(f"{k}={v}" for k, v in (values or {}).items())


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, datetime):
        return when(value)
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value)


def _console() -> Any:
    from rich.console import Console  # rich only when a table is printed: it costs ~50 ms to import

    # A pipe has no width; wide rather than rich's 80 columns, so rows stay one line each for grep.
    return Console(width=None if sys.stdout.isatty() else 200, highlight=False, soft_wrap=False)


def show(data: Any, output: Output, columns: Sequence[Column] | None = None) -> None:
    """Print a model or a list of models.

    Args:
        data: An SDK model, a list of them, or plain JSON data.
        output: The ``-o`` choice.
        columns: Table columns as (header, getter); a single model without columns prints as field: value rows.
    """
    if output is Output.json:
        typer.echo(json.dumps(jsonable(data), indent=2, ensure_ascii=False))
        return
    if output is Output.yaml:
        import yaml

        typer.echo(yaml.safe_dump(jsonable(data), sort_keys=False, allow_unicode=True).rstrip("\n"))
        return
    from rich.table import Table

    if isinstance(data, list):
        table = Table(box=None, header_style="bold", pad_edge=False, show_edge=False)
        for header, _ in columns or ():
            table.add_column(header, overflow="fold")
        for item in data:
            table.add_row(*(_cell(get(item)) for _, get in columns or ()))
        if not data:
            typer.echo("(none)")
            return
        _console().print(table)
        return
    table = Table(box=None, show_header=False, pad_edge=False, show_edge=False)
    table.add_column(style="bold")
    table.add_column(overflow="fold")
    rows = [(h, get(data)) for h, get in columns] if columns else list(jsonable(data).items())
    for key, value in rows:
        table.add_row(str(key), _cell(value))
    _console().print(table)


def done(message: str, output: Output) -> None:
    """Confirm an action that returns nothing; silent for json/yaml so stdout stays machine-readable."""
    if output is Output.table:
        typer.echo(message)
