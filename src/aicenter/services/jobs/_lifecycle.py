"""The one entry point for every status change of a job: ``transition``.

It checks the change against the table in core (``core.jobs.transition``), writes the status, the time columns
and the failure fields, and inserts the JobEvent, all in the caller's transaction. The status write is guarded
by the status the caller read (``UPDATE ... WHERE status = <from>``): when another transaction (a replica's
reconciler, a user's stop) changed the job meanwhile, the call fails with ``invalid_transition`` instead of
overwriting a change it never saw. Never bypass it, not even in tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm.attributes import set_committed_value

from aicenter.core import jobs as core
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, Forbidden, InvalidTransition
from aicenter.core.jobs import FailureReason, JobKind, JobStatus, ReplicaStatus
from aicenter.core.jobs.reconcile import ReplicaChange
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import Job, JobEvent, Replica
from aicenter.events import notify_after_commit
from aicenter.services import audit, billing
from aicenter.services.access import require_platform_admin, workspace_role
from aicenter.services.context import Actor
from aicenter.services.jobs._queries import load_job
from aicenter.services.jobs._replicas import change_replica
from aicenter.services.jobs._tokens import revoke_job_tokens
from aicenter.services.jobs._views import JobView, job_views

SYSTEM = "system"
"""The actor name of events caused by the platform (controllers, the scheduler)."""


def _actor_fields(actor: Actor | None) -> tuple[int | None, str]:
    # Actor.system() has user_id 0, which is not a user: its events carry no id, only its name.
    if actor is None:
        return None, SYSTEM
    return (actor.user_id or None), actor.username


def _event(job: Job, change: core.StatusChange) -> JobEvent:
    return JobEvent(
        job_id=job.id,
        at=change.at,
        actor_id=change.actor_id,
        actor_name=change.actor_name[:64],
        from_status=change.from_status.value if change.from_status is not None else None,
        to_status=change.to_status.value,
        reason=(change.reason or None) and change.reason[:64],
        message=change.message,
    )


async def record_created(session: AsyncSession, job: Job, *, actor: Actor | None, message: str = "") -> JobEvent:
    """Write the event that creates ``job`` (from nothing to its initial status, ``pending`` or ``queued``).

    ``job`` must be flushed (it needs its id).
    """
    actor_id, actor_name = _actor_fields(actor)
    change = core.transition(
        None,
        JobStatus(job.status),
        at=utcnow(),
        actor_id=actor_id,
        actor_name=actor_name,
        reason="submitted",
        message=message,
    )
    event = _event(job, change)
    session.add(event)
    await session.flush()
    return event


async def transition(
    session: AsyncSession,
    job: Job,
    to: JobStatus,
    *,
    actor: Actor | None,
    reason: str = "",
    message: str = "",
    failure_reason: FailureReason | None = None,
    exit_code: int | None = None,
) -> JobEvent | None:
    """Change ``job``'s status to ``to`` and record the event, in the caller's transaction.

    A call with the job's current status changes nothing and returns ``None``: controllers repeat their last
    step after a crash or a lost lease, and that repetition must be harmless (no event is written twice). Every
    other change is checked against ``core.jobs.TRANSITIONS``.

    What it writes besides ``status``: ``scheduled_at`` on entering scheduled, ``started_at`` on entering
    running (both the CURRENT attempt's: a restarted job shows when its latest attempt started; the events keep
    the history), ``finished_at`` on entering a finished status; ``failure_reason`` and ``exit_code`` when
    given; ``message`` when given (the job's latest word for people); ``pending_reason`` is cleared when the job
    leaves ``queued`` (it is the scheduler's account of a waiting job only). Entering a finished status also
    revokes the job's API tokens (``_tokens.py``).

    Args:
        session: The caller's write session; nothing is committed here.
        job: The job row, as the caller read it in this session.
        to: The new status.
        actor: Who causes it; ``None`` for the platform (the event's actor is ``system``).
        reason: A short word for the event (``scheduled``, ``stopped``, a failure reason); defaults to the
            failure reason when one is given.
        message: A sentence for people.
        failure_reason: Why the job ended (or is restarting); stored on the job.
        exit_code: The command's exit code when it decided the outcome; stored on the job.

    Returns:
        The event written, or ``None`` when ``to`` is already the job's status.

    Raises:
        InvalidTransition: The table does not allow the change, or another transaction changed the job's status
            since the caller read it (``details['current']`` then holds the status found).
    """
    current = JobStatus(job.status)
    if to == current:
        return None
    actor_id, actor_name = _actor_fields(actor)
    now = utcnow()
    change = core.transition(
        current,
        to,
        at=now,
        actor_id=actor_id,
        actor_name=actor_name,
        reason=reason or (failure_reason.value if failure_reason is not None else None),
        message=message,
        resumable=job.kind == JobKind.NOTEBOOK.value,
    )
    values: dict[str, Any] = {"status": to.value, "updated_at": now}
    values.update(_time_columns(to, now))
    if current == JobStatus.QUEUED:
        values["pending_reason"] = ""
    if failure_reason is not None:
        values["failure_reason"] = failure_reason.value
    if exit_code is not None:
        values["exit_code"] = exit_code
    if message:
        values["message"] = message
    # Flush the caller's own pending changes first, so the guarded UPDATE sees (and keeps) them.
    await session.flush()
    result = await session.execute(
        update(Job)
        .where(Job.id == job.id, Job.status == current.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        await session.refresh(job, ["status"])
        raise InvalidTransition(
            f'job {job.id} changed to "{job.status}" meanwhile; it was not changed to "{to.value}"',
            details={"from": current.value, "to": to.value, "current": job.status},
        )
    for key, value in values.items():
        set_committed_value(job, key, value)
    if to.is_finished():  # the replicas' API token ends with the job
        await revoke_job_tokens(session, job)
    event = _event(job, change)
    session.add(event)
    await session.flush()
    return event


async def transition_many(
    session: AsyncSession,
    jobs: Sequence[Job],
    to: JobStatus,
    *,
    actor: Actor | None,
    reason: str = "",
    message: str = "",
) -> list[JobEvent]:
    """``transition`` of many jobs that all have the same status, in two statements instead of two per job.

    The same guarantees: the change is checked against the table, the status write is guarded by the status
    read (one ``UPDATE ... WHERE id IN (...) AND status = <from>``), and the events go in as one multi-row
    insert. The reconciler starts a claimed batch of scheduled jobs with it: per-job transitions held SQLite's
    write lock ~9 statements per job, 200 of them serialized behind each other.

    All or nothing: when any of the jobs changed meanwhile, nothing is written and ``InvalidTransition`` is
    raised (the caller's transaction is then rolled back). Jobs already in ``to`` are skipped, as in
    ``transition``. No failure fields and no finished status: those stay per job (they revoke tokens).

    Raises:
        InvalidTransition: The table does not allow the change, or a job's status changed since it was read.
        ValueError: The jobs do not share one status, or ``to`` is a finished status.
    """
    todo = [job for job in jobs if JobStatus(job.status) != to]
    if not todo:
        return []
    current = JobStatus(todo[0].status)
    if any(JobStatus(job.status) != current for job in todo) or to.is_finished():
        raise ValueError("transition_many: the jobs must share one status and not finish")
    actor_id, actor_name = _actor_fields(actor)
    now = utcnow()
    change = core.transition(
        current, to, at=now, actor_id=actor_id, actor_name=actor_name, reason=reason, message=message
    )
    values: dict[str, Any] = {"status": to.value, "updated_at": now}
    values.update(_time_columns(to, now))
    if current == JobStatus.QUEUED:
        values["pending_reason"] = ""
    if message:
        values["message"] = message
    await session.flush()  # the caller's pending changes first, as in ``transition``
    ids = [job.id for job in todo]
    result = await session.execute(
        update(Job)
        .where(Job.id.in_(ids), Job.status == current.value)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != len(ids):  # type: ignore[attr-defined]
        found = {row.id: row.status for row in await session.execute(select(Job.id, Job.status).where(Job.id.in_(ids)))}
        changed = {i: s for i, s in found.items() if s != to.value}
        raise InvalidTransition(
            f'jobs {sorted(changed)} changed meanwhile; none was changed to "{to.value}"',
            details={"from": current.value, "to": to.value, "current": {str(i): s for i, s in changed.items()}},
        )
    for job in todo:
        for key, value in values.items():
            set_committed_value(job, key, value)
    events = [_event(job, change) for job in todo]
    session.add_all(events)
    await session.flush()  # one multi-row INSERT (SQLAlchemy's insertmanyvalues)
    return events


def _time_columns(to: JobStatus, now: datetime) -> dict[str, datetime]:
    if to == JobStatus.SCHEDULED:
        return {"scheduled_at": now}
    if to == JobStatus.RUNNING:
        return {"started_at": now}
    if to.is_finished():
        return {"finished_at": now}
    return {}


# --- stop, force stop, delete --------------------------------------------------------------------------------

# Statuses in which no replica can have been launched: a stop ends the job at once. From scheduled on, a
# reconciler may be launching replicas right now (outside any transaction); it reads the stop request and
# stops what it launched, so the job is never marked stopped while a process of it still runs.
_NOT_LAUNCHED = frozenset({JobStatus.PENDING, JobStatus.QUEUED})


def _is_preemption(job: Job) -> bool:
    """Whether the job's stop request is the scheduler's preemption marker (no requester, reason preempted).

    A person's stop replaces it: otherwise the reconciler would carry out the preemption and requeue a job its
    owner asked to stop.
    """
    reason = core.stop_reason(job.stop_requested_at is not None, job.stop_requested_by, job.failure_reason)
    return reason is FailureReason.PREEMPTED


async def request_stop(session: AsyncSession, job: Job, actor: Actor, reason: FailureReason) -> JobEvent | None:
    """Record a stop request on ``job`` and end it at once if nothing of it was launched.

    Idempotent: asking again changes nothing, except that a force stop upgrades a user's request (the event
    then says who stopped it last) and any stop replaces a pending preemption (the job then ends ``stopped``
    instead of queueing again). A stop of a finished job raises ``invalid_transition``.
    """
    current = JobStatus(job.status)
    core.check_transition(current, JobStatus.STOPPED)
    now = utcnow()
    if job.stop_requested_at is None or reason == FailureReason.STOPPED_BY_ADMIN or _is_preemption(job):
        job.stop_requested_by = actor.user_id or None
        job.stop_requested_at = now
        job.failure_reason = reason.value
    notify_after_commit(session)  # the reconciler (or scheduler) of this process acts at once
    if current not in _NOT_LAUNCHED:
        await session.flush()
        return None
    who = "a platform admin" if reason == FailureReason.STOPPED_BY_ADMIN else actor.username
    event = await transition(
        session, job, JobStatus.STOPPED, actor=actor, failure_reason=reason, message=f"stopped by {who}"
    )
    # Replica rows planned but never launched end with the job; they hold no machine time (never started).
    for replica in (
        await session.scalars(
            select(Replica).where(Replica.job_id == job.id, Replica.status == ReplicaStatus.PENDING.value)
        )
    ).all():
        change_replica(replica, ReplicaChange(replica.id, ReplicaStatus.STOPPED, reason=reason), now=now)
    await session.flush()
    return event


async def _may_manage(session: AsyncSession, actor: Actor, job: Job) -> None:
    """The job's owner and the admins of its workspace may stop or delete it."""
    if job.user_id is not None and job.user_id == actor.user_id:
        return
    if await workspace_role(session, actor, job.workspace_id) == WorkspaceRole.WORKSPACE_ADMIN:
        return
    hint = " (platform admins: use force-stop)" if actor.is_platform_admin else ""
    raise Forbidden(f"only the owner of job {job.id} and the admins of its workspace can do this{hint}")


async def stop_job(session: AsyncSession, actor: Actor, job_id: int) -> JobView:
    """Ask for the job to stop (its owner or a workspace admin). A job not launched yet stops at once; a
    launched one is stopped by the reconciler, which reads the request (SIGTERM, a grace period, SIGKILL).

    Raises:
        NotFound: No such job for this actor.
        Forbidden: A member who neither owns the job nor administers its workspace.
        InvalidTransition: The job has finished.
    """
    job = await load_job(session, actor, job_id, for_update=True)
    await _may_manage(session, actor, job)
    await request_stop(session, job, actor, FailureReason.STOPPED)
    audit.record(session, actor, "job.stop", "job", job.id, workspace_id=job.workspace_id)
    return (await job_views(session, [job]))[0]


async def force_stop(session: AsyncSession, actor: Actor, job_id: int) -> JobView:
    """Stop any job (platform admins); it ends with reason ``stopped_by_admin``."""
    require_platform_admin(actor, "force-stopping jobs")
    job = await load_job(session, actor, job_id, for_update=True)
    await request_stop(session, job, actor, FailureReason.STOPPED_BY_ADMIN)
    audit.record(session, actor, "job.force_stop", "job", job.id, workspace_id=job.workspace_id)
    return (await job_views(session, [job]))[0]


async def delete_job(session: AsyncSession, actor: Actor, job_id: int) -> None:
    """Delete a finished job with its replicas and events (its owner, a workspace admin, a platform admin).

    Raises:
        Conflict: The job has not finished (stop it first).
    """
    job = await load_job(session, actor, job_id, for_update=True)
    if not actor.is_platform_admin:
        await _may_manage(session, actor, job)
    if not JobStatus(job.status).is_finished():
        raise Conflict(f"job {job.id} is {job.status}; stop it before deleting it", details={"status": job.status})
    # Its last minutes first: the copies' charges since the last pass would otherwise go with the replicas.
    try:
        await billing.meter_jobs(session, [job.id], utcnow())
    except billing.MeterRaced as exc:
        raise Conflict(
            f"job {job.id} is being charged by the billing meter right now; try deleting it again",
            details={"reason": "billing_meter_busy"},
        ) from exc
    audit.record(
        session,
        actor,
        "job.delete",
        "job",
        job.id,
        workspace_id=job.workspace_id,
        details={"name": job.name, "status": job.status},
    )
    await session.delete(job)
    await session.flush()


async def stop_for_arrears(session: AsyncSession, workspace_id: int) -> list[int]:
    """Stop every unfinished job and notebook of a workspace whose billing policy stops work in arrears (the
    billing controller); returns their ids. A stop request by nobody with reason ``arrears`` (as a preemption
    marker), so the jobs end ``stopped``/``arrears`` and are not retried; one already asked to stop keeps its
    request. Service replicas are left to their services (``services.serving.stop_for_arrears``)."""
    active = [s.value for s in core.ACTIVE_STATUSES]
    rows = (
        await session.scalars(
            select(Job)
            .where(Job.workspace_id == workspace_id, Job.status.in_(active), Job.kind != JobKind.SERVICE.value)
            .order_by(Job.id)
            .with_for_update()
        )
    ).all()
    actor = Actor.system("billing")
    for job in rows:
        if job.stop_requested_at is None or _is_preemption(job):
            await request_stop(session, job, actor, FailureReason.ARREARS)
    return [job.id for job in rows]
