"""The Grafana dashboards shipped in deploy/grafana: valid dashboard JSON, every PromQL expression parses
(Debian's ``promtool check rules`` over a rules file made of them), and every metric an expression names is one
that ``/metrics`` of a real app exports (scraped in-process after a node and a job exist)."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Workspace
from tests.factories import admin_login

ROOT = Path(__file__).resolve().parents[3]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
PROMTOOL = Path("/usr/bin/promtool")
# Prometheus' own series a dashboard may use besides ours.
PROMETHEUS_OWN = {"up"}
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless", "offset"}
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL_VALUES = re.compile(r"^label_values\(\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*,\s*[a-zA-Z_][a-zA-Z0-9_]*\s*\)$")
_VARIABLE = re.compile(r"\$\{?(\w+)(?::\w+)?\}?")


def _dashboards() -> dict[str, dict[str, Any]]:
    return {path.name: json.loads(path.read_text()) for path in DASHBOARDS}


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))  # panels inside a collapsed row


def _expressions(board: dict[str, Any]) -> list[str]:
    return [t["expr"] for p in _panels(board["panels"]) for t in p.get("targets", [])]


def _variable_metrics(board: dict[str, Any]) -> list[str]:
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
    return _VARIABLE.sub(lambda m: "1m" if m.group(1).startswith("__") else ".*", expr)


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


def test_metric_names_reads_selectors_not_functions_labels_or_keywords() -> None:
    expr = (
        'sum by (pool) (aicenter_node_pool_info{pool=~"$pool"} * on (node) group_left '
        "sum by (node) (aicenter_node_accelerators_allocated)) / ignoring (x) "
        "histogram_quantile(0.99, sum by (le) (rate(aicenter_x_bucket{a='b'}[5m] offset 1h))) > bool 1e3"
    )
    assert metric_names(expr) == {
        "aicenter_node_pool_info",
        "aicenter_node_accelerators_allocated",
        "aicenter_x_bucket",
    }
    assert concrete('rate(x{node=~"$node"}[$__rate_interval])') == 'rate(x{node=~".*"}[1m])'


def test_dashboards_are_grafana_json() -> None:
    boards = _dashboards()
    assert set(boards) == {"cluster.json", "node.json", "job.json", "service.json"}
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    for name, board in boards.items():
        assert isinstance(board["schemaVersion"], int), name
        assert board["schemaVersion"] >= 36, name
        assert board["title"].startswith("aicenter / ")
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[0] == "datasource", f"{name}: the datasource is a variable, so the JSON imports anywhere"
        ids = [p["id"] for p in _panels(board["panels"])]
        assert len(set(ids)) == len(ids), f"{name}: panel ids repeat"
        for panel in _panels(board["panels"]):
            pos = panel["gridPos"]
            assert pos["x"] >= 0, (name, panel["title"])
            assert pos["x"] + pos["w"] <= 24, (name, panel["title"])
            assert pos["h"] > 0, (name, panel["title"])
            if panel["type"] in ("row", "text"):
                continue
            assert panel["targets"], (name, panel["title"])
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, (name, panel["title"])
            for target in panel["targets"]:
                assert target["expr"].strip(), (name, panel["title"])
                used = set(_VARIABLE.findall(target["expr"])) - {"__rate_interval"}
                assert used <= set(names), f"{name} {panel['title']}: undefined variables {used - set(names)}"
    assert DASHBOARDS  # not vacuous
    node_vars = [v["name"] for v in boards["node.json"]["templating"]["list"]]
    assert "node" in node_vars


def test_provisioning_files() -> None:
    datasources = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "aicenter.yaml").read_text())
    assert datasources["datasources"][0]["type"] == "prometheus"
    providers = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "aicenter.yaml").read_text())
    assert providers["providers"][0]["type"] == "file"
    assert providers["providers"][0]["options"]["path"]


def test_every_expression_parses_with_promtool(tmp_path: Path) -> None:
    if not PROMTOOL.exists():
        pytest.skip("Debian's promtool is not installed (apt-get install -y --no-install-recommends prometheus)")
    rules = [
        {"record": f"aicenter_dashboard:{Path(name).stem}_{i}", "expr": concrete(expr)}
        for name, board in _dashboards().items()
        for i, expr in enumerate(_expressions(board))
    ]
    assert len(rules) >= 40
    path = tmp_path / "dashboards.rules.yml"
    path.write_text(json.dumps({"groups": [{"name": "dashboards", "rules": rules}]}))  # JSON is YAML
    done = subprocess.run([str(PROMTOOL), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout + done.stderr


def _exported(text: str) -> set[str]:
    """Every sample name the exposition may carry, from its families' names and types (a family declared
    without samples yet, like the services', still counts)."""
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum"), "summary": ("_count", "_sum")}
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        names.update(family.name + suffix for suffix in suffixes.get(family.type, ()))
        names.update(sample.name for sample in family.samples)
    return names


@pytest.mark.parametrize("db_backend", ["sqlite"], indirect=True)  # the names do not depend on the database
async def test_every_metric_a_dashboard_names_is_exported(
    client: httpx.AsyncClient, app: FastAPI, db: Database
) -> None:
    async with db.write() as session:
        ws = Workspace(name="vision")
        node = Node(name="n1", cpu_milli=4000, memory_bytes=2**33, accelerators=[{"index": 0, "type": "t4"}])
        session.add_all([ws, node])
        await session.flush()
        session.add(Job(workspace_id=ws.id, name="train", status="queued"))
    app.state.metrics.platform.taken_at = float("-inf")
    admin = await admin_login(client)
    r = await client.get("/metrics", headers=admin.headers)
    assert r.status_code == 200, r.text
    exported = _exported(r.text) | PROMETHEUS_OWN
    assert "aicenter_node_info" in exported
    assert "aicenter_service_requests_total" in exported

    missing: dict[str, set[str]] = {}
    for name, board in _dashboards().items():
        named = set(_variable_metrics(board))
        for expr in _expressions(board):
            found = metric_names(concrete(expr))
            assert found, f"{name}: {expr!r} names no metric"
            named |= found
        if named - exported:
            missing[name] = named - exported
    assert not missing, f"dashboards name metrics /metrics does not export: {missing}"
