"""Inference services in the console: the list (the seed's fields plus replicas ready/total).

Who sees what follows the service layer: members see their workspaces' services, platform admins all of them.
The detail page, deploy form and actions are not built yet (docs/services-console.md); the REST API
(``/api/v1/services``) does all of it.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

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
