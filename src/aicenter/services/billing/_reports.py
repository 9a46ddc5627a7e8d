"""Reports: machine-hours and spend per period bucket and one dimension, from the day rollups (never the
ledger's entries: a yearly report reads at most 366 days x its keys), CSV export, and the platform statistics
summary for admins. Members see their workspaces; platform admins every workspace."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time
from decimal import Decimal
from enum import StrEnum
from typing import Any

from sqlalchemy import distinct, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core.billing_periods import Period, bucket_start, buckets, report_range
from aicenter.core.clock import utcnow
from aicenter.db.models import BillingMeter, BillingRollup, User, Workspace
from aicenter.services.access import get_visible_workspace, member_workspace_ids, require_platform_admin
from aicenter.services.context import Actor


class GroupBy(StrEnum):
    WORKSPACE = "workspace"
    USER = "user"
    SPEC = "spec"
    GPU_TYPE = "gpu_type"
    KIND = "kind"


_COLUMN = {
    GroupBy.WORKSPACE: BillingRollup.workspace_id,
    GroupBy.USER: BillingRollup.user_id,
    GroupBy.SPEC: BillingRollup.spec_name,
    GroupBy.GPU_TYPE: BillingRollup.gpu_type,
    GroupBy.KIND: BillingRollup.kind,
}
NONE_LABEL = "(none)"


@dataclass(frozen=True)
class ReportRow:
    """One bucket of one group: ``bucket`` is the first day of the period (UTC)."""

    bucket: date
    group: str
    machine_hours: Decimal
    amount: Decimal  # coins charged (positive: spent)
    entries: int


@dataclass(frozen=True)
class Report:
    period: Period
    group_by: GroupBy
    start: date  # the range is [start, end)
    end: date
    buckets: list[date]
    groups: list[str]
    rows: list[ReportRow]
    machine_hours: Decimal = Decimal(0)
    amount: Decimal = Decimal(0)


@dataclass(frozen=True)
class Stats:
    """The platform in a range: accounts, activity, and machine-hours per accelerator type and period."""

    period: Period
    start: date
    end: date
    users: int
    workspaces: int
    active_workspaces: int  # charged in the range
    jobs: int  # jobs, notebooks and services with a copy running in the range (deleted ones included)
    machine_hours: Decimal
    amount: Decimal
    buckets: list[date]
    hours_by_gpu_type: dict[str, list[Decimal]] = field(default_factory=dict)  # per bucket, "" none


def _hours(microhours: int) -> Decimal:
    return Decimal(int(microhours)).scaleb(-billing.HOURS_PLACES)


def _coins(cents: int) -> Decimal:
    return Decimal(int(cents)).scaleb(-billing.MINOR_PLACES)


async def _labels(session: AsyncSession, group_by: GroupBy, keys: set[Any]) -> dict[Any, str]:
    """Readable names of the groups: names of workspaces and users (still readable once deleted)."""
    if group_by is GroupBy.WORKSPACE:
        names = dict((await session.execute(select(Workspace.id, Workspace.name).where(Workspace.id.in_(keys)))).all())
        return {k: names.get(k, f"workspace {k}") for k in keys}
    if group_by is GroupBy.USER:
        names = dict((await session.execute(select(User.id, User.username).where(User.id.in_(keys)))).all())
        return {k: names.get(k, f"user {k}") if k else NONE_LABEL for k in keys}
    return {k: k or NONE_LABEL for k in keys}


async def report(
    session: AsyncSession,
    actor: Actor,
    *,
    period: Period,
    group_by: GroupBy,
    start: date | None = None,
    end: date | None = None,
    anchor: date | None = None,
    workspace_id: int | None = None,
    user_id: int | None = None,
) -> Report:
    """Machine-hours and spend per ``period`` bucket and ``group_by`` group over ``[start, end)`` (or the
    period holding ``anchor``, default today, UTC), of the workspaces the actor sees (or ``workspace_id``).

    Raises:
        ValidationFailed: one end of the range only, a reversed or empty range, or one over five years.
        NotFound: ``workspace_id`` is not one the actor sees.
    """
    start, end = report_range(period, start, end, anchor or utcnow().date())
    column = _COLUMN[group_by]
    r = BillingRollup
    stmt = (
        select(r.day, column, func.sum(r.microhours), func.sum(r.cents), func.sum(r.entries))
        .where(r.day >= start, r.day < end)
        .group_by(r.day, column)
    )
    if workspace_id is not None:
        await get_visible_workspace(session, actor, workspace_id)
        stmt = stmt.where(r.workspace_id == workspace_id)
    elif not actor.is_platform_admin:
        stmt = stmt.where(r.workspace_id.in_(member_workspace_ids(actor)))
    if user_id is not None:
        stmt = stmt.where(r.user_id == user_id)
    sums: dict[tuple[date, Any], list[int]] = {}
    for day, key, microhours, cents, entries in (await session.execute(stmt)).all():
        if isinstance(day, str):  # SQLite returns a Date column as text inside an aggregate query
            day = date.fromisoformat(day)
        acc = sums.setdefault((bucket_start(day, period), key), [0, 0, 0])
        acc[0] += int(microhours)
        acc[1] += int(cents)
        acc[2] += int(entries)
    labels = await _labels(session, group_by, {key for _, key in sums})
    rows = sorted(
        (ReportRow(b, labels[k], _hours(v[0]), _coins(v[1]), v[2]) for (b, k), v in sums.items()),
        key=lambda row: (row.bucket, row.group),
    )
    return Report(
        period,
        group_by,
        start,
        end,
        buckets(start, end, period),
        sorted({row.group for row in rows}),
        rows,
        sum((row.machine_hours for row in rows), Decimal(0)),
        sum((row.amount for row in rows), Decimal(0)),
    )


def report_csv(report: Report) -> str:
    """The report as CSV: one line per bucket and group, with a header; amounts as exact decimals."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(["period_start", report.group_by.value, "machine_hours", "amount", "entries"])
    for row in report.rows:
        writer.writerow([row.bucket.isoformat(), row.group, f"{row.machine_hours:f}", f"{row.amount:f}", row.entries])
    return out.getvalue()


