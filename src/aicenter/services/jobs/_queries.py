"""Reading jobs: lists with filters, one job with its replicas and events, and where a replica's logs are.

Who sees a job: the members of its workspace, and platform admins (every job, its events, replicas, logs and
monitoring fields: logs are job output, not catalog content). Anyone else reads it as missing.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from aicenter.core.errors import Conflict, NotFound, Unavailable, ValidationFailed
from aicenter.core.jobs import JobKind, JobStatus, ReplicaStatus
from aicenter.db.models import Job, JobEvent, Membership, Replica, User
from aicenter.db.pagination import Page, paginate
from aicenter.executors.base import Executor, ReplicaHandle
from aicenter.executors.local import LocalExecutor
from aicenter.services.access import get_visible_workspace, require_user_data_access
from aicenter.services.context import Actor
from aicenter.services.jobs._views import JobView, job_views


async def load_job(session: AsyncSession, actor: Actor, job_id: int, *, for_update: bool = False) -> Job:
    """The job, if the actor is a member of its workspace or a platform admin; otherwise NotFound."""
    job = await session.get(Job, job_id, with_for_update=for_update)
    if job is None or (
        not actor.is_platform_admin
        and await session.scalar(
            select(Membership.role).where(
                Membership.workspace_id == job.workspace_id, Membership.user_id == actor.user_id
            )
        )
        is None
    ):
        raise NotFound(f"job {job_id} not found")
    return job


def _status(value: str) -> JobStatus:
    try:
        return JobStatus(value)
    except ValueError:
        names = ", ".join(s.value for s in JobStatus)
        raise ValidationFailed(f'"{value}" is not a job status ({names})', field="status") from None


def _kind(value: str) -> JobKind:
    try:
        return JobKind(value)
    except ValueError:
        names = ", ".join(k.value for k in JobKind)
        raise ValidationFailed(f'"{value}" is not a job kind ({names})', field="kind") from None


async def list_jobs(
    session: AsyncSession,
    actor: Actor,
    *,
    workspace_id: int | None = None,
    status: str | None = None,
    user: str | None = None,
    kind: str | None = None,
    name: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[JobView]:
    """Jobs newest first: of the actor's workspaces (platform admins: of every workspace).

    Args:
        workspace_id: Only this workspace's (the actor must see it; otherwise NotFound).
        status: Only jobs in this status; several may be given separated by commas (``queued,running``).
        user: Only jobs of the user with this name.
        kind: Only jobs of this kind (``train``, ``notebook``, ``trial``).
        name: Only jobs of this name (names repeat: the CLI takes the newest as "the job named X").
    """
    stmt = select(Job)
    if workspace_id is not None:
        await get_visible_workspace(session, actor, workspace_id)
        stmt = stmt.where(Job.workspace_id == workspace_id)
    elif not actor.is_platform_admin:
        stmt = stmt.where(
            Job.workspace_id.in_(select(Membership.workspace_id).where(Membership.user_id == actor.user_id))
        )
    if status:
        statuses = [_status(s.strip()).value for s in status.split(",") if s.strip()]
        stmt = stmt.where(Job.status.in_(statuses))
    if user:
        stmt = stmt.where(Job.user_id.in_(select(User.id).where(User.username == user)))
    if kind:
        stmt = stmt.where(Job.kind == _kind(kind).value)
    if name:
        stmt = stmt.where(Job.name == name)
    page = await paginate(session, stmt, Job.id, limit=limit, cursor=cursor, descending=True)
    return Page(await job_views(session, page.items), page.next_cursor)


async def _replicas(session: AsyncSession, job_id: int) -> list[Replica]:
    stmt = select(Replica).where(Replica.job_id == job_id).order_by(Replica.attempt, Replica.id)
    return list((await session.scalars(stmt)).all())


async def _events(session: AsyncSession, job_id: int) -> list[JobEvent]:
    stmt = select(JobEvent).where(JobEvent.job_id == job_id).order_by(JobEvent.at, JobEvent.id)
    return list((await session.scalars(stmt)).all())


async def get_job(session: AsyncSession, actor: Actor, job_id: int) -> JobView:
    """The job with every replica attempt (rank order within an attempt) and its events (oldest first)."""
    job = await load_job(session, actor, job_id)
    view = (await job_views(session, [job]))[0]
    view.replicas.extend(await _replicas(session, job.id))
    view.events.extend(await _events(session, job.id))
    return view


async def list_events(session: AsyncSession, actor: Actor, job_id: int) -> list[JobEvent]:
    """The job's status changes, oldest first."""
    job = await load_job(session, actor, job_id)
    return await _events(session, job.id)


