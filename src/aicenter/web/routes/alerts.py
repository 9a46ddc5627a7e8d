"""The console's Alerts page (alerts, rules, silences) and Events page (the cluster event log), and the recent
alerts partial the home page shows (``recent_alerts`` + ``alerts/_recent.html``)."""

from __future__ import annotations

from fastapi import APIRouter
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.responses import Response

from aicenter.api.params import Id
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.services import alerts
from aicenter.services.context import Actor
from aicenter.web.console import Console, Page, Post, first_page_url, page_url, redirect, render
from aicenter.web.forms import FormState, failed_form, parse_key_values
from aicenter.web.nav import NAV, NavEntry

router = APIRouter()

NAV.append(NavEntry("alerts", "Alerts", "/alerts", description="Firing alerts, alert rules and silences."))
NAV.append(NavEntry("events", "Events", "/events", description="Nodes joined, lost or cordoned, preemptions, alerts."))

STATES = ("firing", "pending", "resolved", "all")
RULE_FIELDS = ("name", "expression", "for_s", "severity", "description")
SILENCE_FIELDS = ("matchers", "duration_s", "comment")


async def recent_alerts(session: AsyncSession, actor: Actor, limit: int = 5) -> list[alerts.AlertView]:
    """The newest firing alerts the actor sees, for the home page's ``alerts/_recent.html`` partial."""
    page = await alerts.list_alerts(session, actor, state="firing", limit=limit)
    return page.items


async def _alerts_page(cx: Console, *, forms: list[FormState] | None = None, status: int = 200) -> Response:
    params = cx.request.query_params
    state = params.get("state", "firing")
    if state not in STATES:
        state = "firing"
    async with cx.ctx.db.read() as session:
        page = await alerts.list_alerts(
            session, cx.actor, state=None if state == "all" else state, limit=50, cursor=params.get("cursor") or None
        )
        rules = await alerts.list_rules(session, cx.actor)
        silences = await alerts.list_silences(session, cx.actor)
    return render(
        cx,
        "alerts/alerts.html",
        active="alerts",
        title="Alerts",
        forms=forms,
        status=status,
        alerts=page.items,
        state=state,
        states=STATES,
        rules=rules,
        silences=silences,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )


@router.get("/alerts")
async def alerts_page(cx: Page) -> Response:
    return await _alerts_page(cx)


def _int(raw: str, field: str) -> int:
    if not raw.strip().isdigit():
        raise ValidationFailed("must be a whole number of seconds", field=field)
    return int(raw)


@router.post("/alerts/rules")
async def add_rule(post: Post) -> Response:
    cx = post.cx
    try:
        async with cx.ctx.db.write() as session:
            rule = await alerts.create_rule(
                session,
                cx.actor,
                name=post.get("name"),
                expression=post.get("expression"),
                for_s=_int(post.get("for_s", "0") or "0", "for_s"),
                severity=post.get("severity", "warning") or "warning",
                description=post.get("description"),
            )
    except AicenterError as exc:
        return await _alerts_page(cx, forms=[failed_form("rule-add", post.values, exc, RULE_FIELDS)], status=exc.status)
    return redirect(cx, "/alerts", f"Alert rule {rule.name} was added.")


@router.post("/alerts/rules/{rule_id:int}/enabled")
async def toggle_rule(rule_id: Id, post: Post) -> Response:
    cx = post.cx
    enabled = post.get("enabled") == "true"
    async with cx.ctx.db.write() as session:
        rule = await alerts.update_rule(session, cx.actor, rule_id, enabled=enabled)
    return redirect(cx, "/alerts", f"Alert rule {rule.name} is {'enabled' if enabled else 'disabled'}.")


@router.post("/alerts/silences")
async def add_silence(post: Post) -> Response:
    cx = post.cx
    try:
        matchers = parse_key_values(post.get("matchers"), "matchers")
        async with cx.ctx.db.write() as session:
            await alerts.create_silence(
                session,
                cx.actor,
                matchers={k: str(v) for k, v in matchers.items()},
                duration_s=_int(post.get("duration_s", "3600") or "3600", "duration_s"),
                comment=post.get("comment"),
            )
    except AicenterError as exc:
        forms = [failed_form("silence-add", post.values, exc, SILENCE_FIELDS)]
        return await _alerts_page(cx, forms=forms, status=exc.status)
    return redirect(cx, "/alerts", "Silence added.")


@router.post("/alerts/silences/{silence_id:int}/expire")
async def expire_silence(silence_id: Id, post: Post) -> Response:
    cx = post.cx
    async with cx.ctx.db.write() as session:
        await alerts.expire_silence(session, cx.actor, silence_id)
    return redirect(cx, "/alerts", "Silence ended.")


@router.get("/events")
async def events_page(cx: Page) -> Response:
    params = cx.request.query_params
    kind = params.get("kind", "").strip()
    async with cx.ctx.db.read() as session:
        page = await alerts.list_events(
            session, cx.actor, limit=50, cursor=params.get("cursor") or None, kind=kind[:64] or None
        )
    return render(
        cx,
        "alerts/events.html",
        active="events",
        title="Events",
        events=page.items,
        kind=kind,
        next_url=page_url(cx.request, page.next_cursor),
        first_url=first_page_url(cx.request),
    )
