"""Metric series: cluster telemetry, replicas' resource use and jobs' reported values, by range and step."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated

from fastapi import APIRouter, Query

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, ReadSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.api.schemas.series import LatestValueOut, SeriesNamesOut, SeriesOut
from aicenter.core.clock import utcnow
from aicenter.core.errors import ValidationFailed
from aicenter.services import monitoring

router = APIRouter(prefix="/api/v1/series", tags=["monitoring"], responses=ERROR_RESPONSES)

_DEFAULT_RANGE = timedelta(hours=1)
_MAX_STEP_S = 366 * 86400


def _labels(pairs: list[str]) -> dict[str, str]:
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition(":")
        if not sep or not key:
            raise ValidationFailed(f"a label filter is key:value, e.g. node:n1 (got {pair!r})", field="label")
        labels[key] = value
    return labels


@router.get("", openapi_extra=access(Access.USER))
async def get_series(
    actor: CurrentActor,
    session: ReadSession,
    ctx: Ctx,
    name: Annotated[str, Query(min_length=1, max_length=200, description="The metric, e.g. node.cpu_utilization.")],
    start: Annotated[datetime | None, Query(description="Range start (ISO 8601); default: an hour before end.")] = None,
    end: Annotated[datetime | None, Query(description="Range end (ISO 8601); default: now.")] = None,
    step: Annotated[
        int | None, Query(ge=1, le=_MAX_STEP_S, description="Seconds per point; default: about 500 points.")
    ] = None,
    job_id: Annotated[Id | None, Query(description="Only this job's series.")] = None,
    node_id: Annotated[Id | None, Query(description="Only this node's series.")] = None,
    label: Annotated[
        list[str] | None, Query(max_length=20, description="Label filters key:value (repeatable), e.g. node:n1.")
    ] = None,
) -> SeriesOut:
    """Every series named `name` over [start, end), one point per step (mean, min, max), read from raw points or
    the 5-minute or hourly rollups. Members see cluster series and their workspaces' job series; platform admins
    all. More than 10,000 points per series: 400 `range_too_wide` with `details.min_step_s`; nothing matching:
    404 `unknown_series`."""
    end_at = end or utcnow()
    result = await monitoring.query_series(
        session,
        actor,
        name=name,
        start=start or end_at - _DEFAULT_RANGE,
        end=end_at,
        step_s=step,
        job_id=job_id,
        node_id=node_id,
        labels=_labels(label or []),
        retention=monitoring.Retention.from_settings(ctx.settings),
    )
    return SeriesOut.from_result(result)


@router.get("/names", openapi_extra=access(Access.USER))
async def get_series_names(
    actor: CurrentActor,
    session: ReadSession,
    job_id: Annotated[Id | None, Query(description="Only this job's series.")] = None,
    node_id: Annotated[Id | None, Query(description="Only this node's series.")] = None,
    prefix: Annotated[str | None, Query(max_length=200, description="Only names starting so, e.g. report.")] = None,
) -> SeriesNamesOut:
    """The names of the series the caller may see (members: cluster series and their workspaces')."""
    return SeriesNamesOut(
        names=await monitoring.series_names(session, actor, job_id=job_id, node_id=node_id, prefix=prefix)
    )


@router.get("/latest", openapi_extra=access(Access.USER))
async def get_latest_values(
    actor: CurrentActor,
    session: ReadSession,
    name: Annotated[
        list[str],
        Query(min_length=1, max_length=20, description="Metric names (repeatable), e.g. node.cpu_utilization."),
    ],
    max_age_s: Annotated[
        float, Query(gt=0, le=86400, description="Leave out series whose newest point is older than this.")
    ] = 120.0,
    job_id: Annotated[Id | None, Query(description="Only this job's series.")] = None,
    node_id: Annotated[Id | None, Query(description="Only this node's series.")] = None,
) -> list[LatestValueOut]:
    """The newest point of every series named in `name` that reported within `max_age_s` (what `aicenter top`
    shows): one index probe per series, with no limit on how many jobs ever ran. Members see cluster series and
    their workspaces' job series; platform admins all."""
    values = await monitoring.latest_values(
        session, actor, names=name, job_id=job_id, node_id=node_id, max_age_s=max_age_s
    )
    return [LatestValueOut.model_validate(v) for v in values]