async def list_replicas(session: AsyncSession, actor: Actor, job_id: int) -> list[Replica]:
    """Every replica attempt of the job: by attempt, then rank order."""
    job = await load_job(session, actor, job_id)
    return await _replicas(session, job.id)


# How often a followed log looks at the job again while there is nothing to stream: a replica not launched yet,
# or one that ended while its job may still restart it. One small read per follower per interval.
_FOLLOW_WAIT_S = 0.5

Reload = Callable[[], Awaitable["LogTarget | None"]]


@dataclass(frozen=True)
class LogTarget:
    """One replica attempt whose output can be read: where, and whether more can still come.

    ``finished`` is True when nothing more can come: the attempt has ended and, when the caller asked for the
    latest attempt (``latest``), no next attempt may follow (the job has ended, or the replica succeeded while
    its job runs on).
    ``reload`` reads the target again in a new session, for a follower that outlives the request's session.
    """

    job_id: int
    task: str
    replica: int
    attempt: int
    handle: ReplicaHandle
    finished: bool
    latest: bool = False
    reload: Reload | None = field(default=None, compare=False, repr=False)


async def log_target(
    session: AsyncSession,
    actor: Actor,
    job_id: int,
    task: str | None = None,
    replica: int | None = None,
    attempt: int | None = None,
) -> LogTarget:
    """The replica attempt whose logs to read: ``task`` (default: the job's first task), ``replica`` (default
    0), ``attempt`` (default: the latest launched one, followed across restarts by ``read_logs``).

    Raises:
        NotFound: No such job (for this actor), task, replica or attempt; ``details['field']`` says which.
        Forbidden: A platform admin outside the job's workspace, which does not let admins read its logs.
        Conflict: The attempt was never launched, so it has no output.
    """
    job = await load_job(session, actor, job_id)
    await require_user_data_access(session, actor, job.workspace_id, "job logs")
    tasks = [t.get("name", "worker") for t in job.spec.get("tasks", [])]
    task = task or (tasks[0] if tasks else "worker")
    if task not in tasks:
        raise NotFound(f'job {job.id} has no task "{task}" (its tasks: {", ".join(tasks)})', details={"field": "task"})
    index = replica or 0
    stmt = select(Replica).where(Replica.job_id == job.id, Replica.task == task, Replica.index == index)
    if attempt is not None:
        stmt = stmt.where(Replica.attempt == attempt)
    # Attempts are few (one per restart). The handle is filtered here, not in SQL: a JSON column's "no value"
    # may be SQL NULL or JSON null depending on how the row was written.
    rows = list((await session.scalars(stmt.order_by(Replica.attempt.desc()))).all())
    if not rows:
        what = f"attempt {attempt} of replica {task}-{index}" if attempt is not None else f"replica {task}-{index}"
        field_name = "attempt" if attempt is not None else "replica"
        raise NotFound(f"job {job.id} has no {what}", details={"field": field_name})
    launched = [(r, r.handle) for r in rows if r.handle]
    if not launched:
        raise Conflict(f"replica {task}-{index} of job {job.id} has not been launched; no logs so far")
    row, handle = launched[0]
    finished = row.finished_at is not None or ReplicaStatus(row.status).is_finished()
    latest = attempt is None
    if latest and finished:
        finished = not _next_attempt_may_come(job, row)
    return LogTarget(
        job.id,
        task,
        index,
        row.attempt,
        ReplicaHandle.from_dict(handle),
        finished,
        latest,
        _reloader(session, actor, job.id, task, index, attempt),
    )


