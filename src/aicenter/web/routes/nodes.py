"""Nodes (platform admins): state, schedule and accelerators; cordon, drain, uncordon; labels and topology."""

from __future__ import annotations

from typing import TypeVar

from fastapi import APIRouter
from starlette.responses import Response

import aicenter.web.pickers as pickers
from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, NotFound, ValidationFailed
from aicenter.core.roles import NodeSchedule, NodeState
from aicenter.services import inventory, monitoring
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, format_key_values, parse_int, parse_key_values

router = APIRouter()

CREATE_FIELDS = (
    "name",
    "address",
    "cpu",
    "memory",
    "accelerator_type",
    "accelerator_count",
    "labels",
    "rack",
    "leaf",
    "spine",
    "nvlink_domain",
)
EDIT_FIELDS = ("labels", "address", "rack", "leaf", "spine", "nvlink_domain")
TOPOLOGY = ("rack", "leaf", "spine", "nvlink_domain")
# What each schedule button does, by the path segment it posts to.
SCHEDULE_ACTIONS = {
    "cordon": (NodeSchedule.CORDONED, "cordoned: no new work is placed on it"),
    "drain": (NodeSchedule.DRAINING, "draining: no new work, and running work is asked to leave"),
    "uncordon": (NodeSchedule.SCHEDULABLE, "schedulable again"),
}


ACCELERATOR_TELEMETRY = "node.accelerator_telemetry"  # written by the samplers: 1 NVML answered, 0 it did not

E = TypeVar("E", NodeState, NodeSchedule)


def _enum(cls: type[E], raw: str) -> E | None:
    """A filter's value, or None (no filter) for an empty or unknown one."""
    return cls(raw) if raw in {m.value for m in cls} else None


async def _list(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    filters = {k: params.get(k, "").strip() for k in ("state", "schedule", "label", "pool")}
    views: list[inventory.NodeView] = []
    next_cursor = None
    page_forms = list(forms or [])
    async with cx.ctx.db.read() as session:
        try:
            page = await inventory.list_nodes(
                session,
                cx.actor,
                limit=50,
                cursor=params.get("cursor") or None,
                state=_enum(NodeState, filters["state"]),
                schedule=_enum(NodeSchedule, filters["schedule"]),
                labels=[filters["label"]] if filters["label"] else (),
                pool=filters["pool"] or None,
            )
            views, next_cursor = page.items, page.next_cursor
        except ValidationFailed as exc:
            page_forms.append(failed_form("node-filter", filters, exc, ("state", "schedule", "label", "pool")))
            status = max(status, exc.status)
        types = await pickers.accelerator_types(session, cx.actor)
        pools = await pickers.pools(session, cx.actor)
    return render(
        cx,
        "inventory/nodes.html",
        active="nodes",
        title="Nodes",
        forms=page_forms,
        status=status,
        nodes=views,
        filters=filters,
        states=[s.value for s in NodeState],
        schedules=[s.value for s in NodeSchedule],
        types=types,
        pools=pools,
        next_url=page_url(cx.request, next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/nodes")
async def list_nodes(cx: Page) -> Response:
    return await _list(cx)


@router.post("/nodes")
async def create_node(post: Post) -> Response:
    cx = post.cx
    try:
        count = parse_int(post.get("accelerator_count"), "accelerator_count", default=0) or 0
        accelerator_type = post.get("accelerator_type")
        if count and not accelerator_type:
            raise ValidationFailed("choose the type of the accelerators", field="accelerator_type")
        if count < 0:
            raise ValidationFailed("must not be negative", field="accelerator_count")
        async with cx.ctx.db.write() as session:
            view = await inventory.create_node(
                session,
                cx.actor,
                name=post.get("name"),
                cpu=post.get("cpu"),
                memory=post.get("memory"),
                address=post.get("address"),
                accelerators=[inventory.AcceleratorInput(index=i, type=accelerator_type) for i in range(count)],
                labels=parse_key_values(post.get("labels"), "labels"),
                **{k: post.get(k) or None for k in TOPOLOGY},
            )
    except AicenterError as exc:
        state = failed_form("node-create", post.values, exc, CREATE_FIELDS)
        if state.message and str(exc.details.get("field", "")).startswith("accelerators"):
            state.errors["accelerator_type"], state.message = state.message, None
        return await _list(cx, forms=[state], status=exc.status)
    return redirect(cx, f"/nodes/{view.node.id}", f"Node {view.node.name} was registered.")


async def _detail(cx: Console, node_id: int, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    async with cx.ctx.db.read() as session:
        view = await inventory.get_node(session, cx.actor, node_id)
        # The samplers' word on NVML: 1 where the node's accelerators can be read, 0 where not; None: no sample yet.
        said = await monitoring.latest_values(session, cx.actor, names=[ACCELERATOR_TELEMETRY], node_id=node_id)
    return render(
        cx,
        "inventory/node.html",
        accelerator_telemetry=bool(said[0].value) if said else None,
        active="nodes",
        title=view.node.name,
        forms=forms,
        status=status,
        view=view,
        node=view.node,
        labels_text=format_key_values(view.node.labels),
    )


@router.get("/nodes/{node_id:int}")
async def node_detail(node_id: Id, cx: Page) -> Response:
    return await _detail(cx, node_id)


@router.post("/nodes/{node_id:int}")
async def update_node(node_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            view = await inventory.update_node(
                session,
                cx.actor,
                node_id,
                labels=parse_key_values(post.get("labels"), "labels"),
                address=post.get("address"),
                **{k: post.get(k) or None for k in TOPOLOGY},
            )
    except AicenterError as exc:
        return await _detail(
            cx, node_id, forms=[failed_form("node-edit", post.values, exc, EDIT_FIELDS)], status=exc.status
        )
    return redirect(cx, f"/nodes/{node_id}", f"Node {view.node.name} was saved.")


@router.post("/nodes/{node_id:int}/{action}")
async def schedule_node(node_id: Id, action: str, post: Post) -> Response:
    """Cordon, drain or uncordon; ``next=/nodes`` returns to the list the button was on."""
    cx = post.cx
    if action == "delete":
        async with cx.ctx.db.write() as session:
            view = await inventory.get_node(session, cx.actor, node_id)
            await inventory.delete_node(session, cx.actor, node_id)
        return redirect(cx, "/nodes", f"Node {view.node.name} was removed.")
    if action not in SCHEDULE_ACTIONS:
        raise NotFound(f"there is no node action {action!r}")
    schedule, said = SCHEDULE_ACTIONS[action]
    async with cx.ctx.db.write() as session:
        view = await inventory.set_node_schedule(session, cx.actor, node_id, schedule)
    back = "/nodes" if post.get("next") == "/nodes" else f"/nodes/{node_id}"
    return redirect(cx, back, f"Node {view.node.name} is {said}.")
