"""The newest value of each series, from ``GET /api/v1/series`` over a short window (``aicenter top`` uses it)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import cast

from aicenter.client._base import BaseClient
from aicenter.client._series import SeriesMixin
from aicenter.client.errors import ApiError
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
        (members: cluster series and their workspaces'). A name with no series is simply absent.

        One ``series`` range query per name over the window, the last point of each series kept. The samplers
        write every 15 s by default: the default window holds several of their points, and a series that stopped
        (an ended replica, a node gone) drops out of the answer after it.
        """
        out: list[LatestValue] = []
        start = datetime.now(UTC) - timedelta(seconds=window_s)
        for name in names:
            try:
                # Through the Client's SeriesMixin, whichever order the Client lists the two mixins in.
                answer = cast(SeriesMixin, self).series(name, start=start, job_id=job_id, node_id=node_id)
            except ApiError as exc:
                if exc.code == "unknown_series":
                    continue
                raise
            for data in answer.series:
                if not data.points:
                    continue
                last = data.points[-1]
                out.append(
                    LatestValue(
                        name=name,
                        labels=data.labels,
                        workspace_id=data.workspace_id,
                        job_id=data.job_id,
                        node_id=data.node_id,
                        at=last.at,
                        value=last.value,
                    )
                )
        return out
