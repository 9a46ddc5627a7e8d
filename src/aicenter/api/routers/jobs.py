"""Jobs and job templates. Logs are streamed from the executor after the route's read session has closed
(ReadSession has function scope), so a client following a job for hours holds no database connection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Query, Request, status
from fastapi.responses import StreamingResponse

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ADMISSION_RESPONSES, Page
from aicenter.api.schemas.jobs import (
    JobDetail,
    JobEventOut,
    JobOut,
    JobResubmit,
    JobSubmit,
    ReplicaOut,
    TemplateCreate,
    TemplateFromJob,
    TemplateOut,
    TemplateSubmit,
    TemplateUpdate,
)
from aicenter.api.sse import EventSourceResponse, encode_event, event_stream
from aicenter.services import jobs

router = APIRouter(prefix="/api/v1/jobs", tags=["jobs"], responses=ADMISSION_RESPONSES)
templates_router = APIRouter(prefix="/api/v1/job-templates", tags=["job-templates"], responses=ADMISSION_RESPONSES)

_TEXT = "text/plain; charset=utf-8"


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def submit_job(body: JobSubmit, actor: CurrentActor, session: WriteSession) -> JobOut:
    """Submit a job; it is queued once its references are resolved. Refused (4xx naming the field) when it
    could never run: unknown or invisible versions, specs outside the workspace's pools, a replica larger than
    any node, a job larger than the workspace's quota maximum."""
    view = await jobs.submit_job(session, actor, body.spec, overrides=body.overrides, workspace_id=body.workspace_id)
    return JobOut.from_view(view)


@router.get("", openapi_extra=access(Access.USER))
async def list_jobs(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    workspace_id: Id | None = None,
    status_: Annotated[
        str | None, Query(alias="status", description="A status, or several separated by commas.")
    ] = None,
    user: Annotated[str | None, Query(description="A user name.")] = None,
    kind: Annotated[str | None, Query(description="train, notebook or trial.")] = None,
    name: Annotated[str | None, Query(description="Only jobs of this name.")] = None,
) -> Page[JobOut]:
    """Jobs of your workspaces, newest first (platform admins: of every workspace)."""
    page = await jobs.list_jobs(
        session,
        actor,
        workspace_id=workspace_id,
        status=status_,
        user=user,
        kind=kind,
        name=name,
        limit=paging.limit,
        cursor=paging.cursor,
    )
    return Page(items=[JobOut.from_view(v) for v in page.items], next_cursor=page.next_cursor)


@router.get("/{job_id}", openapi_extra=access(Access.USER, job_token=True))
async def get_job(job_id: Id, actor: CurrentActor, session: ReadSession) -> JobDetail:
    """The job with its replicas (node, devices, machine time) and its events."""
    return JobDetail.from_view(await jobs.get_job(session, actor, job_id))


@router.get("/{job_id}/events", openapi_extra=access(Access.USER, job_token=True))
async def list_events(job_id: Id, actor: CurrentActor, session: ReadSession) -> list[JobEventOut]:
    return [JobEventOut.model_validate(e) for e in await jobs.list_events(session, actor, job_id)]


@router.get("/{job_id}/replicas", openapi_extra=access(Access.USER, job_token=True))
async def list_replicas(job_id: Id, actor: CurrentActor, session: ReadSession) -> list[ReplicaOut]:
    return [ReplicaOut.model_validate(r) for r in await jobs.list_replicas(session, actor, job_id)]


@router.post("/{job_id}/stop", openapi_extra=access(Access.USER))
async def stop_job(job_id: Id, actor: CurrentActor, session: WriteSession) -> JobOut:
    """Stop the job (its owner or a workspace admin). A running job is stopped gracefully by the reconciler:
    SIGTERM, a grace period to checkpoint, then SIGKILL."""
    return JobOut.from_view(await jobs.stop_job(session, actor, job_id))


@router.post("/{job_id}/force-stop", openapi_extra=access(Access.ADMIN))
async def force_stop(job_id: Id, actor: CurrentActor, session: WriteSession) -> JobOut:
    """Stop any job (platform admins); it ends with reason stopped_by_admin."""
    return JobOut.from_view(await jobs.force_stop(session, actor, job_id))


