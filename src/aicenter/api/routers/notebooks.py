"""Notebooks (debug environments): create, list, get, stop, start, save, delete, train-from-here.

A notebook is a job: its logs, replicas, metrics and force-stop are the job's (``/api/v1/jobs/{id}/...``).
JupyterLab itself is served under ``/notebooks/{id}/`` (``notebook_proxy.py``), to its owner only.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import APIRouter, Query, Request, status

from aicenter.api.access import Access, access
from aicenter.api.deps import Ctx, CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ADMISSION_RESPONSES, Page
from aicenter.api.schemas.notebooks import (
    NotebookCreate,
    NotebookDetail,
    NotebookOut,
    NotebookSave,
    NotebookUpdate,
    SavedOut,
    SshAccessOut,
    TrainSpecOut,
)
from aicenter.config import Settings
from aicenter.core.errors import Unavailable
from aicenter.core.ssh import KNOWN_HOSTS_FILE, known_hosts_lines, ssh_config
from aicenter.services import notebooks

router = APIRouter(prefix="/api/v1/notebooks", tags=["notebooks"], responses=ADMISSION_RESPONSES)


def _forget(request: Request, job_id: int) -> None:
    """This process's proxy drops its cached address at once (others within their cache time, ~2 s)."""
    gateway = getattr(request.app.state, "notebook_gateway", None)
    if gateway is not None:
        gateway.forget(job_id)


async def _one(ctx: Ctx, actor: CurrentActor, session: ReadSession | WriteSession, notebook_id: int) -> NotebookDetail:
    default_idle_s = ctx.settings.notebook_idle_timeout_s
    view = await notebooks.get_notebook(session, actor, notebook_id, default_idle_s=default_idle_s)
    return NotebookDetail.from_view(view)


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def create_notebook(body: NotebookCreate, ctx: Ctx, actor: CurrentActor, session: WriteSession) -> NotebookDetail:
    """Create a notebook and queue it: JupyterLab with the image's Python, the algorithm checked out writable
    into its work dir, datasets read-only. Refused (4xx naming the field) like a job that could never run."""
    notebook_id = await notebooks.create_notebook(session, actor, body.spec, workspace_id=body.workspace_id)
    return await _one(ctx, actor, session, notebook_id)


@router.get("", openapi_extra=access(Access.USER))
async def list_notebooks(
    ctx: Ctx,
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    workspace_id: Id | None = None,
    status_: Annotated[
        str | None, Query(alias="status", description="A status, or several separated by commas.")
    ] = None,
    user: Annotated[str | None, Query(description="A user name.")] = None,
    name: Annotated[str | None, Query(description="Only notebooks of this name.")] = None,
) -> Page[NotebookOut]:
    """Notebooks of your workspaces, newest first (platform admins: every workspace's)."""
    page = await notebooks.list_notebooks(
        session,
        actor,
        default_idle_s=ctx.settings.notebook_idle_timeout_s,
        workspace_id=workspace_id,
        status=status_,
        user=user,
        name=name,
        limit=paging.limit,
        cursor=paging.cursor,
    )
    return Page(items=[NotebookOut.from_view(v) for v in page.items], next_cursor=page.next_cursor)


@router.get("/{notebook_id}", openapi_extra=access(Access.USER))
async def get_notebook(notebook_id: Id, ctx: Ctx, actor: CurrentActor, session: ReadSession) -> NotebookDetail:
    """The notebook with its idle state, replicas and status events."""
    return await _one(ctx, actor, session, notebook_id)


@router.patch("/{notebook_id}", openapi_extra=access(Access.USER))
async def update_notebook(
    notebook_id: Id, body: NotebookUpdate, ctx: Ctx, actor: CurrentActor, session: WriteSession
) -> NotebookDetail:
    """Change its idle timeout (its owner and the workspace's admins)."""
    await notebooks.set_idle_timeout(session, actor, notebook_id, body.idle_timeout_s)
    return await _one(ctx, actor, session, notebook_id)


