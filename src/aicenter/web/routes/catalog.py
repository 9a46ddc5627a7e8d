"""The catalog in the console: lists of datasets, algorithms, images and models, item pages, new items, image
versions. Version pages (file browser, previews, sharing, builds) are in ``catalog_versions``.

The four kinds share one set of handlers: each is registered under every kind's path (``/datasets``,
``/algorithms``, ...) and the :data:`Kind` dependency reads the kind back from the path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.catalog import (
    ITEM_META,
    ContainerImageVersionMeta,
    ItemKind,
    Scope,
    VenvImageVersionMeta,
)
from aicenter.core.errors import AicenterError
from aicenter.services import catalog
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form

router = APIRouter()

PLURALS: dict[str, ItemKind] = {kind.plural: kind for kind in ItemKind}
SORTS = [
    ("-updated_at", "Recently updated"),
    ("name", "Name A to Z"),
    ("-name", "Name Z to A"),
    ("-created_at", "Newest"),
    ("created_at", "Oldest"),
]
TAB_LABELS = {
    Scope.MINE: "Mine",
    Scope.WORKSPACE: "Shared with my workspaces",
    Scope.PUBLIC: "Public",
    Scope.PRESET: "Preset",
    Scope.ALL: "All",
}
ITEM_FIELDS = ("name", "description", "tags", "preset")
VERSION_FIELDS = ("description",)
# Field labels where the metadata field's name is not the words a person expects.
_LABELS = {
    "data_type": "Data type",
    "image_type": "Image type",
    "python": "Python version",
    "requirements": "Requirements",
    "system_site_packages": "Use the system's site packages",
    "reference": "Image reference",
    "entrypoint": "Entrypoint",
    "framework": "Framework",
    "format": "Format",
}
_HELP = {
    "requirements": "One pip requirement per line, e.g. numpy==2.1.",
    "entrypoint": "The command or script a job runs, e.g. train.py.",
    "reference": "A container image, e.g. registry.example.org/team/pytorch:2.4.",
    "python": "e.g. 3.11; the build host must have this Python.",
}


def kind_of(request: Request) -> ItemKind:
    """The catalog kind named by the first segment of this page's path (``/models/3`` -> model)."""
    return PLURALS[request.url.path.split("/", 2)[1]]


Kind = Annotated[ItemKind, Depends(kind_of)]
F = TypeVar("F", bound=Callable[..., Any])


def each_kind(method: Literal["GET", "POST"], suffix: str, *, on: APIRouter) -> Callable[[F], F]:
    """Register the handler on router ``on`` at ``/<plural><suffix>`` for every kind."""

    def register(endpoint: F) -> F:
        for plural in PLURALS:
            on.add_api_route(f"/{plural}{suffix}", endpoint, methods=[method])
        return endpoint

    return register


def nav_key(kind: ItemKind) -> str:
    return kind.plural


def title_of(kind: ItemKind) -> str:
    return kind.plural.capitalize()


# --- per-kind metadata as form fields ---------------------------------------------------------------------


@dataclass(frozen=True)
class MetaField:
    """A metadata field of a form, derived from the core model so that forms and validation never disagree.

    ``name`` is the form field's name, ``metadata.<key>``: service errors name that same path.
    """

    key: str
    label: str
    widget: Literal["select", "text", "lines", "check"]
    options: list[tuple[str, str]]
    default: str
    help: str

    @property
    def name(self) -> str:
        return f"metadata.{self.key}"


def _display(value: object) -> str:
    """A stored metadata value as a form shows it (lists: one entry per line; booleans: a checkbox's "on")."""
    if isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if isinstance(value, bool):
        return "on" if value else ""
    return "" if value is None else str(value)


def meta_fields(model: type[BaseModel], *, skip: tuple[str, ...] = ()) -> list[MetaField]:
    out = []
    for key, info in model.model_fields.items():
        if key in skip:
            continue
        annotation = info.annotation
        widget: Literal["select", "text", "lines", "check"] = "text"
        options: list[tuple[str, str]] = []
        if get_origin(annotation) is Literal:
            widget = "select"
            options = [(str(v), str(v)) for v in get_args(annotation)]
        elif get_origin(annotation) is list:
            widget = "lines"
        elif annotation is bool:
            widget = "check"
        label = _LABELS.get(key, key.replace("_", " ").capitalize())
        default = _display(info.get_default(call_default_factory=True))
        out.append(MetaField(key, label, widget, options, default, _HELP.get(key, "")))
    return out


