"""Accelerator types and resource specs: platform admins create, edit and delete; members read what they may use."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.responses import Response

import aicenter.web.pickers as pickers
from aicenter.api.params import Id
from aicenter.core.errors import AicenterError
from aicenter.services import inventory
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form, parse_float, parse_int

router = APIRouter()

TYPE_FIELDS = ("name", "vendor", "memory", "description")
SPEC_FIELDS = (
    "name",
    "cpu",
    "memory",
    "accelerators",
    "accelerator_share",
    "accelerator_type",
    "price_per_hour",
    "billing_weight",
    "pool_id",
    "description",
    "enabled",
)


# --- accelerator types -------------------------------------------------------------------------------------


async def _types(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    async with cx.ctx.db.read() as session:
        page = await inventory.list_accelerator_types(session, cx.actor, limit=100, cursor=params.get("cursor") or None)
    return render(
        cx,
        "inventory/accelerator_types.html",
        active="accelerator-types",
        title="Accelerator types",
        forms=forms,
        status=status,
        types=page.items,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/accelerator-types")
async def list_types(cx: Page) -> Response:
    return await _types(cx)


def _type_fields(post: Post) -> dict[str, Any]:
    return {
        "name": post.get("name"),
        "vendor": post.get("vendor"),
        "memory": post.get("memory") or None,
        "description": post.get("description"),
    }


@router.post("/accelerator-types")
async def create_type(post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            row = await inventory.create_accelerator_type(session, cx.actor, **_type_fields(post))
    except AicenterError as exc:
        return await _types(cx, forms=[failed_form("type-create", post.values, exc, TYPE_FIELDS)], status=exc.status)
    return redirect(cx, "/accelerator-types", f"Accelerator type {row.name} was created.")


async def _type_detail(
    cx: Console, type_id: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    async with cx.ctx.db.read() as session:
        row = await inventory.get_accelerator_type(session, cx.actor, type_id)
    return render(
        cx,
        "inventory/accelerator_type.html",
        active="accelerator-types",
        title=row.name,
        forms=forms,
        status=status,
        row=row,
    )


@router.get("/accelerator-types/{type_id:int}")
async def type_detail(type_id: Id, cx: Page) -> Response:
    return await _type_detail(cx, type_id)


@router.post("/accelerator-types/{type_id:int}")
async def update_type(type_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            row = await inventory.update_accelerator_type(session, cx.actor, type_id, **_type_fields(post))
    except AicenterError as exc:
        state = failed_form("type-edit", post.values, exc, TYPE_FIELDS)
        return await _type_detail(cx, type_id, forms=[state], status=exc.status)
    return redirect(cx, f"/accelerator-types/{type_id}", f"Accelerator type {row.name} was saved.")


@router.post("/accelerator-types/{type_id:int}/delete")
async def delete_type(type_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            row = await inventory.get_accelerator_type(session, cx.actor, type_id)
            name = row.name
            await inventory.delete_accelerator_type(session, cx.actor, type_id)
    except AicenterError as exc:
        return await _type_detail(cx, type_id, forms=[message_form("type-delete", exc)], status=exc.status)
    return redirect(cx, "/accelerator-types", f"Accelerator type {name} was deleted.")


# --- specs -------------------------------------------------------------------------------------------------


async def _specs(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    # Members see what their current workspace may use; admins see every spec.
    workspace_id = None if cx.is_platform_admin or cx.workspace is None else cx.workspace.id
    async with cx.ctx.db.read() as session:
        page = await inventory.list_specs(
            session, cx.actor, limit=100, cursor=params.get("cursor") or None, workspace_id=workspace_id
        )
        pools = await pickers.pools(session, cx.actor)
        types = await pickers.accelerator_types(session, cx.actor) if cx.is_platform_admin else []
    return render(
        cx,
        "inventory/specs.html",
        active="specs",
        title="Resource specs",
        forms=forms,
        status=status,
        specs=page.items,
        pool_names={p.id: p.name for p in pools},
        pools=pools,
        types=types,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/specs")
async def list_specs(cx: Page) -> Response:
    return await _specs(cx)


def _spec_fields(post: Post) -> dict[str, Any]:
    return {
        "name": post.get("name"),
        "cpu": post.get("cpu"),
        "memory": post.get("memory"),
        "accelerators": parse_int(post.get("accelerators"), "accelerators", default=0),
        "accelerator_share": parse_int(post.get("accelerator_share"), "accelerator_share", default=0),
        "accelerator_type": post.get("accelerator_type") or None,
        "price_per_hour": post.get("price_per_hour") or "0",
        "billing_weight": parse_float(post.get("billing_weight"), "billing_weight", default=1.0),
        "pool_id": parse_int(post.get("pool_id"), "pool_id"),
        "description": post.get("description"),
        "enabled": post.get("enabled") == "on",
    }


@router.post("/specs")
async def create_spec(post: Post) -> Response:
    cx = post.cx
    try:
        fields = _spec_fields(post)
        async with cx.ctx.db.write() as session:
            spec = await inventory.create_spec(session, cx.actor, **fields)
    except AicenterError as exc:
        return await _specs(cx, forms=[failed_form("spec-create", post.values, exc, SPEC_FIELDS)], status=exc.status)
    return redirect(cx, "/specs", f"Spec {spec.name} was created.")


async def _spec_detail(
    cx: Console, spec_id: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    async with cx.ctx.db.read() as session:
        spec = await inventory.get_spec(session, cx.actor, spec_id)
        pools = await pickers.pools(session, cx.actor)
        types = await pickers.accelerator_types(session, cx.actor) if cx.is_platform_admin else []
    return render(
        cx,
        "inventory/spec.html",
        active="specs",
        title=spec.name,
        forms=forms,
        status=status,
        spec=spec,
        pools=pools,
        pool_names={p.id: p.name for p in pools},
        types=types,
    )


@router.get("/specs/{spec_id:int}")
async def spec_detail(spec_id: Id, cx: Page) -> Response:
    return await _spec_detail(cx, spec_id)


@router.post("/specs/{spec_id:int}")
async def update_spec(spec_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        fields = _spec_fields(post)
        async with cx.ctx.db.write() as session:
            spec = await inventory.update_spec(session, cx.actor, spec_id, **fields)
    except AicenterError as exc:
        state = failed_form("spec-edit", post.values, exc, SPEC_FIELDS)
        return await _spec_detail(cx, spec_id, forms=[state], status=exc.status)
    return redirect(cx, f"/specs/{spec_id}", f"Spec {spec.name} was saved.")


@router.post("/specs/{spec_id:int}/delete")
async def delete_spec(spec_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            spec = await inventory.get_spec(session, cx.actor, spec_id)
            name = spec.name
            await inventory.delete_spec(session, cx.actor, spec_id)
    except AicenterError as exc:
        return await _spec_detail(cx, spec_id, forms=[message_form("spec-delete", exc)], status=exc.status)
    return redirect(cx, "/specs", f"Spec {name} was deleted.")
