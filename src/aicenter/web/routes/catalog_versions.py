"""A catalog version in the console: facts, the file browser by directory, previews, download links, share /
unshare / copy / delete, and an image's build status (a fragment the page reloads while the build runs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import HTMLResponse, Response

from aicenter.api.params import Id
from aicenter.core.catalog import ItemKind, Visibility
from aicenter.core.errors import AicenterError, Forbidden, NotFound, ValidationFailed
from aicenter.services import catalog
from aicenter.web.console import Console, Page, Post, redirect, render
from aicenter.web.forms import FormState, failed_form, message_form, parse_int
from aicenter.web.routes.catalog import Kind, can_change, each_kind, nav_key
from aicenter.web.security import add_page_headers
from aicenter.web.templating import render_template

router = APIRouter()

VERSION = "/{item_id:int}/versions/{number:int}"
# A directory page reads at most this many files below it (pages of 1000): enough for the directories of any
# dataset a person browses; deeper trees are browsed a directory at a time, and the page says when it stopped.
LISTING_CAP = 20_000
_FILES_PAGE = 1000
BUILDING = ("pending", "building")


def api_base(kind: ItemKind, item_id: int, number: int) -> str:
    return f"/api/v1/{kind.plural}/{item_id}/versions/{number}"


def file_url(kind: ItemKind, item_id: int, number: int, path: str) -> str:
    """The API download address of one file (GET works with the console's session cookie)."""
    return f"{api_base(kind, item_id, number)}/files/{quote(path, safe='/')}"


# --- the file browser ------------------------------------------------------------------------------------


@dataclass
class Directory:
    name: str
    path: str
    file_count: int = 0
    size: int = 0


@dataclass
class Listing:
    """One directory of a version: its subdirectories (with totals) and its files, each sorted by name."""

    path: str
    crumbs: list[tuple[str, str]]
    directories: list[Directory] = field(default_factory=list)
    files: list[Any] = field(default_factory=list)
    truncated: bool = False


def breadcrumbs(path: str) -> list[tuple[str, str]]:
    """(label, directory path) from the root down to ``path``."""
    crumbs = [("(root)", "")]
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        crumbs.append((part, "/".join(parts[: i + 1])))
    return crumbs


async def list_directory(
    session: AsyncSession, cx: Console, kind: ItemKind, item_id: int, number: int, path: str
) -> Listing:
    prefix = f"{path}/" if path else ""
    listing = Listing(path, breadcrumbs(path))
    directories: dict[str, Directory] = {}
    cursor: str | None = None
    seen = 0
    while True:
        page = await catalog.list_files(
            session, cx.actor, kind, item_id, number, prefix=prefix or None, limit=_FILES_PAGE, cursor=cursor
        )
        for entry in page.items:
            if not entry.path.startswith(prefix):
                continue  # a prefix "a/b/" never matches "a/bc", but stay safe if the service matches loosely
            head, slash, _ = entry.path[len(prefix) :].partition("/")
            if slash:
                d = directories.setdefault(head, Directory(head, prefix + head))
                d.file_count += 1
                d.size += entry.size
            else:
                listing.files.append(entry)
        seen += len(page.items)
        cursor = page.next_cursor
        if cursor is None or seen >= LISTING_CAP:
            break
    listing.truncated = cursor is not None
    listing.directories = sorted(directories.values(), key=lambda d: d.name)
    listing.files.sort(key=lambda f: f.path)
    return listing


def _clean_dir(raw: str) -> str:
    return "/".join(p for p in raw.split("/") if p and p not in (".", ".."))


# --- the version page --------------------------------------------------------------------------------------


async def _version(
    cx: Console, kind: ItemKind, item_id: int, number: int, *, forms: list[FormState] | None = None, status: int = 200
) -> Response:
    params = cx.request.query_params
    directory = _clean_dir(params.get("dir", ""))
    selected = params.get("file", "")
    listing: Listing | None = None
    preview: Any = None
    preview_error = ""
    content_blocked = ""
    build: Any = None
    async with cx.ctx.db.read() as session:
        item = await catalog.get_item(session, cx.actor, kind, item_id)
        version = await catalog.get_version(session, cx.actor, kind, item_id, number)
        try:
            listing = await list_directory(session, cx, kind, item_id, number, directory)
            if selected:
                try:
                    preview = await catalog.preview(session, cx.actor, cx.ctx.store, kind, item_id, number, selected)
                except (NotFound, ValidationFailed) as exc:
                    preview_error = exc.message
        except Forbidden as exc:
            # Platform admins read the metadata of a user's item, not its files: say so instead of failing.
            content_blocked = exc.message
        if kind is ItemKind.IMAGE:
            build = await _build(session, cx, item_id, number)
        lineage = await _lineage(session, cx, version.metadata.get("lineage"))
        source = version.copied_from_id
        copied_from = (await catalog.version_links(session, cx.actor, [source])).get(source) if source else None
    owner = can_change(cx, item)
    return render(
        cx,
        "catalog/version.html",
        active=nav_key(kind),
        title=version.ref,
        forms=forms,
        status=status,
        kind=kind,
        item=item,
        ver=version,  # not `version`: the layout's `version` is the package's, for asset URLs
        listing=listing,
        selected=selected,
        preview=preview,
        preview_error=preview_error,
        content_blocked=content_blocked,
        build=build,
        lineage=lineage,
        copied_from=copied_from,
        can_change=owner,
        can_share=owner and not item.is_preset,
        share_workspaces=[(m.workspace.id, m.workspace.name) for m in cx.workspaces],
        default_share_workspace=version.shared_workspace_id or item.workspace_id,
        api=api_base(kind, item_id, number),
        file_url=lambda path: file_url(kind, item_id, number, path),
        browse_url=lambda **q: _browse_url(kind, item_id, number, **q),
    )


@dataclass
class Lineage:
    """Where a model version came from, as links: the job, and the versions it read that the reader may see."""

    job_id: int | None = None
    algorithm: catalog.VersionLink | None = None
    datasets: list[catalog.VersionLink] = field(default_factory=list)
    hidden: int = 0  # versions the reader may not see: counted, not named


async def _lineage(session: AsyncSession, cx: Console, raw: Any) -> Lineage | None:
    """The ``lineage`` metadata a job's output model carries (job_id, algorithm_version_id, dataset_version_ids)."""
    if not isinstance(raw, dict):
        return None
    algorithm = raw.get("algorithm_version_id")
    datasets = [v for v in raw.get("dataset_version_ids") or [] if isinstance(v, int)]
    wanted = [*datasets, *([algorithm] if isinstance(algorithm, int) else [])]
    links = await catalog.version_links(session, cx.actor, wanted)
    job_id = raw.get("job_id")
    return Lineage(
        job_id=job_id if isinstance(job_id, int) else None,
        algorithm=links.get(algorithm) if isinstance(algorithm, int) else None,
        datasets=[links[v] for v in datasets if v in links],
        hidden=sum(v not in links for v in wanted),
    )


def _browse_url(kind: ItemKind, item_id: int, number: int, **query: str) -> str:
    params = {k: v for k, v in query.items() if v}
    base = f"/{kind.plural}/{item_id}/versions/{number}"
    return f"{base}?{urlencode(params)}" if params else base


@each_kind("GET", VERSION, on=router)
async def version_page(kind: Kind, item_id: Id, number: Id, cx: Page) -> Response:
    return await _version(cx, kind, item_id, number)


# --- share, unshare, copy, delete --------------------------------------------------------------------------


@each_kind("POST", VERSION + "/share", on=router)
async def share_version(kind: Kind, item_id: Id, number: Id, post: Post) -> Response:
    cx = post.cx
    try:
        raw = post.get("visibility")
        if raw not in (Visibility.WORKSPACE, Visibility.PUBLIC):
            raise ValidationFailed("choose a workspace or public", field="visibility")
        visibility = Visibility(raw)
        workspace_id = None
        if visibility is Visibility.WORKSPACE:
            workspace_id = parse_int(post.get("workspace_id"), "workspace_id")
        async with cx.ctx.db.write() as session:
            version = await catalog.share_version(
                session, cx.actor, kind, item_id, number, visibility=visibility, workspace_id=workspace_id
            )
    except AicenterError as exc:
        state = failed_form("version-share", post.values, exc, ("visibility", "workspace_id"))
        return await _version(cx, kind, item_id, number, forms=[state], status=exc.status)
    where = f"workspace {version.shared_workspace_name}" if visibility is Visibility.WORKSPACE else "everyone"
    return redirect(cx, _browse_url(kind, item_id, number), f"Version {version.ref} is now shared with {where}.")


@each_kind("POST", VERSION + "/unshare", on=router)
async def unshare_version(kind: Kind, item_id: Id, number: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            version = await catalog.unshare_version(session, cx.actor, kind, item_id, number)
    except AicenterError as exc:
        return await _version(cx, kind, item_id, number, forms=[message_form("version-share", exc)], status=exc.status)
    return redirect(cx, _browse_url(kind, item_id, number), f"Version {version.ref} is private again.")


@each_kind("POST", VERSION + "/copy", on=router)
async def copy_version(kind: Kind, item_id: Id, number: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            copy = await catalog.copy_version(session, cx.actor, kind, item_id, number, name=post.get("name") or None)
    except AicenterError as exc:
        state = failed_form("version-copy", post.values, exc, ("name",))
        return await _version(cx, kind, item_id, number, forms=[state], status=exc.status)
    return redirect(
        cx, _browse_url(kind, copy.item_id, copy.number), f"Copied to {copy.ref}, a private version of your own."
    )


@each_kind("POST", VERSION + "/delete", on=router)
async def delete_version(kind: Kind, item_id: Id, number: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            ref = (await catalog.get_version(session, cx.actor, kind, item_id, number)).ref
            await catalog.delete_version(session, cx.actor, kind, item_id, number)
    except AicenterError as exc:
        return await _version(cx, kind, item_id, number, forms=[message_form("version-delete", exc)], status=exc.status)
    return redirect(cx, f"/{kind.plural}/{item_id}", f"Version {ref} was deleted.")


# --- image builds ------------------------------------------------------------------------------------------


@dataclass
class BuildStatus:
    """What the build panel shows; ``log_tail`` is None where the viewer may not read the log."""

    state: str
    error: str
    started_at: Any
    finished_at: Any
    log_tail: str | None
    url: str

    @property
    def running(self) -> bool:
        return self.state in BUILDING


async def _build(session: AsyncSession, cx: Console, item_id: int, number: int) -> BuildStatus | None:
    url = f"/images/{item_id}/versions/{number}/build"
    try:
        view = await catalog.get_build(session, cx.actor, cx.ctx.store, item_id, number)
    except NotFound:
        return None  # a container image: nothing is built
    except Forbidden:
        version = await catalog.get_version(session, cx.actor, ItemKind.IMAGE, item_id, number)
        return BuildStatus(version.state, "", None, None, None, url)
    return BuildStatus(view.state, view.error, view.started_at, view.finished_at, view.log_tail, url)


@router.get("/images/{item_id:int}/versions/{number:int}/build")
async def build_fragment(item_id: Id, number: Id, cx: Page) -> Response:
    """The build panel alone, for the page's script to swap in every 2 s while the build runs."""
    async with cx.ctx.db.read() as session:
        build = await _build(session, cx, item_id, number)
    if build is None:
        raise NotFound(f"image {item_id}:{number} has no build")
    context = {"build": build, "csrf": cx.csrf, "item_id": item_id, "number": number}
    html = render_template("catalog/_build.html", context)
    response = HTMLResponse(html, headers={"Cache-Control": "no-store"})
    return add_page_headers(response)


@router.post("/images/{item_id:int}/versions/{number:int}/rebuild")
async def rebuild(item_id: Id, number: Id, post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            await catalog.rebuild(session, cx.actor, item_id, number)
    except AicenterError as exc:
        return await _version(
            cx, ItemKind.IMAGE, item_id, number, forms=[message_form("build", exc)], status=exc.status
        )
    return redirect(cx, f"/images/{item_id}/versions/{number}", "The build was queued again.")
