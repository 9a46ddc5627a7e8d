"""The Jinja2 environment of the console: templates shipped in the package, autoescaped, with display filters."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from aicenter import __version__
from aicenter.core.clock import utcnow
from aicenter.core.quantity import format_cpu, format_memory

TEMPLATES_DIR = Path(__file__).parent / "templates"
STATIC_DIR = Path(__file__).parent / "static"


def _cpu(milli: object) -> str:
    return format_cpu(milli) if isinstance(milli, int) else "—"


def _memory(n_bytes: object) -> str:
    if not isinstance(n_bytes, int):
        return "—"
    return "0" if n_bytes == 0 else format_memory(n_bytes)


def _when(value: object) -> str:
    """``2024-05-01 13:04 UTC``: one readable, unambiguous form everywhere in the console."""
    if not isinstance(value, datetime):
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _iso(value: object) -> str:
    return value.astimezone(UTC).isoformat() if isinstance(value, datetime) else ""


def _ago(value: object) -> str:
    """``3 min ago`` for recent times (heartbeats), the full time otherwise."""
    if not isinstance(value, datetime):
        return "never"
    seconds = (utcnow() - value).total_seconds()
    if seconds < 0:
        return _when(value)
    if seconds < 60:
        return f"{int(seconds)} s ago"
    if seconds < 3600:
        return f"{int(seconds // 60)} min ago"
    if seconds < 86400:
        return f"{int(seconds // 3600)} h ago"
    return _when(value)


def _money(value: object) -> str:
    if isinstance(value, Decimal | int | float | str):
        try:
            return f"{Decimal(str(value)):,.2f}"
        except ArithmeticError:
            return str(value)
    return "—"


def _quantity(name: str, value: object) -> str:
    """A resource amount by its name: cpu in cores, memory in binary units, devices as a count."""
    if name == "cpu":
        return _cpu(value)
    if name == "memory":
        return _memory(value)
    return str(value)


def _labels(value: object) -> str:
    if not isinstance(value, dict):
        return ""
    return ", ".join(f"{k}={v}" for k, v in sorted(value.items()))


def _amount(value: object) -> str:
    """An overview amount of cores or devices: ``12``, ``12.5``, ``1.4`` (measured), ``1,024``."""
    if not isinstance(value, int | float):
        return "—"
    return f"{value:.1f}".removesuffix(".0") if abs(value) < 1000 else f"{value:,.0f}"


def _duration(seconds: object) -> str:
    """``45 s``, ``12 min``, ``3.5 h``, ``2.1 d``: a wait or an age, readable at a glance."""
    if not isinstance(seconds, int | float):
        return "—"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h".replace(".0 h", " h")
    return f"{seconds / 86400:.1f} d".replace(".0 d", " d")


def _percent(ratio: object) -> str:
    return f"{100 * ratio:.0f}%" if isinstance(ratio, int | float) else "—"


def build_environment() -> Environment:
    env = Environment(
        loader=FileSystemLoader(TEMPLATES_DIR),
        autoescape=select_autoescape(["html", "xml"], default=True),
        # A typo in a template fails the page (and the tests) instead of rendering an empty string.
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        cpu=_cpu, memory=_memory, when=_when, iso=_iso, ago=_ago, money=_money, quantity=_quantity, labels=_labels
    )
    env.filters.update(amount=_amount, duration=_duration, percent=_percent)
    env.globals.update(version=__version__)
    return env


ENV = build_environment()


def render_template(name: str, context: dict[str, Any]) -> str:
    return ENV.get_template(name).render(context)
