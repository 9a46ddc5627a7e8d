"""The home page: who you are, your current workspace with its quotas, and what you can do here."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.services import quotas
from aicenter.web.console import Page, render
from aicenter.web.nav import visible_sections

router = APIRouter()


@router.get("/")
async def home(cx: Page) -> Response:
    quota_views: list[quotas.QuotaView] = []
    if cx.workspace is not None:
        async with cx.ctx.db.read() as session:
            quota_views = await quotas.list_quotas(session, cx.actor, cx.workspace.id)
    actions = [e for _, entries in visible_sections(cx) for e in entries if e.description]
    return render(cx, "home.html", active="home", title="Home", quotas=quota_views, actions=actions)
