"""What the jobs service returns: ORM rows with the names the API shows beside them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models import Job, JobEvent, JobTemplate, Pool, Replica, User, Workspace


@dataclass(frozen=True)
class JobView:
    """A job with its workspace, user and pool names; ``replicas`` and ``events`` are filled by ``get_job``
    (every attempt, in rank order then attempt; events oldest first) and left empty in lists."""

    job: Job
    workspace_name: str
    username: str | None
    pool_name: str | None
    replicas: list[Replica] = field(default_factory=list)
    events: list[JobEvent] = field(default_factory=list)


@dataclass(frozen=True)
class TemplateView:
    template: JobTemplate
    workspace_name: str
    username: str | None


async def _names(
    session: AsyncSession, model: type[Workspace] | type[User] | type[Pool], ids: set[int]
) -> dict[int, str]:
    if not ids:
        return {}
    name = model.username if model is User else model.name  # type: ignore[union-attr]
    rows = await session.execute(select(model.id, name).where(model.id.in_(ids)))
    return {row[0]: row[1] for row in rows}


async def job_views(session: AsyncSession, jobs: Sequence[Job]) -> list[JobView]:
    """Views of ``jobs`` with their names, in three queries whatever the page size."""
    workspaces = await _names(session, Workspace, {j.workspace_id for j in jobs})
    users = await _names(session, User, {j.user_id for j in jobs if j.user_id is not None})
    pools = await _names(session, Pool, {j.pool_id for j in jobs if j.pool_id is not None})
    return [
        JobView(
            job=j,
            workspace_name=workspaces.get(j.workspace_id, ""),
            username=users.get(j.user_id) if j.user_id is not None else None,
            pool_name=pools.get(j.pool_id) if j.pool_id is not None else None,
        )
        for j in jobs
    ]


async def template_views(session: AsyncSession, templates: Sequence[JobTemplate]) -> list[TemplateView]:
    workspaces = await _names(session, Workspace, {t.workspace_id for t in templates})
    users = await _names(session, User, {t.user_id for t in templates if t.user_id is not None})
    return [
        TemplateView(t, workspaces.get(t.workspace_id, ""), users.get(t.user_id) if t.user_id is not None else None)
        for t in templates
    ]