def _next_attempt_may_come(job: Job, row: Replica) -> bool:
    """Whether the job may still run an attempt after ``row``'s (which has ended): it is already restarting or
    queued again, or the replica failed and the reconciler has not decided yet between a restart and the end."""
    status = JobStatus(job.status)
    if status.is_finished():
        return False
    if job.restart_count > row.attempt or status not in (JobStatus.STARTING, JobStatus.RUNNING):
        return True
    return row.status != ReplicaStatus.SUCCEEDED.value  # a replica that succeeded is not restarted by itself


def _reloader(
    session: AsyncSession, actor: Actor, job_id: int, task: str, index: int, attempt: int | None
) -> Reload | None:
    """Read the same target again later, in a session of its own on the same engine: the request's session is
    closed long before a followed log ends. ``None`` when the job (or the actor's access to it) is gone."""
    if session.bind is None:
        return None
    sessions = async_sessionmaker(session.bind, expire_on_commit=False)

    async def reload() -> LogTarget | None:
        async with sessions() as fresh:
            try:
                return await log_target(fresh, actor, job_id, task, index, attempt)
            except NotFound:
                return None

    return reload


def read_logs(
    target: LogTarget,
    *,
    since: int = 0,
    follow: bool = False,
    root: Path | None = None,
    executors: Mapping[str, Executor] | None = None,
) -> AsyncIterator[bytes]:
    """The replica's timestamped output from byte ``since``; with ``follow``, until nothing more can come.

    Following waits for a replica that is being launched (its handle may be recorded before its launcher runs,
    and its log may not exist yet) and, for the latest attempt, goes on with the next attempt's log from its
    start when the job restarts, until the job ends. Call it outside any database session: following can last
    as long as the job.

    Args:
        target: The replica (``log_target``).
        since: The byte offset to start at.
        follow: Keep streaming until the replica (or, for the latest attempt, the job) ends.
        root: The jobs path, for run dirs stored relative to it (local replicas read without ``executors``).
        executors: This process's executors by name; a replica's logs are read through the one that runs it.

    Raises:
        Unavailable: The replica runs on an executor whose logs this server cannot read.
    """
    executor = _log_reader(target.handle, root, executors)
    if executor is None:  # checked now, not at the first read: the caller answers 503
        raise Unavailable(f'logs of "{target.handle.executor}" replicas cannot be read by this server')
    return _stream(target, since, follow, root, executors)


def _log_reader(handle: ReplicaHandle, root: Path | None, executors: Mapping[str, Executor] | None) -> Executor | None:
    """The executor that reads ``handle``'s logs: this process's, else a local one for local replicas (their
    logs are files on this host)."""
    if executors is not None and handle.executor in executors:
        return executors[handle.executor]
    if handle.executor == "local":
        return LocalExecutor(root=root, node_name=handle.node)
    return None


async def _stream(
    target: LogTarget, offset: int, follow: bool, root: Path | None, executors: Mapping[str, Executor] | None
) -> AsyncIterator[bytes]:
    while True:
        executor = _log_reader(target.handle, root, executors)
        if executor is None:
            return
        if target.handle.pid > 0:  # pid 0: the launch is only an intent so far; there is nothing to read
            # Returns when the launcher is gone, with everything it wrote read.
            async for chunk in executor.logs(target.handle, offset, follow=follow and not target.finished):
                offset += len(chunk)
                yield chunk
        if not follow or target.finished or target.reload is None:
            return
        fresh = await target.reload()
        if fresh is None:
            return
        if fresh.attempt != target.attempt:
            offset = 0  # the job restarted: the next attempt has a log of its own
        elif fresh.handle == target.handle and not fresh.finished:
            await asyncio.sleep(_FOLLOW_WAIT_S)  # not launched yet, or ended and waiting for the reconciler
        target = fresh
