"""Job templates: a saved, normalized job spec that members of its workspace submit with ``--set`` overrides.

A template is checked as a spec when saved (fields, framework rules), not resolved: its references are resolved
when it is submitted, as the submitting user sees them then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict, Forbidden, NotFound
from aicenter.core.names import check_name, check_text
from aicenter.core.roles import WorkspaceRole
from aicenter.db.models import JobTemplate, Membership
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, workspace_role
from aicenter.services.context import Actor
from aicenter.services.jobs._queries import load_job
from aicenter.services.jobs._submit import load_spec, resolve_workspace, submit_job
from aicenter.services.jobs._views import JobView, TemplateView, template_views


async def _view(session: AsyncSession, template: JobTemplate) -> TemplateView:
    return (await template_views(session, [template]))[0]


async def _check_unique(session: AsyncSession, workspace_id: int, name: str, template_id: int | None = None) -> None:
    existing = await session.scalar(
        select(JobTemplate.id).where(JobTemplate.workspace_id == workspace_id, JobTemplate.name == name)
    )
    if existing is not None and existing != template_id:
        raise Conflict(f'a template named "{name}" already exists in this workspace', details={"field": "name"})


async def _insert(session: AsyncSession, template: JobTemplate) -> None:
    # The unique index settles a race between two creators that both passed _check_unique; a savepoint keeps
    # the caller's transaction usable.
    try:
        async with session.begin_nested():
            session.add(template)
            await session.flush()
    except IntegrityError:
        raise Conflict(
            f'a template named "{template.name}" already exists in this workspace', details={"field": "name"}
        ) from None


async def create_template(
    session: AsyncSession,
    actor: Actor,
    *,
    name: str,
    spec: str | Mapping[str, Any],
    workspace_id: int | None = None,
    description: str = "",
) -> TemplateView:
    """Save a spec as a template of a workspace (``workspace_id``, else the spec's, else the actor's default).

    Raises:
        ValidationFailed: A bad name or description, or a spec that does not parse (fields named).
        NotFound: The workspace, or the actor is not a member of it.
        Conflict: The workspace has a template of that name.
    """
    check_name(name, "name")
    check_text(description, "description", 4096)
    parsed = load_spec(spec)
    workspace = await resolve_workspace(session, actor, parsed.workspace, workspace_id)
    await _check_unique(session, workspace.id, name)
    template = JobTemplate(
        workspace_id=workspace.id,
        user_id=actor.user_id or None,
        name=name,
        description=description,
        spec=parsed.normalized(),
    )
    await _insert(session, template)
    audit.record(session, actor, "job_template.create", "job_template", template.id, workspace_id=workspace.id)
    return await _view(session, template)


async def create_template_from_job(
    session: AsyncSession, actor: Actor, job_id: int, *, name: str, description: str = ""
) -> TemplateView:
    """Save a job's spec as a template of the job's workspace (members of it)."""
    job = await load_job(session, actor, job_id)
    return await create_template(
        session, actor, name=name, spec=job.spec, workspace_id=job.workspace_id, description=description
    )


async def _load(session: AsyncSession, actor: Actor, template_id: int) -> JobTemplate:
    """The template, if the actor is a member of its workspace or a platform admin; otherwise NotFound."""
    template = await session.get(JobTemplate, template_id)
    if template is None or (
        not actor.is_platform_admin and await workspace_role(session, actor, template.workspace_id) is None
    ):
        raise NotFound(f"template {template_id} not found")
    return template


async def _may_change(session: AsyncSession, actor: Actor, template: JobTemplate) -> None:
    if template.user_id is not None and template.user_id == actor.user_id:
        return
    if actor.is_platform_admin:
        return
    if await workspace_role(session, actor, template.workspace_id) != WorkspaceRole.WORKSPACE_ADMIN:
        raise Forbidden(f"only the author of template {template.name} and the admins of its workspace can change it")


async def list_templates(
    session: AsyncSession,
    actor: Actor,
    *,
    workspace_id: int | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[TemplateView]:
    """Templates of the actor's workspaces (platform admins: of every workspace), newest first."""
    stmt = select(JobTemplate)
    if workspace_id is not None:
        await get_visible_workspace(session, actor, workspace_id)
        stmt = stmt.where(JobTemplate.workspace_id == workspace_id)
    elif not actor.is_platform_admin:
        mine = select(Membership.workspace_id).where(Membership.user_id == actor.user_id)
        stmt = stmt.where(JobTemplate.workspace_id.in_(mine))
    page = await paginate(session, stmt, JobTemplate.id, limit=limit, cursor=cursor, descending=True)
    return Page(await template_views(session, page.items), page.next_cursor)


async def get_template(session: AsyncSession, actor: Actor, template_id: int) -> TemplateView:
    return await _view(session, await _load(session, actor, template_id))


async def update_template(
    session: AsyncSession,
    actor: Actor,
    template_id: int,
    *,
    name: str | None = None,
    description: str | None = None,
    spec: str | Mapping[str, Any] | None = None,
) -> TemplateView:
    """Change a template (its author, the workspace's admins, platform admins). The spec is checked again."""
    template = await _load(session, actor, template_id)
    await _may_change(session, actor, template)
    changed: list[str] = []
    if name is not None and name != template.name:
        check_name(name, "name")
        await _check_unique(session, template.workspace_id, name, template.id)
        template.name = name
        changed.append("name")
    if description is not None:
        check_text(description, "description", 4096)
        template.description = description
        changed.append("description")
    if spec is not None:
        template.spec = load_spec(spec).normalized()
        changed.append("spec")
    try:
        async with session.begin_nested():
            await session.flush()
    except IntegrityError:
        raise Conflict(
            f'a template named "{name}" already exists in this workspace', details={"field": "name"}
        ) from None
    audit.record(
        session,
        actor,
        "job_template.update",
        "job_template",
        template.id,
        workspace_id=template.workspace_id,
        details={"changed": changed},
    )
    return await _view(session, template)


async def delete_template(session: AsyncSession, actor: Actor, template_id: int) -> None:
    template = await _load(session, actor, template_id)
    await _may_change(session, actor, template)
    audit.record(
        session,
        actor,
        "job_template.delete",
        "job_template",
        template.id,
        workspace_id=template.workspace_id,
        details={"name": template.name},
    )
    await session.delete(template)
    await session.flush()


async def submit_template(
    session: AsyncSession, actor: Actor, template_id: int, overrides: Sequence[str] = ()
) -> JobView:
    """Submit a job from a template, with ``overrides``, in the template's workspace (members of it)."""
    template = await _load(session, actor, template_id)
    return await submit_job(
        session,
        actor,
        template.spec,
        overrides=overrides,
        workspace_id=template.workspace_id,
        template_id=template.id,
    )
