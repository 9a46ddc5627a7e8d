"""The audit log (platform admins): who did what to which target, when and from where; filters and pages."""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.services import audit
from aicenter.web.console import Page, first_page_url, page_url, render
from aicenter.web.forms import FormState, failed_form, parse_id

router = APIRouter()

FILTERS = ("actor", "action", "target_type", "target_id", "workspace_id", "since", "until")


def _day(raw: str, field: str, *, end: bool = False) -> datetime | None:
    """A ``YYYY-MM-DD`` filter as a UTC time: the start of the day, or for ``until`` the end of it (inclusive)."""
    if not raw:
        return None
    try:
        day = date.fromisoformat(raw)
    except ValueError:
        raise ValidationFailed(f'"{raw}" is not a date (YYYY-MM-DD)', field=field) from None
    return datetime.combine(day + timedelta(days=1) if end else day, time(), tzinfo=UTC)


@router.get("/audit")
async def audit_log(cx: Page) -> Response:
    params = cx.request.query_params
    values = {k: params.get(k, "").strip() for k in FILTERS}
    forms: list[FormState] = []
    events = []
    next_url = None
    status = 200
    try:
        workspace_id = parse_id(values["workspace_id"], "workspace_id")
        since = _day(values["since"], "since")
        until = _day(values["until"], "until", end=True)
        async with cx.ctx.db.read() as session:
            page = await audit.list_events(
                session,
                cx.actor,
                limit=50,
                cursor=params.get("cursor") or None,
                actor_name=values["actor"] or None,
                action=values["action"] or None,
                target_type=values["target_type"] or None,
                target_id=values["target_id"] or None,
                workspace_id=workspace_id,
                since=since,
                until=until,
            )
        events = page.items
        next_url = page_url(cx.request, page.next_cursor)
    except AicenterError as exc:
        if exc.status == 403:
            raise  # members: the 403 page
        forms.append(failed_form("audit-filter", values, exc, (*FILTERS, "cursor")))
        status = exc.status
    return render(
        cx,
        "audit.html",
        active="audit",
        title="Audit log",
        forms=forms,
        status=status,
        events=events,
        filters=values,
        next_url=next_url,
        first_url=first_page_url(cx.request),
    )