ITEM_META_FIELDS: dict[ItemKind, list[MetaField]] = {kind: meta_fields(model) for kind, model in ITEM_META.items()}
IMAGE_VERSION_FIELDS: dict[str, list[MetaField]] = {
    "venv": meta_fields(VenvImageVersionMeta, skip=("image_type",)),
    "container": meta_fields(ContainerImageVersionMeta, skip=("image_type",)),
}


def meta_from_form(post: Post, fields: list[MetaField]) -> dict[str, Any]:
    """The metadata dict typed in a form; the service validates it (errors name ``metadata.<key>``)."""
    out: dict[str, Any] = {}
    for f in fields:
        raw = post.data.get(f.name)
        if f.widget == "check":
            out[f.key] = raw == "on"
        elif isinstance(raw, str):
            if f.widget == "lines":
                out[f.key] = [line.strip() for line in raw.splitlines() if line.strip()]
            else:
                out[f.key] = raw.strip()
    return out


def tags_from_form(raw: str) -> list[str]:
    """Tags typed as ``a, b c``: commas or spaces separate them; order kept, duplicates dropped."""
    return list(dict.fromkeys(t for t in raw.replace(",", " ").split() if t))


def field_names(fields: list[MetaField]) -> tuple[str, ...]:
    return tuple(f.name for f in fields)


def meta_values(fields: list[MetaField], stored: dict[str, Any]) -> dict[str, str]:
    """Stored metadata by form field name, for an edit form."""
    return {f.name: _display(stored.get(f.key)) for f in fields}


# --- list and create ---------------------------------------------------------------------------------------


def tabs(cx: Console) -> list[Scope]:
    scopes = [Scope.MINE, Scope.WORKSPACE, Scope.PUBLIC, Scope.PRESET]
    return [*scopes, Scope.ALL] if cx.is_platform_admin else scopes


def _scope(cx: Console) -> Scope:
    raw = cx.request.query_params.get("scope", "")
    try:
        scope = Scope(raw) if raw else Scope.MINE
    except ValueError:
        scope = Scope.MINE
    return scope if scope in tabs(cx) else Scope.MINE


def member_workspace_id(cx: Console) -> int | None:
    """The current workspace if the user is a member of it (an admin's "admin view" workspace is not theirs)."""
    return cx.workspace.id if cx.workspace is not None and cx.role is not None else None


