"""Nodes (platform admins): manual registration, labels and topology, cordon / drain / uncordon."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.api.schemas.inventory import NodeCreate, NodeOut, NodeUpdate
from aicenter.core.roles import NodeSchedule, NodeState
from aicenter.services import inventory

router = APIRouter(prefix="/api/v1/nodes", tags=["nodes"], responses=ERROR_RESPONSES)


@router.get("", openapi_extra=access(Access.ADMIN))
async def list_nodes(
    actor: CurrentActor,
    session: ReadSession,
    paging: Paging,
    state: NodeState | None = None,
    schedule: NodeSchedule | None = None,
    label: Annotated[list[str], Query(description="key=value; repeat for several (all must match).")] = [],  # noqa: B006
    pool: Annotated[str | None, Query(description="A pool name: only the nodes its selector matches.")] = None,
) -> Page[NodeOut]:
    page = await inventory.list_nodes(
        session,
        actor,
        limit=paging.limit,
        cursor=paging.cursor,
        state=state,
        schedule=schedule,
        labels=label,
        pool=pool,
    )
    return Page(items=[NodeOut.of(v) for v in page.items], next_cursor=page.next_cursor)


@router.post("", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN))
async def create_node(body: NodeCreate, actor: CurrentActor, session: WriteSession) -> NodeOut:
    """Register a node by hand; executors register the hosts they run on themselves."""
    view = await inventory.create_node(
        session,
        actor,
        name=body.name,
        cpu=body.cpu,
        memory=body.memory,
        address=body.address,
        accelerators=[
            inventory.AcceleratorInput(a.index, a.type, a.memory, a.nvlink_domain) for a in body.accelerators
        ],
        labels=body.labels,
        rack=body.rack,
        leaf=body.leaf,
        spine=body.spine,
        nvlink_domain=body.nvlink_domain,
    )
    return NodeOut.of(view)


@router.get("/{node_id}", openapi_extra=access(Access.ADMIN))
async def get_node(node_id: Id, actor: CurrentActor, session: ReadSession) -> NodeOut:
    return NodeOut.of(await inventory.get_node(session, actor, node_id))


@router.patch("/{node_id}", openapi_extra=access(Access.ADMIN))
async def update_node(node_id: Id, body: NodeUpdate, actor: CurrentActor, session: WriteSession) -> NodeOut:
    return NodeOut.of(await inventory.update_node(session, actor, node_id, **body.changes()))


@router.post("/{node_id}/cordon", openapi_extra=access(Access.ADMIN))
async def cordon_node(node_id: Id, actor: CurrentActor, session: WriteSession) -> NodeOut:
    """No new work on the node; running work stays."""
    return NodeOut.of(await inventory.set_node_schedule(session, actor, node_id, NodeSchedule.CORDONED))


@router.post("/{node_id}/drain", openapi_extra=access(Access.ADMIN))
async def drain_node(node_id: Id, actor: CurrentActor, session: WriteSession) -> NodeOut:
    """No new work on the node, and running work is asked to leave."""
    return NodeOut.of(await inventory.set_node_schedule(session, actor, node_id, NodeSchedule.DRAINING))


@router.post("/{node_id}/uncordon", openapi_extra=access(Access.ADMIN))
async def uncordon_node(node_id: Id, actor: CurrentActor, session: WriteSession) -> NodeOut:
    """The node takes new work again."""
    return NodeOut.of(await inventory.set_node_schedule(session, actor, node_id, NodeSchedule.SCHEDULABLE))


@router.delete("/{node_id}", status_code=status.HTTP_204_NO_CONTENT, openapi_extra=access(Access.ADMIN))
async def delete_node(node_id: Id, actor: CurrentActor, session: WriteSession) -> None:
    """Forget a node. A host whose executor still runs registers itself again."""
    await inventory.delete_node(session, actor, node_id)
