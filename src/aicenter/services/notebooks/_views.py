"""What the notebooks service returns: the job's view with the notebook's own row and its addresses."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import NotFound
from aicenter.core.jobs import JobKind
from aicenter.db.models import Job, Notebook, Workspace
from aicenter.services import jobs
from aicenter.services.context import Actor

__all__ = ["NotebookView", "load_notebook", "notebook_views", "ssh_host_alias"]


def ssh_host_alias(job_id: int) -> str:
    """The host name a client asks the SSH gateway for (ProxyJump target): ``notebook-<id>``."""
    return f"notebook-{int(job_id)}"


@dataclass(frozen=True)
class NotebookView:
    """A notebook: its job (status, spec, replicas and events when loaded by ``get``) and its own row.

    Attributes:
        job: The job's view.
        notebook: The notebook's row (idle state, saves).
        idle_timeout_s: The timeout in force: the notebook's, else its workspace's, else the platform's; 0: off.
        is_owner: Whether the actor owns it (only the owner opens it: JupyterLab, terminal, SSH).
    """

    job: jobs.JobView
    notebook: Notebook
    idle_timeout_s: int
    is_owner: bool

    @property
    def id(self) -> int:
        return self.job.job.id

    @property
    def lab_path(self) -> str:
        return f"{jobs.notebook_base_url(self.id)}lab"

    @property
    def ssh_host(self) -> str:
        return ssh_host_alias(self.id)


async def load_notebook(session: AsyncSession, actor: Actor, job_id: int, *, for_update: bool = False) -> Job:
    """The notebook's job, if the actor may see it (a member of its workspace, a platform admin); else NotFound."""
    try:
        job = await jobs.load_job(session, actor, job_id, for_update=for_update)
    except NotFound:
        raise NotFound(f"notebook {job_id} not found") from None
    if job.kind != JobKind.NOTEBOOK.value:
        raise NotFound(f"notebook {job_id} not found (job {job_id} is a {job.kind} job)")
    return job


async def notebook_views(
    session: AsyncSession, actor: Actor, views: Sequence[jobs.JobView], *, default_idle_s: int
) -> list[NotebookView]:
    """Views of notebook jobs with their rows and timeouts, in two queries whatever the page size."""

    ids = [v.job.id for v in views]
    rows = {n.job_id: n for n in (await session.scalars(select(Notebook).where(Notebook.job_id.in_(ids)))).all()}
    ws_ids = {v.job.workspace_id for v in views}
    found = await session.execute(
        select(Workspace.id, Workspace.notebook_idle_timeout_s).where(Workspace.id.in_(ws_ids))
    )
    defaults: dict[int, int | None] = {row[0]: row[1] for row in found.all()}
    out = []
    for v in views:
        row = rows.get(v.job.id) or Notebook(job_id=v.job.id)
        timeout = row.idle_timeout_s
        if timeout is None:
            timeout = defaults.get(v.job.workspace_id)
        if timeout is None:
            timeout = default_idle_s
        out.append(NotebookView(v, row, timeout, v.job.user_id is not None and v.job.user_id == actor.user_id))
    return out
