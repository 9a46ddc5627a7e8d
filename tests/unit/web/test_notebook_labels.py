"""How the console words a notebook's idle state and resources (the list's and page's columns)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from aicenter.api.schemas.notebooks import NotebookOut
from aicenter.core.errors import ValidationFailed
from aicenter.web.routes.notebooks import idle_label, idle_timeout_s, resources_label

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def _notebook(status: str, idle_since: datetime | None) -> NotebookOut:
    return NotebookOut.model_construct(status=status, idle_since=idle_since)


@pytest.mark.parametrize(
    ("status", "idle_for", "label"),
    [
        ("running", None, "active"),  # the culler has not looked yet
        ("running", timedelta(seconds=59), "active"),  # within one cull interval of real use
        ("running", timedelta(minutes=12, seconds=30), "idle 12 min"),
        ("running", timedelta(hours=2), "idle 2 h"),
        ("running", timedelta(hours=2, minutes=30), "idle 2.5 h"),
        ("stopped", timedelta(hours=2), "—"),
        ("queued", None, "—"),
    ],
)
def test_idle_label(status: str, idle_for: timedelta | None, label: str) -> None:
    since = None if idle_for is None else NOW - idle_for
    assert idle_label(_notebook(status, since), NOW) == label


def test_idle_label_reads_naive_times_as_utc() -> None:
    naive = (NOW - timedelta(minutes=5)).replace(tzinfo=None)  # what SQLite gives back
    assert idle_label(_notebook("running", naive), NOW) == "idle 5 min"


@pytest.mark.parametrize(
    ("resources", "label"),
    [
        ({"spec": "gpu-a100-1"}, "gpu-a100-1"),
        ({"cpu": "2", "memory": 4 * 2**30, "gpu": 0}, "2 CPU, 4Gi"),
        ({"cpu": "500m", "memory": 2**29, "gpu": 1}, "500m CPU, 512Mi, 1 GPU"),
        ({}, "—"),
    ],
)
def test_resources_label(resources: dict[str, Any], label: str) -> None:
    assert resources_label(resources) == label


def test_idle_timeout_minutes() -> None:
    assert idle_timeout_s("") is None  # the default
    assert idle_timeout_s("0") == 0  # never
    assert idle_timeout_s("30") == 1800
    for bad in ("-1", "ten", "1.5"):
        with pytest.raises(ValidationFailed, match=r"minutes|whole number") as info:
            idle_timeout_s(bad)
        assert info.value.details["field"] == "idle_timeout"
