"""The series SDK against the real app served by uvicorn: a range query with labels and step, names, and the
errors as ApiError codes."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from aicenter.client import ApiError, Client, Series
from aicenter.core.clock import utcnow
from aicenter.db.engine import Database
from aicenter.services import monitoring
from aicenter.services.monitoring import Sample
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD, make_settings

_MINUTE = utcnow().replace(second=0, microsecond=0)
NOW = _MINUTE - timedelta(minutes=_MINUTE.minute % 2)  # on an even minute: 2-minute steps hold two points each


async def _seed(url: str) -> None:
    db = Database(url)
    try:
        async with db.write() as session:
            await monitoring.record_samples(
                session,
                [
                    Sample("node.cpu_utilization", NOW - timedelta(minutes=i), 0.25 * (i % 2), {"node": node})
                    for i in range(1, 7)
                    for node in ("n1", "n2")
                ],
            )
    finally:
        await db.dispose()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    home: Path = tmp_path_factory.mktemp("series-sdk-home")
    with live_server(home) as url, Client(url) as client:
        database_url = make_settings(home).effective_database_url
        asyncio.run(_seed(database_url))
        client.login("admin", ADMIN_PASSWORD)
        yield client


def test_series_and_names(api: Client) -> None:
    assert api.series_names() == ["node.cpu_utilization"]
    assert api.series_names(prefix="report.") == []
    answer = api.series("node.cpu_utilization", start=NOW - timedelta(minutes=6), end=NOW, step_s=120)
    assert isinstance(answer, Series)
    assert (answer.step_s, answer.resolution) == (120, "raw")
    assert [s.labels for s in answer.series] == [{"node": "n1"}, {"node": "n2"}]
    assert [(p.value, p.min, p.max) for p in answer.series[0].points] == [(0.125, 0.0, 0.25)] * 3
    only = api.series("node.cpu_utilization", labels={"node": "n2"}, start=NOW - timedelta(hours=1), end=NOW)
    assert [s.labels["node"] for s in only.series] == ["n2"]


def test_errors_are_api_errors_with_codes(api: Client) -> None:
    with pytest.raises(ApiError) as wide:
        api.series("node.cpu_utilization", start=NOW - timedelta(days=7), end=NOW, step_s=1)
    assert wide.value.code == "range_too_wide"
    assert wide.value.details["min_step_s"] == 61  # 604,800 s / 10,000 points, rounded up
    with pytest.raises(ApiError) as unknown:
        api.series("node.nothing")
    assert (unknown.value.code, unknown.value.status) == ("unknown_series", 404)
