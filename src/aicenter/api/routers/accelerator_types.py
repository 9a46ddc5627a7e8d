"""Accelerator types (nvidia-a100, ascend-910b, ...): everyone reads them, platform admins manage them."""

from __future__ import annotations

from fastapi import APIRouter, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.inventory import AcceleratorTypeCreate, AcceleratorTypeOut, AcceleratorTypeUpdate
from aicenter.services import inventory

router = APIRouter(prefix="/api/v1/accelerator-types", tags=["accelerator-types"], responses=ERROR_RESPONSES)


@router.get("", openapi_extra=access(Access.USER))
async def list_accelerator_types(
    actor: CurrentActor, session: ReadSession, paging: Paging, vendor: str | None = None
) -> Page[AcceleratorTypeOut]:
    """Every accelerator type, optionally of one vendor."""
    page = await inventory.list_accelerator_types(
        session, actor, limit=paging.limit, cursor=paging.cursor, vendor=vendor
    )
    return Page(items=[AcceleratorTypeOut.model_validate(t) for t in page.items], next_cursor=page.next_cursor)


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_accelerator_type(
    body: AcceleratorTypeCreate, actor: CurrentActor, session: WriteSession
) -> AcceleratorTypeOut:
    row = await inventory.create_accelerator_type(
        session, actor, name=body.name, vendor=body.vendor, memory=body.memory, description=body.description
    )
    return AcceleratorTypeOut.model_validate(row)


@router.get("/{accelerator_type_id}", openapi_extra=access(Access.USER))
async def get_accelerator_type(
    accelerator_type_id: Id, actor: CurrentActor, session: ReadSession
) -> AcceleratorTypeOut:
    return AcceleratorTypeOut.model_validate(await inventory.get_accelerator_type(session, actor, accelerator_type_id))


@router.patch("/{accelerator_type_id}", openapi_extra=access(Access.ADMIN))
async def update_accelerator_type(
    accelerator_type_id: Id, body: AcceleratorTypeUpdate, actor: CurrentActor, session: WriteSession
) -> AcceleratorTypeOut:
    """Change a type. Renaming a type that nodes, specs or quotas use is refused (409)."""
    row = await inventory.update_accelerator_type(session, actor, accelerator_type_id, **body.changes())
    return AcceleratorTypeOut.model_validate(row)


@router.delete("/{accelerator_type_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN))
async def delete_accelerator_type(accelerator_type_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Delete a type; 409 naming the nodes, specs or quotas that still use it."""
    await inventory.delete_accelerator_type(session, actor, accelerator_type_id)
