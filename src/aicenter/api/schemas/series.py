"""Metric series (samplers, jobs' reported values) queried by range, downsampled on the server."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from aicenter.api.schemas.common import Schema
from aicenter.services.monitoring import SeriesResult


class SeriesPointOut(Schema):
    at: datetime = Field(description="Start of the step (UTC).")
    value: float = Field(description="Mean of the values within the step.")
    min: float = Field(description="Smallest value within the step.")
    max: float = Field(description="Largest value within the step.")


class SeriesDataOut(Schema):
    labels: dict[str, str] = Field(description='The series\' labels, e.g. {"node": "n1"} or {"task", "replica"}.')
    workspace_id: int | None = Field(description="The workspace of a job's series; null for cluster series.")
    job_id: int | None
    node_id: int | None
    points: list[SeriesPointOut] = Field(description="One point per step holding data, oldest first.")


class SeriesOut(Schema):
    name: str
    step_s: int = Field(description="Seconds per point: the step asked for, or coarser where only rollups remain.")
    resolution: str = Field(description="The tier read: raw, 5m or 1h.")
    series: list[SeriesDataOut]

    @classmethod
    def from_result(cls, result: SeriesResult) -> SeriesOut:
        return cls(
            name=result.name,
            step_s=result.step_s,
            resolution=result.resolution,
            series=[
                SeriesDataOut(
                    labels=s.labels,
                    workspace_id=s.workspace_id,
                    job_id=s.job_id,
                    node_id=s.node_id,
                    points=[SeriesPointOut(at=p.at, value=p.value, min=p.min, max=p.max) for p in s.points],
                )
                for s in result.series
            ],
        )


class SeriesNamesOut(Schema):
    names: list[str] = Field(description="Names of the series the caller may see, sorted.")


class LatestValueOut(Schema):
    name: str
    labels: dict[str, str] = Field(description="The series' labels.")
    workspace_id: int | None = Field(description="The workspace of a job's series; null for cluster series.")
    job_id: int | None
    node_id: int | None
    at: datetime = Field(description="When the newest point was taken (UTC).")
    value: float
