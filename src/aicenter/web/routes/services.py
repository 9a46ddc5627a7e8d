"""Inference services in the console: the list (the seed's fields plus replicas ready/total).

Who sees what follows the service layer: members see their workspaces' services, platform admins all of them.
The detail page is read-only; the deploy form, actions, charts and try-it form are not built yet
(docs/services-console.md); the REST API (``/api/v1/services``) does all of it.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.serving.apidoc import build_api_doc
from aicenter.services import serving
from aicenter.web.console import Page, first_page_url, page_url, render

router = APIRouter()


def running_label(seconds: float) -> str:
    """``—`` (not serving), ``12 min``, ``3.5 h`` or ``2.0 d``."""
    if seconds <= 0:
        return "—"
    if seconds < 3600:
        return f"{int(seconds // 60)} min"
    if seconds < 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} d"


@router.get("/services")
async def list_services(cx: Page) -> Response:
    params = cx.request.query_params
    async with cx.ctx.db.read() as session:
        page = await serving.list_services(session, cx.actor, cursor=params.get("cursor") or None, limit=50)
    return render(
        cx,
        "services/list.html",
        active="services",
        title="Services",
        rows=page.items,
        running={v.service.id: running_label(v.running_s) for v in page.items},
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/services/{service_id}")
async def service_page(service_id: Id, cx: Page) -> Response:
    """Status, URL, revisions, live replicas (linked to their job pages for logs and events) and the generated API
    document's inputs/outputs and client snippets. Unknown or unseen services are 404 (the service layer's)."""
    async with cx.ctx.db.read() as session:
        view = await serving.get_service(session, cx.actor, service_id)
    stable = next((r for r in view.revisions if r.id == view.service.stable_revision_id), None)
    doc = build_api_doc(
        service_name=view.service.name,
        url_path=view.url_path,
        base_url=cx.ctx.settings.api_url,
        signature=stable.signature if stable is not None else None,
        runtime=stable.runtime if stable is not None else view.runtime,
        revision=stable.number if stable is not None else None,
    )
    return render(
        cx,
        "services/detail.html",
        active="services",
        title=f"Service {view.service.name}",
        v=view,
        doc=doc,
        public_url=cx.ctx.settings.api_url + view.url_path,
        running=running_label(view.running_s),
    )
