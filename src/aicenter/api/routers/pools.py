"""Pools of nodes and the workspaces that may use them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.inventory import PoolCreate, PoolOut, PoolUpdate, PoolWorkspaceOut
from aicenter.services import inventory

router = APIRouter(prefix="/api/v1/pools", tags=["pools"], responses=ERROR_RESPONSES)


@router.get("", openapi_extra=access(Access.USER))
async def list_pools(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    workspace_id: Annotated[Id | None, Query(description="Only pools granted to this workspace.")] = None,
) -> Page[PoolOut]:
    """Platform admins see every pool; members the pools granted to their workspaces."""
    page = await inventory.list_pools(
        session, actor, limit=paging.limit, cursor=paging.cursor, workspace_id=workspace_id
    )
    return Page(items=[PoolOut.of(v) for v in page.items], next_cursor=page.next_cursor)


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_pool(body: PoolCreate, actor: CurrentActor, session: WriteSession) -> PoolOut:
    view = await inventory.create_pool(
        session, actor, name=body.name, description=body.description, selector=body.selector
    )
    return PoolOut.of(view)


@router.get("/{pool_id}", openapi_extra=access(Access.USER))
async def get_pool(pool_id: Id, actor: CurrentActor, session: ReadSession) -> PoolOut:
    """A pool granted to one of the caller's workspaces (others read as 404)."""
    return PoolOut.of(await inventory.get_pool(session, actor, pool_id))


@router.patch("/{pool_id}", openapi_extra=access(Access.ADMIN))
async def update_pool(pool_id: Id, body: PoolUpdate, actor: CurrentActor, session: WriteSession) -> PoolOut:
    return PoolOut.of(await inventory.update_pool(session, actor, pool_id, **body.changes()))


@router.delete("/{pool_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN))
async def delete_pool(pool_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a pool; 409 for the default pool or one that quotas, specs or grants refer to."""
    await inventory.delete_pool(session, actor, pool_id)


@router.get("/{pool_id}/workspaces", openapi_extra=access(Access.ADMIN))
async def list_pool_workspaces(pool_id: Id, actor: CurrentActor, session: ReadSession) -> list[PoolWorkspaceOut]:
    """The workspaces that may use the pool."""
    return [PoolWorkspaceOut.model_validate(w) for w in await inventory.list_pool_workspaces(session, actor, pool_id)]


@router.put(
    "/{pool_id}/workspaces/{workspace_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN)
)
async def grant_pool(pool_id: Id, workspace_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Let the workspace use the pool (idempotent)."""
    await inventory.grant_pool(session, actor, pool_id, workspace_id)


@router.delete(
    "/{pool_id}/workspaces/{workspace_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN)
)
async def revoke_pool(pool_id: Id, workspace_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Stop the workspace from using the pool."""
    await inventory.revoke_pool(session, actor, pool_id, workspace_id)