async def _list(cx: Console, kind: ItemKind, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    scope = _scope(cx)
    q = params.get("q", "").strip()
    tag = params.get("tag", "").strip()
    sort = params.get("sort", "") if params.get("sort", "") in dict(SORTS) else SORTS[0][0]
    async with cx.ctx.db.read() as session:
        page = await catalog.list_items(
            session,
            cx.actor,
            kind,
            scope=scope,
            workspace_id=member_workspace_id(cx) if scope is Scope.WORKSPACE else None,
            q=q or None,
            tag=tag or None,
            sort=sort,
            limit=50,
            cursor=params.get("cursor") or None,
        )
    return render(
        cx,
        "catalog/list.html",
        active=nav_key(kind),
        title=title_of(kind),
        forms=forms,
        status=status,
        kind=kind,
        items=page.items,
        scope=scope,
        tabs=[(s, TAB_LABELS[s]) for s in tabs(cx)],
        q=q,
        tag=tag,
        sort=sort,
        sorts=SORTS,
        meta_fields=ITEM_META_FIELDS[kind],
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@each_kind("GET", "", on=router)
async def list_items(kind: Kind, cx: Page) -> Response:
    return await _list(cx, kind)


@each_kind("POST", "", on=router)
async def create_item(kind: Kind, post: Post) -> Response:
    cx = post.cx
    fields = ITEM_META_FIELDS[kind]
    preset = cx.is_platform_admin and post.get("preset") == "on"
    try:
        async with cx.ctx.db.write() as session:
            item = await catalog.create_item(
                session,
                cx.actor,
                kind,
                name=post.get("name"),
                workspace_id=None if preset else member_workspace_id(cx),
                description=post.get("description"),
                tags=tags_from_form(post.get("tags")),
                metadata=meta_from_form(post, fields),
                preset=preset,
            )
    except AicenterError as exc:
        state = failed_form("item-create", post.values, exc, ITEM_FIELDS + field_names(fields))
        return await _list(cx, kind, forms=[state], status=exc.status)
    return redirect(cx, f"/{kind.plural}/{item.id}", f"The {kind.value} {item.name} was created.")


# --- one item ----------------------------------------------------------------------------------------------


def can_change(cx: Console, item: Any) -> bool:
    """Whether this viewer may change the item (the service decides; this only hides useless forms)."""
    if item.is_preset:
        return cx.is_platform_admin
    return bool(item.owner_id == cx.actor.user_id)


def version_fields(kind: ItemKind, item: Any) -> list[MetaField]:
    """The fields of the "New version" form: images only (other kinds get versions by upload)."""
    if kind is not ItemKind.IMAGE:
        return []
    return IMAGE_VERSION_FIELDS["container" if item.metadata.get("image_type") == "container" else "venv"]


async def _item(
    cx: Console, kind: ItemKind, item_id: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    async with cx.ctx.db.read() as session:
        item = await catalog.get_item(session, cx.actor, kind, item_id)
        page = await catalog.list_versions(
            session, cx.actor, kind, item_id, limit=50, cursor=cx.request.query_params.get("cursor") or None
        )
    return render(
        cx,
        "catalog/item.html",
        active=nav_key(kind),
        title=item.name,
        forms=forms,
        status=status,
        kind=kind,
        item=item,
        versions=page.items,
        can_change=can_change(cx, item),
        meta_fields=ITEM_META_FIELDS[kind],
        meta_values=meta_values(ITEM_META_FIELDS[kind], item.metadata),
        version_fields=version_fields(kind, item),
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@each_kind("GET", "/{item_id:int}", on=router)
async def item_page(kind: Kind, item_id: Id, cx: Page) -> Response:
    return await _item(cx, kind, item_id)


@each_kind("POST", "/{item_id:int}", on=router)
async def update_item(kind: Kind, item_id: Id, post: Post) -> Response:
    cx = post.cx
    fields = ITEM_META_FIELDS[kind]
    try:
        async with cx.ctx.db.write() as session:
            item = await catalog.update_item(
                session,
                cx.actor,
                kind,
                item_id,
                name=post.get("name"),
                description=post.get("description"),
                tags=tags_from_form(post.get("tags")),
                metadata=meta_from_form(post, fields),
            )
    except AicenterError as exc:
        state = failed_form("item-edit", post.values, exc, ITEM_FIELDS + field_names(fields))
        return await _item(cx, kind, item_id, forms=[state], status=exc.status)
    return redirect(cx, f"/{kind.plural}/{item_id}", f"The {kind.value} {item.name} was saved.")


@each_kind("POST", "/{item_id:int}/delete", on=router)
async def delete_item(kind: Kind, item_id: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            name = (await catalog.get_item(session, cx.actor, kind, item_id)).name
            await catalog.delete_item(session, cx.actor, kind, item_id)
    except AicenterError as exc:
        return await _item(cx, kind, item_id, forms=[message_form("item-delete", exc)], status=exc.status)
    return redirect(cx, f"/{kind.plural}", f"The {kind.value} {name} was deleted.")


@each_kind("POST", "/{item_id:int}/versions", on=router)
async def create_version(kind: Kind, item_id: Id, post: Post) -> Response:
    """A version without files: an image's build spec (a venv is then built; a container reference is ready)."""
    cx = post.cx
    fields: list[MetaField] = []
    try:
        async with cx.ctx.db.write() as session:
            item = await catalog.get_item(session, cx.actor, kind, item_id)
            fields = version_fields(kind, item)
            version = await catalog.create_version(
                session,
                cx.actor,
                kind,
                item_id,
                description=post.get("description"),
                metadata=meta_from_form(post, fields) if fields else None,
            )
    except AicenterError as exc:
        state = failed_form("version-create", post.values, exc, VERSION_FIELDS + field_names(fields))
        return await _item(cx, kind, item_id, forms=[state], status=exc.status)
    return redirect(cx, f"/{kind.plural}/{item_id}/versions/{version.number}", f"Version {version.ref} was created.")
