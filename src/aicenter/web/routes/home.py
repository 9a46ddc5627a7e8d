"""The home page: the overview dashboard (what the center, or the member's workspaces, are doing now, with live
charts), who you are, your current workspace with its quotas, and what you can do here."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.services import monitoring, quotas
from aicenter.web.console import Page, render
from aicenter.web.nav import visible_sections
from aicenter.web.routes.alerts import recent_alerts

router = APIRouter()


@router.get("/")
async def home(cx: Page) -> Response:
    quota_views: list[quotas.QuotaView] = []
    async with cx.ctx.db.read() as session:
        overview = await monitoring.overview(session, cx.actor)
        recent = await recent_alerts(session, cx.actor)
        if cx.workspace is not None:
            quota_views = await quotas.list_quotas(session, cx.actor, cx.workspace.id)
    actions = [e for _, entries in visible_sections(cx) for e in entries if e.description]
    return render(
        cx,
        "home.html",
        active="home",
        title="Home",
        overview=overview,
        recent=recent,
        quotas=quota_views,
        actions=actions,
    )
