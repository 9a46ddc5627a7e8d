"""Resource specs: members list the ones their workspaces may use; platform admins manage them."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.inventory import SpecCreate, SpecOut, SpecUpdate
from aicenter.services import inventory

router = APIRouter(prefix="/api/v1/specs", tags=["specs"], responses=ERROR_RESPONSES)


@router.get("", openapi_extra=access(Access.USER))
async def list_specs(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    workspace_id: Annotated[Id | None, Query(description="Only specs this workspace may use.")] = None,
    accelerator_type: str | None = None,
) -> Page[SpecOut]:
    """Platform admins see every spec; members the enabled specs usable in pools granted to their workspaces."""
    page = await inventory.list_specs(
        session,
        actor,
        limit=paging.limit,
        cursor=paging.cursor,
        workspace_id=workspace_id,
        accelerator_type=accelerator_type,
    )
    return Page(items=[SpecOut.model_validate(s) for s in page.items], next_cursor=page.next_cursor)


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_spec(body: SpecCreate, actor: CurrentActor, session: WriteSession) -> SpecOut:
    spec = await inventory.create_spec(session, actor, **body.model_dump())
    return SpecOut.model_validate(spec)


@router.get("/{spec_id}", openapi_extra=access(Access.USER))
async def get_spec(spec_id: Id, actor: CurrentActor, session: ReadSession) -> SpecOut:
    """A spec the caller may use (others read as 404)."""
    return SpecOut.model_validate(await inventory.get_spec(session, actor, spec_id))


@router.patch("/{spec_id}", openapi_extra=access(Access.ADMIN))
async def update_spec(spec_id: Id, body: SpecUpdate, actor: CurrentActor, session: WriteSession) -> SpecOut:
    return SpecOut.model_validate(await inventory.update_spec(session, actor, spec_id, **body.changes()))


@router.delete("/{spec_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN))
async def delete_spec(spec_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    await inventory.delete_spec(session, actor, spec_id)
