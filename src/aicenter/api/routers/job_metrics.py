"""A job's reported metrics (``aicenter.runtime.report``), read from its replicas' run directories."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, ReadSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES
from aicenter.api.schemas.job_metrics import JobMetricsOut
from aicenter.services import jobs

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], responses=ERROR_RESPONSES)


@router.get("/{job_id}/metrics", openapi_extra=access(Access.USER, job_token=True))
async def job_metrics(
    job_id: Id,
    actor: CurrentActor,
    session: ReadSession,
    ctx: Ctx,
    task: Annotated[str | None, Query(description="The task; default: the first replica that reported.")] = None,
    replica: Annotated[int | None, Query(ge=0, description="The replica index within the task; default 0.")] = None,
    name: Annotated[str | None, Query(max_length=256, description="Only this metric's series.")] = None,
    since: Annotated[datetime | None, Query(description="Only points reported at or after this time.")] = None,
    cursor: Annotated[str | None, Query(max_length=64, description="cursor or next_cursor of an answer.")] = None,
    limit: Annotated[
        int, Query(ge=1, le=jobs.MAX_POINTS, description="Most points in this answer, over all series.")
    ] = jobs.DEFAULT_POINTS,
) -> JobMetricsOut:
    """What a replica reported with `aicenter.runtime.report`: the latest value of every metric and the series
    (step, time, value), read forward from `cursor` (members of the job's workspace and platform admins)."""
    result = await jobs.job_metrics(
        session,
        actor,
        job_id,
        ctx.settings.jobs_path,
        task=task,
        replica=replica,
        name=name,
        since=since,
        cursor=cursor,
        limit=limit,
    )
    return JobMetricsOut.from_result(result)
