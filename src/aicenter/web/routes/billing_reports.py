"""Billing reports in the console: machine-hours and spend per week, month or year by one dimension, as a
table and a chart, with a CSV download; platform admins also see the platform statistics summary. Reads only:
every change of the filters is a GET (no CSRF token)."""

from __future__ import annotations

from datetime import UTC, datetime, time
from typing import Any
from urllib.parse import urlencode

from fastapi import APIRouter
from starlette.responses import Response

from aicenter.core.billing_periods import Period, parse_day
from aicenter.core.errors import AicenterError, ValidationFailed
from aicenter.services import billing
from aicenter.web.console import Page, render
from aicenter.web.forms import FormState, failed_form, parse_id
from aicenter.web.nav import NAV, NavEntry

router = APIRouter()

NAV.append(
    NavEntry(
        "billing-reports",
        "Usage reports",
        "/billing/reports",
        description="Machine-hours and spend by week, month or year; by workspace, user, spec, GPU or kind.",
    )
)

FILTERS = ("period", "group_by", "from", "to", "workspace_id")
PERIODS = ("week", "month", "year")
GROUPS = ("workspace", "user", "spec", "gpu_type", "kind")


def _values(cx: Page) -> dict[str, str]:
    params = cx.request.query_params
    values = {k: params.get(k, "").strip() for k in FILTERS}
    values["period"] = values["period"] or "month"
    values["group_by"] = values["group_by"] or "kind"
    return values


async def _report(cx: Page, values: dict[str, str]) -> billing.Report:
    """The report the filters ask for. Raises ValidationFailed naming the filter at fault."""
    if values["period"] not in PERIODS:
        raise ValidationFailed(f"must be one of {', '.join(PERIODS)}", field="period")
    if values["group_by"] not in GROUPS:
        raise ValidationFailed(f"must be one of {', '.join(GROUPS)}", field="group_by")
    workspace_id = parse_id(values["workspace_id"], "workspace_id")
    async with cx.ctx.db.read() as session:
        return await billing.report(
            session,
            cx.actor,
            period=Period(values["period"]),
            group_by=billing.GroupBy(values["group_by"]),
            start=parse_day(values["from"], "from"),
            end=parse_day(values["to"], "to"),
            workspace_id=workspace_id,
        )


def _chart(report: billing.Report) -> list[dict[str, Any]]:
    """One line per group: its spend per bucket (0 where none), x in ms since the epoch (charts.js)."""
    by_group: dict[str, dict[Any, float]] = {g: {} for g in report.groups}
    for row in report.rows:
        by_group[row.group][row.bucket] = float(row.amount)  # display only: the table shows the exact amounts
    return [
        {
            "label": group,
            "points": [
                {"x": int(datetime.combine(b, time(), UTC).timestamp() * 1000), "y": values.get(b, 0.0)}
                for b in report.buckets
            ],
        }
        for group, values in by_group.items()
    ]


@router.get("/billing/reports")
async def billing_reports(cx: Page) -> Response:
    values = _values(cx)
    forms: list[FormState] = []
    report: billing.Report | None = None
    stats: billing.Stats | None = None
    status = 200
    try:
        report = await _report(cx, values)
        if cx.actor.is_platform_admin:
            async with cx.ctx.db.read() as session:
                stats = await billing.stats(session, cx.actor, period=report.period, start=report.start, end=report.end)
    except AicenterError as exc:
        forms.append(failed_form("billing-report", values, exc, FILTERS))
        status = exc.status
    query = urlencode({k: v for k, v in values.items() if v})
    return render(
        cx,
        "billing/reports.html",
        active="billing-reports",
        title="Usage reports",
        forms=forms,
        status=status,
        filters=values,
        periods=PERIODS,
        groups=GROUPS,
        report=report,
        chart=_chart(report) if report else [],
        stats=stats,
        csv_url=f"/billing/reports.csv?{query}",
    )


@router.get("/billing/reports.csv")
async def billing_reports_csv(cx: Page) -> Response:
    """The page's report as a CSV download (a bad filter: the page with its error)."""
    values = _values(cx)
    try:
        report = await _report(cx, values)
    except AicenterError:
        return await billing_reports(cx)
    return Response(
        billing.report_csv(report),
        media_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{billing.report_filename(report)}"'},
    )
