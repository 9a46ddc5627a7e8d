"""Reading notebooks: one, or a page of them, through the jobs service's queries (a notebook is a job)."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.jobs import JobKind
from aicenter.db.pagination import Page
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.notebooks._views import NotebookView, load_notebook, notebook_views

__all__ = ["get_notebook", "list_notebooks"]


async def get_notebook(session: AsyncSession, actor: Actor, job_id: int, *, default_idle_s: int) -> NotebookView:
    """One notebook with its replicas and events (members of its workspace, platform admins)."""
    await load_notebook(session, actor, job_id)
    view = await jobs.get_job(session, actor, job_id)
    return (await notebook_views(session, actor, [view], default_idle_s=default_idle_s))[0]


async def list_notebooks(
    session: AsyncSession,
    actor: Actor,
    *,
    default_idle_s: int,
    workspace_id: int | None = None,
    status: str | None = None,
    user: str | None = None,
    name: str | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> Page[NotebookView]:
    """Notebooks the actor sees, newest first, filtered like jobs."""
    page = await jobs.list_jobs(
        session,
        actor,
        workspace_id=workspace_id,
        status=status,
        user=user,
        kind=JobKind.NOTEBOOK.value,
        name=name,
        cursor=cursor,
        limit=limit,
    )
    items = await notebook_views(session, actor, page.items, default_idle_s=default_idle_s)
    return Page(items=items, next_cursor=page.next_cursor)
