"""Workspaces, their members and their quotas."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.tenancy import (
    MemberAdd,
    MemberOut,
    MemberUpdate,
    QuotaOut,
    QuotaSet,
    WorkspaceCreate,
    WorkspaceOut,
    WorkspaceUpdate,
)
from aicenter.db.models import Membership
from aicenter.services import members, quotas, tenancy

router = APIRouter(prefix="/api/v1", responses=ERROR_RESPONSES)


def _member(m: Membership) -> MemberOut:
    return MemberOut.model_validate(
        {
            "user_id": m.user_id,
            "username": m.user.username,
            "display_name": m.user.display_name,
            "role": m.role,
            "created_at": m.created_at,
        }
    )


def _quota(view: quotas.QuotaView) -> QuotaOut:
    q = view.quota
    return QuotaOut(
        id=q.id,
        workspace_id=q.workspace_id,
        pool_id=q.pool_id,
        pool_name=view.pool_name,
        guaranteed=q.guaranteed,
        maximum=q.maximum,
        used=view.used,
    )


@router.get("/workspaces", tags=["workspaces"], openapi_extra=access(Access.USER))
async def list_workspaces(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    name: Annotated[str | None, Query(max_length=64, description="Exact workspace name.")] = None,
) -> Page[WorkspaceOut]:
    """Your workspaces; every workspace for platform admins."""
    page = await tenancy.list_workspaces(session, actor, limit=paging.limit, cursor=paging.cursor, name=name)
    return Page(items=[WorkspaceOut.model_validate(w) for w in page.items], next_cursor=page.next_cursor)


@router.post(
    "/workspaces", status_code=status.HTTP_201_CREATED, tags=["workspaces"], openapi_extra=access(Access.ADMIN)
)
async def create_workspace(body: WorkspaceCreate, actor: CurrentActor, session: WriteSession) -> WorkspaceOut:
    """Create a workspace, allowed in the default pool, with a first workspace admin (default: you)."""
    workspace = await tenancy.create_workspace(
        session, actor, name=body.name, description=body.description, admin_user_id=body.admin_user_id
    )
    return WorkspaceOut.model_validate(workspace)


@router.get("/workspaces/{workspace_id}", tags=["workspaces"], openapi_extra=access(Access.WORKSPACE))
async def get_workspace(workspace_id: Id, actor: CurrentActor, session: ReadSession) -> WorkspaceOut:
    return WorkspaceOut.model_validate(await tenancy.get_workspace(session, actor, workspace_id))


@router.patch("/workspaces/{workspace_id}", tags=["workspaces"], openapi_extra=access(Access.WORKSPACE_ADMIN))
async def update_workspace(
    workspace_id: Id, body: WorkspaceUpdate, actor: CurrentActor, session: WriteSession
) -> WorkspaceOut:
    """Rename the workspace, change its description, its notebooks' idle timeout, or let platform admins read its
    job logs (audited)."""
    idle = body.notebook_idle_timeout_s if "notebook_idle_timeout_s" in body.model_fields_set else ...
    workspace = await tenancy.update_workspace(
        session,
        actor,
        workspace_id,
        name=body.name,
        description=body.description,
        admins_read_logs=body.admins_read_logs,
        notebook_idle_timeout_s=idle,
    )
    return WorkspaceOut.model_validate(workspace)


@router.delete(
    "/workspaces/{workspace_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["workspaces"],
    openapi_extra=access(Access.ADMIN),
)
async def delete_workspace(workspace_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete the workspace with its members, quotas and pool grants."""
    await tenancy.delete_workspace(session, actor, workspace_id)


@router.get("/workspaces/{workspace_id}/members", tags=["members"], openapi_extra=access(Access.WORKSPACE))
async def list_members(workspace_id: Id, actor: CurrentActor, session: ReadSession, paging: Paging) -> Page[MemberOut]:
    page = await members.list_members(session, actor, workspace_id, limit=paging.limit, cursor=paging.cursor)
    return Page(items=[_member(m) for m in page.items], next_cursor=page.next_cursor)


@router.post(
    "/workspaces/{workspace_id}/members",
    status_code=status.HTTP_201_CREATED,
    tags=["members"],
    openapi_extra=access(Access.WORKSPACE_ADMIN),
)
async def add_member(workspace_id: Id, body: MemberAdd, actor: CurrentActor, session: WriteSession) -> MemberOut:
    """Add a user, by ``user_id`` or ``username``, with a role."""
    membership = await members.add_member(
        session, actor, workspace_id, user_id=body.user_id, username=body.username, role=body.role
    )
    return _member(membership)


@router.patch(
    "/workspaces/{workspace_id}/members/{user_id}", tags=["members"], openapi_extra=access(Access.WORKSPACE_ADMIN)
)
async def update_member(
    workspace_id: Id, user_id: Id, body: MemberUpdate, actor: CurrentActor, session: WriteSession
) -> MemberOut:
    """Change a member's role. The last workspace admin cannot be demoted (409)."""
    return _member(await members.update_member(session, actor, workspace_id, user_id, role=body.role))


@router.delete(
    "/workspaces/{workspace_id}/members/{user_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["members"],
    openapi_extra=access(Access.WORKSPACE_ADMIN),
)
async def remove_member(workspace_id: Id, user_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Remove a member. The last workspace admin cannot be removed (409)."""
    await members.remove_member(session, actor, workspace_id, user_id)


@router.get("/workspaces/{workspace_id}/quotas", tags=["quotas"], openapi_extra=access(Access.WORKSPACE))
async def list_quotas(workspace_id: Id, actor: CurrentActor, session: ReadSession) -> list[QuotaOut]:
    """The workspace's quota in each pool, with what it uses now."""
    return [_quota(v) for v in await quotas.list_quotas(session, actor, workspace_id)]


@router.put("/workspaces/{workspace_id}/quotas/{pool_id}", tags=["quotas"], openapi_extra=access(Access.ADMIN))
async def set_quota(
    workspace_id: Id, pool_id: Id, body: QuotaSet, actor: CurrentActor, session: WriteSession
) -> QuotaOut:
    """Set the workspace's guaranteed and maximum resources in a pool, granting it the pool if needed."""
    view = await quotas.set_quota(
        session, actor, workspace_id, pool_id, guaranteed=body.guaranteed, maximum=body.maximum
    )
    return _quota(view)


@router.delete(
    "/workspaces/{workspace_id}/quotas/{pool_id}",
    status_code=status.HTTP_204_NO_CONTENT,
    tags=["quotas"],
    openapi_extra=access(Access.ADMIN),
)
async def delete_quota(workspace_id: Id, pool_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Remove the workspace's quota in a pool; the workspace may still use the pool."""
    await quotas.delete_quota(session, actor, workspace_id, pool_id)