@router.post("/{notebook_id}/stop", openapi_extra=access(Access.USER))
async def stop_notebook(
    notebook_id: Id, request: Request, ctx: Ctx, actor: CurrentActor, session: WriteSession
) -> NotebookDetail:
    """Stop it (its owner or a workspace admin): its resources are released, its work dir is kept."""
    await notebooks.stop_notebook(session, actor, notebook_id)
    _forget(request, notebook_id)
    return await _one(ctx, actor, session, notebook_id)


@router.post("/{notebook_id}/start", openapi_extra=access(Access.USER))
async def start_notebook(
    notebook_id: Id, request: Request, ctx: Ctx, actor: CurrentActor, session: WriteSession
) -> NotebookDetail:
    """Start a stopped (or failed) notebook again (its owner): rescheduled, with the same work dir."""
    await notebooks.start_notebook(session, actor, notebook_id)
    _forget(request, notebook_id)
    return await _one(ctx, actor, session, notebook_id)


@router.post("/{notebook_id}/save", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.USER))
async def save_notebook(notebook_id: Id, body: NotebookSave, ctx: Ctx, actor: CurrentActor) -> SavedOut:
    """Save the running notebook's work dir as a new version of an algorithm (its owner)."""
    saved = await notebooks.save_notebook(
        ctx.db,
        ctx.store,
        actor,
        notebook_id,
        jobs_path=ctx.settings.jobs_path,
        algorithm=body.algorithm,
        description=body.description,
    )
    return SavedOut(version_id=saved.version.id, reference=saved.reference, skipped_links=saved.skipped_links)


@router.get("/{notebook_id}/train-spec", openapi_extra=access(Access.USER))
async def train_spec(notebook_id: Id, actor: CurrentActor, session: ReadSession) -> TrainSpecOut:
    """A training job spec prefilled from the notebook (its latest saved version, image, datasets, resources)."""
    return TrainSpecOut(spec=await notebooks.train_spec(session, actor, notebook_id))


@router.get("/{notebook_id}/ssh", openapi_extra=access(Access.USER))
async def ssh_access(
    notebook_id: Id, request: Request, ctx: Ctx, actor: CurrentActor, session: ReadSession
) -> SshAccessOut:
    """How to reach the notebook with ssh, sftp, VS Code or PyCharm (its owner): the gateway, the ProxyJump config
    and the host keys to trust. Register a public key first (POST /api/v1/ssh-keys)."""
    gateway = getattr(request.app.state, "ssh_gateway", None)
    if gateway is None:
        raise Unavailable("this server runs no SSH gateway (AICENTER_SSH_PORT=-1, or its port was taken: see its log)")
    notebook_key = await notebooks.notebook_host_key(session, actor, notebook_id, ctx.settings.jobs_path)
    host = ssh_public_host(ctx.settings)
    alias = notebooks.ssh_host_alias(notebook_id)
    return SshAccessOut(
        user=actor.username,
        gateway_host=host,
        gateway_port=gateway.port,
        host_alias=alias,
        known_hosts=known_hosts_lines(
            gateway_host=host,
            gateway_port=gateway.port,
            gateway_key=gateway.host_public_key,
            alias=alias,
            notebook_key=notebook_key,
        ),
        config=ssh_config(
            alias=alias,
            gateway_host=host,
            gateway_port=gateway.port,
            user=actor.username,
            known_hosts_file=KNOWN_HOSTS_FILE,
        ),
    )


def ssh_public_host(settings: Settings) -> str:
    """The host name users' SSH clients connect to: configured, else the public URL's, else where it listens."""
    if settings.ssh_public_host:
        return settings.ssh_public_host
    if settings.public_url and (name := urlsplit(settings.public_url).hostname):
        return name
    host = settings.ssh_host or settings.host
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104 - compared, never bound


@router.delete("/{notebook_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.USER))
async def delete_notebook(notebook_id: Id, ctx: Ctx, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a stopped notebook with its work dir (409 while it runs; save it first)."""
    await notebooks.delete_notebook(session, actor, notebook_id, ctx.settings.jobs_path)
