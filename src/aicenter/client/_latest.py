"""The newest value of each series, from ``GET /api/v1/series/latest`` (``aicenter top`` uses it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from aicenter.client._base import BaseClient
from aicenter.client.models import ApiModel


class LatestValue(ApiModel):
    """The newest point of one series within the window asked for."""

    name: str
    labels: dict[str, str] = {}
    workspace_id: int | None = None
    job_id: int | None = None
    node_id: int | None = None
    at: datetime
    value: float


class LatestMixin(BaseClient):
    def latest_values(
        self, names: Sequence[str], *, window_s: float = 120.0, job_id: int | None = None, node_id: int | None = None
    ) -> list[LatestValue]:
        """The newest value of every series named in ``names`` that has a point in the last ``window_s`` seconds
        (members: cluster series and their workspaces'); ``GET /api/v1/series/latest``. A name with no series
        is simply absent. The samplers write every 15 s by default: a series that stopped (an ended replica, a
        node gone) drops out of the answer after the window."""
        params: dict[str, object] = {"name": list(names), "max_age_s": window_s}
        if job_id is not None:
            params["job_id"] = job_id
        if node_id is not None:
            params["node_id"] = node_id
        return self._array(LatestValue, "/series/latest", params)
