"""Metric series: cluster telemetry, replicas' resource use and jobs' reported values (``report.<name>``)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from aicenter.client._base import BaseClient, query
from aicenter.client.models import Series


class SeriesMixin(BaseClient):
    def series(
        self,
        name: str,
        *,
        start: datetime | None = None,
        end: datetime | None = None,
        step_s: int | None = None,
        job_id: int | None = None,
        node_id: int | None = None,
        labels: Mapping[str, str] | None = None,
    ) -> Series:
        """Every series named ``name`` that the caller may see, downsampled by the server.

        Args:
            name: The metric, e.g. ``node.cpu_utilization`` or ``report.loss``.
            start: Range start (default: an hour before ``end``). end: Range end (default: now).
            step_s: Seconds per point (default: about 500 points over the range).
            job_id: Only this job's series. node_id: Only this node's.
            labels: Only series with these label values, e.g. ``{"node": "n1"}``.

        Raises:
            ApiError: ``range_too_wide`` (``details["min_step_s"]`` is the smallest step that fits),
                ``unknown_series``, or ``validation_failed``.
        """
        params = query(
            name=name,
            start=start.isoformat() if start else None,
            end=end.isoformat() if end else None,
            step=step_s,
            job_id=job_id,
            node_id=node_id,
            label=[f"{k}:{v}" for k, v in (labels or {}).items()] or None,
        )
        return self._one(Series, "GET", "/series", params=params)

    def series_names(
        self, *, job_id: int | None = None, node_id: int | None = None, prefix: str | None = None
    ) -> list[str]:
        """The names of the series the caller may see, sorted (e.g. ``prefix="report."`` for a job's metrics)."""
        answer = self._json("GET", "/series/names", params=query(job_id=job_id, node_id=node_id, prefix=prefix))
        return [str(name) for name in answer["names"]]
