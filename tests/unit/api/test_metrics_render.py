"""The platform gauges' own text rendering reads back exactly as prometheus_client's ``generate_latest`` writes
the same families: label values with quotes, backslashes and newlines, help text with newlines, infinities."""

from __future__ import annotations

import math

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

from aicenter.api.metrics import Gauge, render_gauges

GAUGES = [
    Gauge(
        "aicenter_a",
        'Help with "quotes", a back\\slash\nand a newline.',
        ["x", "y"],
        {
            ("plain", 'q"uote'): 1.0,
            ("back\\slash", "new\nline"): 2.5,
            ("big", "small"): 2.0**40,
            ("inf", "-inf"): math.inf,
            ("neg", "inf"): -math.inf,
        },
    ),
    Gauge("aicenter_b", "One label given bare.", ["pool"], {"gpu": 3, "none": 0}),
    Gauge("aicenter_c", "No labels.", [], {(): 7}),
    Gauge("aicenter_d", "Declared, no samples yet.", ["node"], {}),
]


class _Reference(Collector):
    def collect(self):  # type: ignore[no-untyped-def]
        for g in GAUGES:
            family = GaugeMetricFamily(g.name, g.doc, labels=list(g.labels))
            for key, value in g.values.items():
                family.add_metric(list(key) if isinstance(key, tuple) else [key], float(value))
            yield family


def _parsed(text: str) -> list[tuple[str, str, str, list[tuple[str, dict[str, str], float]]]]:
    return [
        (f.name, f.documentation, f.type, [(s.name, s.labels, s.value) for s in f.samples])
        for f in text_string_to_metric_families(text)
    ]


def test_render_reads_back_as_generate_latest() -> None:
    registry = CollectorRegistry()
    registry.register(_Reference())
    ours = _parsed(render_gauges(GAUGES).decode())
    assert ours == _parsed(generate_latest(registry).decode())
    assert ours[0][3][1] == ("aicenter_a", {"x": "back\\slash", "y": "new\nline"}, 2.5)
    assert [name for name, *_ in ours] == ["aicenter_a", "aicenter_b", "aicenter_c", "aicenter_d"]