def report_filename(report: Report) -> str:
    """The CSV download's file name, the same from the API and the console: what, by what, from when."""
    return f"billing-{report.period.value}-{report.group_by.value}-{report.start.isoformat()}.csv"


async def stats(
    session: AsyncSession,
    actor: Actor,
    *,
    period: Period,
    start: date | None = None,
    end: date | None = None,
    anchor: date | None = None,
) -> Stats:
    """The platform statistics summary (platform admins): users, workspaces, the workspaces charged and the
    jobs that ran in the range, and machine-hours per accelerator type per bucket (the utilization trend: the
    accelerator time billed, which is the time copies held their devices).

    Raises:
        Forbidden: not a platform admin.
        ValidationFailed: a bad range, as ``report``.
    """
    require_platform_admin(actor, "platform statistics")
    start, end = report_range(period, start, end, anchor or utcnow().date())
    r = BillingRollup
    in_range = (r.day >= start, r.day < end)
    users = await session.scalar(select(func.count()).select_from(User).where(User.state == "active"))
    workspaces = await session.scalar(select(func.count()).select_from(Workspace))
    active = await session.scalar(select(func.count(distinct(r.workspace_id))).where(*in_range))
    since, until = datetime.combine(start, time(), UTC), datetime.combine(end, time(), UTC)
    m = BillingMeter
    jobs = await session.scalar(
        select(func.count(distinct(m.job_id))).where(
            m.started_at < until, or_(m.finished_at.is_(None), m.finished_at >= since)
        )
    )
    edges = buckets(start, end, period)
    index = {b: i for i, b in enumerate(edges)}
    by_type: dict[str, list[Decimal]] = {}
    total_hours, total_cents = Decimal(0), 0
    rows = await session.execute(
        select(r.day, r.gpu_type, func.sum(r.microhours), func.sum(r.cents))
        .where(*in_range)
        .group_by(r.day, r.gpu_type)
    )
    for day, gpu_type, microhours, cents in rows.all():
        if isinstance(day, str):
            day = date.fromisoformat(day)
        series = by_type.setdefault(gpu_type, [Decimal(0)] * len(edges))
        series[index[bucket_start(day, period)]] += _hours(microhours)
        total_hours += _hours(microhours)
        total_cents += int(cents)
    return Stats(
        period,
        start,
        end,
        int(users or 0),
        int(workspaces or 0),
        int(active or 0),
        int(jobs or 0),
        total_hours,
        _coins(total_cents),
        edges,
        dict(sorted(by_type.items())),
    )