@router.post("/{job_id}/resubmit", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def resubmit_job(job_id: Id, body: JobResubmit, actor: CurrentActor, session: WriteSession) -> JobOut:
    """A new job from this job's spec, with overrides."""
    return JobOut.from_view(await jobs.resubmit_job(session, actor, job_id, body.overrides))


@router.post("/{job_id}/template", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def save_as_template(
    job_id: Id, body: TemplateFromJob, actor: CurrentActor, session: WriteSession
) -> TemplateOut:
    """Save this job's spec as a template of its workspace."""
    view = await jobs.create_template_from_job(session, actor, job_id, name=body.name, description=body.description)
    return TemplateOut.from_view(view)


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_job(job_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a finished job (409 while it runs)."""
    await jobs.delete_job(session, actor, job_id)


_LogTask = Annotated[str | None, Query(description="The task; default: the job's first task.")]
_LogReplica = Annotated[int | None, Query(ge=0, description="The replica index within the task; default 0.")]
_LogAttempt = Annotated[int | None, Query(ge=0, description="The attempt (restart count); default: the latest.")]
_Since = Annotated[int, Query(ge=0, description="Byte offset in the replica's output to start from.")]


@router.get(
    "/{job_id}/logs",
    openapi_extra=access(Access.USER, job_token=True),
    response_class=StreamingResponse,
    responses={200: {"content": {_TEXT: {}}, "description": "The replica's output, one timestamped line each."}},
)
async def job_logs(
    job_id: Id,
    ctx: Ctx,
    actor: CurrentActor,
    session: ReadSession,
    task: _LogTask = None,
    replica: _LogReplica = None,
    attempt: _LogAttempt = None,
    since: _Since = 0,
    follow: Annotated[bool, Query(description="Keep streaming until the replica ends.")] = False,
) -> StreamingResponse:
    """A replica's output as text; with follow, streamed until the replica ends (members and platform admins)."""
    target = await jobs.log_target(session, actor, job_id, task, replica, attempt)
    return StreamingResponse(
        jobs.read_logs(target, since=since, follow=follow and not target.finished, executors=ctx.executors),
        media_type=_TEXT,
    )


async def _sse(chunks: AsyncIterator[bytes], offset: int) -> AsyncIterator[bytes]:
    """Server-sent events: one ``data:`` per output line, ``id:`` the byte offset after it (a reconnecting
    EventSource sends it back as Last-Event-ID and resumes there), then an ``end`` event."""
    pending = b""
    async for chunk in chunks:
        pending += chunk
        *lines, pending = pending.split(b"\n")
        out = []
        for line in lines:
            offset += len(line) + 1
            out.append(encode_event(line.decode("utf-8", "replace").replace("\r", ""), id=str(offset)))
        if out:
            yield b"".join(out)
    if pending:  # a last line without newline (the launcher cuts lines at 64 KiB)
        offset += len(pending)
        yield encode_event(pending.decode("utf-8", "replace").replace("\r", ""), id=str(offset))
    yield encode_event(json.dumps({"offset": offset}), event="end")


@router.get(
    "/{job_id}/logs/stream",
    openapi_extra=access(Access.USER, job_token=True),
    response_class=EventSourceResponse,
    responses={200: {"content": {"text/event-stream": {}}, "description": "Output lines as server-sent events."}},
)
async def job_logs_stream(
    job_id: Id,
    request: Request,
    ctx: Ctx,
    actor: CurrentActor,
    session: ReadSession,
    task: _LogTask = None,
    replica: _LogReplica = None,
    attempt: _LogAttempt = None,
    since: _Since = 0,
) -> EventSourceResponse:
    """A replica's output as server-sent events, following until the replica ends; a comment line every
    ``sse_ping_s`` keeps a quiet stream open through proxies."""
    last = request.headers.get("last-event-id", "")
    start = int(last) if last.isdigit() else since
    target = await jobs.log_target(session, actor, job_id, task, replica, attempt)
    chunks = jobs.read_logs(target, since=start, follow=not target.finished, executors=ctx.executors)
    return event_stream(_sse(chunks, start), ping_s=ctx.settings.sse_ping_s)


# --- templates --------------------------------------------------------------------------------------------


@templates_router.get("", openapi_extra=access(Access.USER))
async def list_templates(
    actor: CurrentActor, session: ReadSession, paging: Paging, workspace_id: Id | None = None
) -> Page[TemplateOut]:
    """Templates of your workspaces, newest first (platform admins: every workspace's)."""
    page = await jobs.list_templates(
        session, actor, workspace_id=workspace_id, limit=paging.limit, cursor=paging.cursor
    )
    return Page(items=[TemplateOut.from_view(v) for v in page.items], next_cursor=page.next_cursor)


@templates_router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def create_template(body: TemplateCreate, actor: CurrentActor, session: WriteSession) -> TemplateOut:
    view = await jobs.create_template(
        session, actor, name=body.name, spec=body.spec, workspace_id=body.workspace_id, description=body.description
    )
    return TemplateOut.from_view(view)


@templates_router.get("/{template_id}", openapi_extra=access(Access.USER))
async def get_template(template_id: Id, actor: CurrentActor, session: ReadSession) -> TemplateOut:
    return TemplateOut.from_view(await jobs.get_template(session, actor, template_id))


@templates_router.patch("/{template_id}", openapi_extra=access(Access.USER))
async def update_template(
    template_id: Id, body: TemplateUpdate, actor: CurrentActor, session: WriteSession
) -> TemplateOut:
    """Change a template (its author or the workspace's admins); the spec is checked again."""
    view = await jobs.update_template(session, actor, template_id, **body.model_dump(exclude_unset=True))
    return TemplateOut.from_view(view)


@templates_router.delete("/{template_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_template(template_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    await jobs.delete_template(session, actor, template_id)


@templates_router.post("/{template_id}/submit", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def submit_template(template_id: Id, body: TemplateSubmit, actor: CurrentActor, session: WriteSession) -> JobOut:
    """Submit a job from the template, with overrides."""
    return JobOut.from_view(await jobs.submit_template(session, actor, template_id, body.overrides))
