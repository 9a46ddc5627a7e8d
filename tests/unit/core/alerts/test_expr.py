"""The alert expression language: parse errors with positions, and PromQL-like evaluation."""

from __future__ import annotations

import pytest

from aicenter.core.alerts import BUILTIN_RULES, Element, InvalidExpression, evaluate, parse, selector_names


def _lookup(data: dict[str, list[Element]]):
    return lambda name: data.get(name, [])


@pytest.mark.parametrize(
    ("text", "position", "reason"),
    [
        ("node.cpu_utilization >", 22, "expected a series name, a number or '('"),
        ("avg(node.cpu_utilization", 24, "expected ')'"),
        ("foo(node.cpu_utilization)", 0, "unknown function 'foo'"),
        ("node.x > 1 > 2", 11, "comparisons do not chain"),
        ("cpu > 1", 0, "is not a series name"),
        ("node.x{node=1}", 12, "expected a quoted label value"),
        ('node.x{node="a}', 12, "unterminated string"),
        ("node.x $ 3", 7, "unexpected character '$'"),
        ("1 > 0", 0, "names no series"),
        ("", 0, "empty expression"),
        ("avg(node.x) by node", 15, "expected '(' after by"),
        ("node.x node.y", 7, "after a complete expression"),
        ("and node.x", 0, "must follow an expression"),
    ],
)
def test_invalid_expressions_name_the_position(text: str, position: int, reason: str) -> None:
    with pytest.raises(InvalidExpression) as caught:
        parse(text)
    err = caught.value
    assert err.code == "invalid_expression"
    assert err.status == 400
    assert err.details["position"] == position
    assert reason in err.details["reason"]
    assert f"position {position}" in err.message


def test_overlong_expression_is_refused() -> None:
    with pytest.raises(InvalidExpression):
        parse("node.x > " + "1" * 2000)


def test_every_builtin_rule_parses() -> None:
    for rule in BUILTIN_RULES:
        assert selector_names(parse(rule.expression))


def test_average_by_label_then_threshold() -> None:
    data = {
        "node.cpu_utilization": [
            Element({"node": "a", "cpu": "0"}, 1.0),
            Element({"node": "a", "cpu": "1"}, 0.9),
            Element({"node": "b", "cpu": "0"}, 0.2),
        ]
    }
    out = evaluate(parse("avg(node.cpu_utilization) by (node) > 0.9"), _lookup(data))
    assert out == [Element({"node": "a"}, pytest.approx(0.95))]


def test_ratio_of_two_series_matches_labels_one_to_one() -> None:
    data = {
        "node.disk_used_bytes": [Element({"node": "a"}, 95.0), Element({"node": "b"}, 10.0), Element({"node": "c"}, 1)],
        "node.disk_total_bytes": [Element({"node": "a"}, 100.0), Element({"node": "b"}, 100.0)],
    }
    out = evaluate(parse("node.disk_used_bytes / node.disk_total_bytes > 0.9"), _lookup(data))
    assert isinstance(out, list)
    assert [(e.labels, e.value) for e in out] == [({"node": "a"}, 0.95)]


def test_comparison_keeps_the_vector_value_and_matchers_filter() -> None:
    data = {
        "accelerator.temperature_celsius": [
            Element({"node": "a", "device": "0"}, 90.0),
            Element({"node": "a", "device": "1"}, 60.0),
            Element({"node": "b", "device": "0"}, 95.0),
        ]
    }
    out = evaluate(parse('accelerator.temperature_celsius{node="a"} > 85'), _lookup(data))
    assert [(e.labels["device"], e.value) for e in out] == [("0", 90.0)]
    out = evaluate(parse("85 < accelerator.temperature_celsius"), _lookup(data))
    assert sorted(e.value for e in out) == [90.0, 95.0]


def test_and_or_arithmetic_and_negation() -> None:
    data = {
        "x.a": [Element({"k": "1"}, 1.0), Element({"k": "2"}, 5.0)],
        "x.b": [Element({"k": "2"}, 2.0), Element({"k": "3"}, 7.0)],
    }
    look = _lookup(data)
    assert [e.labels["k"] for e in evaluate(parse("x.a and x.b"), look)] == ["2"]
    assert [e.labels["k"] for e in evaluate(parse("x.a or x.b"), look)] == ["1", "2", "3"]
    assert [e.value for e in evaluate(parse("-x.a * 2 + 1"), look)] == [-1.0, -9.0]
    assert [e.value for e in evaluate(parse("(x.a - x.b) >= 3"), look)] == [3.0]
    assert evaluate(parse("count(x.a)"), look) == [Element({}, 2.0)]
    assert evaluate(parse("sum(x.a) by (k) / 0"), look)[0].value == float("inf")


def test_aggregate_keeps_a_workspace_only_when_shared() -> None:
    data = {"job.pending_seconds": [Element({"job": "1"}, 10.0, 1), Element({"job": "2"}, 20.0, 2)]}
    assert evaluate(parse("max(job.pending_seconds)"), _lookup(data))[0].workspace_id is None
    out = evaluate(parse('max(job.pending_seconds{job="2"})'), _lookup(data))
    assert out[0].workspace_id == 2
