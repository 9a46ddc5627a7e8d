"""The metrics a job reported (``aicenter.runtime.report``)."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from aicenter.api.schemas.common import Schema
from aicenter.services.jobs import JobMetrics, MetricPoint


class MetricPointOut(Schema):
    step: int | None = Field(description="The step given to report(); null when none was.")
    at: datetime = Field(description="When it was reported (UTC).")
    value: float | None = Field(description="The value; null for NaN or infinity.")


class MetricSeriesOut(Schema):
    name: str
    points: list[MetricPointOut]


class JobMetricsOut(Schema):
    job_id: int
    task: str = Field(description="The replica's task.")
    replica: int = Field(description="The replica's index within its task.")
    reporting: list[str] = Field(description='Every replica that reported metrics, as "task-index", in rank order.')
    latest: dict[str, MetricPointOut] = Field(description="The last point of every metric of this replica.")
    series: list[MetricSeriesOut] = Field(description="The points of this page by metric, oldest first.")
    next_cursor: str | None = Field(description="Pass as cursor for the next page; null when all was read.")
    cursor: str = Field(
        description="Where this page ended: pass it as cursor later to get only the points reported since."
    )

    @classmethod
    def from_result(cls, result: JobMetrics) -> JobMetricsOut:
        def point(p: MetricPoint) -> MetricPointOut:
            return MetricPointOut(step=p.step, at=p.at, value=p.value)

        return cls(
            job_id=result.job_id,
            task=result.task,
            replica=result.replica,
            reporting=result.reporting,
            latest={name: point(p) for name, p in result.latest.items()},
            series=[MetricSeriesOut(name=s.name, points=[point(p) for p in s.points]) for s in result.series],
            next_cursor=result.next_cursor,
            cursor=result.cursor,
        )
