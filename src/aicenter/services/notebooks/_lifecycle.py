"""Creating, starting, stopping and deleting notebooks: the job's lifecycle, plus what a notebook adds.

Create submits the job (kind ``notebook``) through the jobs service, so its references, pool, quota and spec
are checked exactly as a training job's, and adds the notebook's row in the same transaction. Stop is the job's
stop (the work dir stays). Start queues the stopped (or failed) job again as its next attempt: new replica rows,
the same work dir. Delete removes the job, its row and its directory.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import AicenterError, Conflict, Forbidden, InvalidTransition
from aicenter.core.jobs import RESUMABLE, JobKind, JobStatus
from aicenter.core.jobs.notebooks import check_idle_timeout, parse_notebook_spec
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import CatalogVersion, Job, Notebook, Replica
from aicenter.events import notify_after_commit
from aicenter.services import audit, billing, jobs
from aicenter.services.access import workspace_role
from aicenter.services.context import Actor
from aicenter.services.notebooks._views import load_notebook

__all__ = [
    "create_notebook",
    "delete_notebook",
    "require_owner",
    "set_idle_timeout",
    "start_notebook",
    "stop_notebook",
]


def require_owner(actor: Actor, job: Job, what: str) -> None:
    """Only a notebook's owner opens, starts or saves it: it holds their work and runs as them. Platform and
    workspace admins may see, stop and delete it, never get inside it."""
    if job.user_id is None or job.user_id != actor.user_id:
        raise Forbidden(f"only the owner of notebook {job.id} can {what} it")


async def _check_name_free(session: AsyncSession, job: Job) -> None:
    """One notebook of a name per user and workspace: ``aicenter notebook ssh NAME`` must name one."""
    taken = await session.scalar(
        select(Job.id).where(
            Job.kind == JobKind.NOTEBOOK.value,
            Job.workspace_id == job.workspace_id,
            Job.user_id == job.user_id,
            Job.name == job.name,
            Job.id != job.id,
        )
    )
    if taken is not None:
        raise Conflict(
            f'you already have a notebook named "{job.name}" in this workspace (notebook {taken}); '
            "start it, or delete it first",
            details={"notebook_id": taken},
        )


async def create_notebook(
    session: AsyncSession, actor: Actor, source: str | Mapping[str, Any], *, workspace_id: int | None = None
) -> int:
    """Create a notebook and queue it; returns its id (its job's).

    Raises:
        ValidationFailed: A malformed request (``field`` names the problem), a spec outside the pools.
        NotFound: The workspace, or a version the actor cannot see.
        Conflict: A notebook of that name exists already; a version not ready.
        QuotaExceeded: Larger than the workspace's quota.
    """
    spec, job_spec = parse_notebook_spec(source)
    try:
        view = await jobs.submit_job(session, actor, job_spec.normalized(), workspace_id=workspace_id, notebook=True)
    except AicenterError as exc:
        raise _as_notebook_field(exc) from None
    job = view.job
    await _check_name_free(session, job)
    item_id = None
    if job.algorithm_version_id is not None:
        item_id = await session.scalar(
            select(CatalogVersion.item_id).where(CatalogVersion.id == job.algorithm_version_id)
        )
    session.add(Notebook(job_id=job.id, idle_timeout_s=spec.idle_timeout_s, algorithm_item_id=item_id))
    await session.flush()
    return job.id


def _as_notebook_field(exc: AicenterError) -> AicenterError:
    """The job's ``tasks[0].resources.x`` is the notebook's ``resources.x``: name the field its author wrote."""
    field = exc.details.get("field")
    if not isinstance(field, str) or not field.startswith(_TASK):
        return exc
    exc.details["field"] = field.removeprefix(_TASK)
    exc.message = exc.message.replace(field, exc.details["field"], 1)
    exc.args = (exc.message,)
    return exc


_TASK = "tasks[0]."


async def start_notebook(session: AsyncSession, actor: Actor, job_id: int) -> None:
    """Queue a stopped or failed notebook again: its next attempt, rescheduled, with the same work dir.

    Raises:
        NotFound: No such notebook for the actor.
        Forbidden: Not its owner.
        InvalidTransition: It is not stopped or failed (a second start of a running notebook).
    """
    job = await load_notebook(session, actor, job_id, for_update=True)
    require_owner(actor, job, "start")
    current = JobStatus(job.status)
    if current not in RESUMABLE:
        raise InvalidTransition(
            f"notebook {job.id} is {current.value}; only a stopped or failed notebook can be started",
            details={"from": current.value, "to": JobStatus.QUEUED.value},
        )
    await billing.admit(session, job.workspace_id)
    rows = (
        await session.scalars(select(Replica).where(Replica.job_id == job.id, Replica.attempt == job.restart_count))
    ).all()
    attempt = job.restart_count + 1
    for row in rows:
        session.add(jobs.next_attempt_row(row, attempt))
    job.restart_count = attempt
    job.stop_requested_by = None
    job.stop_requested_at = None
    job.failure_reason = None
    job.exit_code = None
    job.finished_at = None
    job.started_at = None
    job.scheduled_at = None
    await jobs.transition(session, job, JobStatus.QUEUED, actor=actor, reason="started", message="started again")
    notebook = await session.scalar(select(Notebook).where(Notebook.job_id == job.id))
    if notebook is not None:
        notebook.idle_since = notebook.cull_at = notebook.warned_at = None
    audit.record(session, actor, "notebook.start", "job", job.id, workspace_id=job.workspace_id)
    notify_after_commit(session)


async def set_idle_timeout(session: AsyncSession, actor: Actor, job_id: int, timeout_s: int | None) -> None:
    """Change a notebook's own idle timeout (its owner, or the admins of its workspace).

    Raises:
        ValidationFailed: Not 0, null, or 60 s..30 days.
    """
    check_idle_timeout(timeout_s, "idle_timeout_s")
    job = await load_notebook(session, actor, job_id)
    if (
        job.user_id != actor.user_id
        and await workspace_role(session, actor, job.workspace_id) != WorkspaceRole.WORKSPACE_ADMIN
    ):
        raise Forbidden(f"only the owner of notebook {job.id} and the admins of its workspace can change it")
    notebook = await session.scalar(select(Notebook).where(Notebook.job_id == job.id))
    if notebook is not None:
        notebook.idle_timeout_s = timeout_s
    audit.record(
        session,
        actor,
        "notebook.update",
        "job",
        job.id,
        workspace_id=job.workspace_id,
        details={"idle_timeout_s": timeout_s},
    )


async def stop_notebook(session: AsyncSession, actor: Actor, job_id: int) -> None:
    """Stop it (its owner or a workspace admin; platform admins force-stop): resources go, the work dir stays."""
    await load_notebook(session, actor, job_id)
    await jobs.stop_job(session, actor, job_id)


async def delete_notebook(session: AsyncSession, actor: Actor, job_id: int, jobs_path: Path) -> None:
    """Delete a stopped notebook: its job, row and directory (the work dir too: save it first).

    Raises:
        Conflict: It still runs (stop it first).
    """
    job = await load_notebook(session, actor, job_id)
    await jobs.delete_job(session, actor, job.id)
    await session.flush()
    jobs.remove_job_dir(jobs.job_dirs(jobs_path, job_id))
