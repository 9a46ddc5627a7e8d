"""The Grafana dashboards shipped in deploy/grafana, read for the tests: their expressions, made concrete as
Grafana sends them, and the metric names those select."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$")
VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def dashboards() -> dict[str, dict[str, Any]]:
    """File name -> the dashboard."""
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS}


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Every panel, those inside rows included."""
    for panel in items:
        yield panel
        yield from panels(panel.get("panels", []))  # panels inside a collapsed row


def expressions(board: dict[str, Any]) -> list[str]:
    """Every target's PromQL expression, as written (variables unexpanded)."""
    return [t["expr"] for p in panels(board["panels"]) for t in p.get("targets", [])]


def variable_metrics(board: dict[str, Any]) -> list[str]:
    """The metric of every ``label_values(metric, label)`` variable query."""
    out = []
    for variable in board["templating"]["list"]:
        if variable["type"] != "query":
            continue
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        match = _LABEL_VALUES.match(query)
        assert match, f"variable {variable['name']}: {query!r} is not label_values(metric, label)"
        out.append(match.group(1))
    return out


def concrete(expr: str) -> str:
    """The expression as Grafana sends it: ``$__rate_interval`` and friends become a duration, a dashboard
    variable (always used inside a regex matcher) matches everything."""
    return VARIABLE.sub(lambda m: "1m" if m.group(1).startswith("__") else ".*", expr)


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (string literals, label matchers, ranges and grouping
    clauses removed; what is left that is not a function, an aggregation or a keyword)."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'', '""', expr)
    text = re.sub(r"\{[^}]*\}", " ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text)
    text = _GROUPING.sub(" ", text)
    names = set()
    for match in _IDENT.finditer(text):
        rest = text[match.end() :].lstrip()
        before = text[: match.start()]
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        if before and (before[-1].isdigit() or before[-1] == "."):  # the "e3" of 1e3, a duration's unit
            continue
        names.add(match.group())
    return names
