"""The Grafana dashboards shipped in deploy/grafana: valid dashboard JSON, every PromQL expression parses
(Debian's ``promtool check rules`` over a rules file made of them), and every metric an expression names is one
that ``/metrics`` of a real app exports (scraped in-process after a node and a job exist)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import httpx
import pytest
import yaml
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Workspace
from tests.factories import admin_login
from tests.support.dashboards import (
    DASHBOARDS,
    GRAFANA,
    VARIABLE,
    concrete,
    dashboards,
    expressions,
    metric_names,
    panels,
    variable_metrics,
)

PROMTOOL = Path("/usr/bin/promtool")
# Prometheus' own series a dashboard may use besides ours.
PROMETHEUS_OWN = {"up"}


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
    boards = dashboards()
    assert set(boards) == {"cluster.json", "node.json", "job.json", "service.json"}
    uids = [b["uid"] for b in boards.values()]
    assert len(set(uids)) == len(uids)
    for name, board in boards.items():
        assert isinstance(board["schemaVersion"], int), name
        assert board["schemaVersion"] >= 36, name
        assert board["title"].startswith("aicenter / ")
        names = [v["name"] for v in board["templating"]["list"]]
        assert names[0] == "datasource", f"{name}: the datasource is a variable, so the JSON imports anywhere"
        ids = [p["id"] for p in panels(board["panels"])]
        assert len(set(ids)) == len(ids), f"{name}: panel ids repeat"
        for panel in panels(board["panels"]):
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
                used = set(VARIABLE.findall(target["expr"])) - {"__rate_interval"}
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
        for name, board in dashboards().items()
        for i, expr in enumerate(expressions(board))
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
    for name, board in dashboards().items():
        named = set(variable_metrics(board))
        for expr in expressions(board):
            found = metric_names(concrete(expr))
            assert found, f"{name}: {expr!r} names no metric"
            named |= found
        if named - exported:
            missing[name] = named - exported
    assert not missing, f"dashboards name metrics /metrics does not export: {missing}"
