"""Billing: a workspace's balance and ledger (its members), admin entries and the reconciliation (platform
admins). Thin: each route calls one function of ``services.billing``."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response, status

from aicenter.api.access import Access, access
from aicenter.api.deps import CurrentActor, Paging, ReadSession, WriteSession
from aicenter.api.params import Id
from aicenter.api.schemas.billing import (
    BalanceOut,
    CostOut,
    EntryCreate,
    EntryOut,
    MismatchOut,
    PolicyIn,
    PolicyOut,
    ReportOut,
    StatsOut,
    VerifyOut,
)
from aicenter.api.schemas.common import ERROR_RESPONSES, Page
from aicenter.core.billing_periods import Period, parse_day
from aicenter.core.clock import utcnow
from aicenter.services import billing, jobs, serving

router = APIRouter(prefix="/api/v1", tags=["billing"], responses=ERROR_RESPONSES)

_Kind = Annotated[
    Literal["charge", "recharge", "refund", "adjustment"] | None, Query(description="Only entries of this kind.")
]


@router.get("/workspaces/{workspace_id}/balance", openapi_extra=access(Access.WORKSPACE))
async def get_balance(workspace_id: Id, actor: CurrentActor, session: ReadSession) -> BalanceOut:
    """The workspace's balance in coins (a personal workspace is its user's account)."""
    return BalanceOut.model_validate(await billing.get_balance(session, actor, workspace_id))


@router.get("/workspaces/{workspace_id}/ledger", openapi_extra=access(Access.WORKSPACE))
async def list_ledger(
    workspace_id: Id, actor: CurrentActor, session: ReadSession, paging: Paging, kind: _Kind = None
) -> Page[EntryOut]:
    """Every movement of the workspace's balance (charges per copy and period, recharges, refunds,
    adjustments), newest first."""
    page = await billing.list_ledger(
        session,
        actor,
        workspace_id,
        kind=billing.EntryKind(kind) if kind else None,
        limit=paging.limit,
        cursor=paging.cursor,
    )
    return Page(items=[EntryOut.model_validate(e) for e in page.items], next_cursor=page.next_cursor)


@router.post(
    "/workspaces/{workspace_id}/ledger", status_code=status.HTTP_201_CREATED, openapi_extra=access(Access.ADMIN)
)
async def add_entry(workspace_id: Id, body: EntryCreate, actor: CurrentActor, session: WriteSession) -> EntryOut:
    """Recharge, refund or adjust a workspace's balance, with a reason (platform admins). A bad amount (negative,
    0, not a number, more than 2 decimal places) is 422 `validation_failed` naming `amount`; nothing is
    written. The same `idempotency_key` again answers the first entry; for another amount, 409 `conflict`."""
    entry = await billing.add_entry(
        session, actor, workspace_id, body.kind, body.amount, reason=body.reason, idempotency_key=body.idempotency_key
    )
    return EntryOut.model_validate(entry)


@router.get("/billing/verify", openapi_extra=access(Access.ADMIN))
async def verify(actor: CurrentActor, session: ReadSession) -> VerifyOut:
    """Recompute the formula over every closed copy and compare with the ledger, and every balance with the sum
    of its entries (platform admins)."""
    mismatches = await billing.verify(session, actor)
    return VerifyOut(ok=not mismatches, mismatches=[MismatchOut.model_validate(m) for m in mismatches])


@router.get("/jobs/{job_id}/cost", openapi_extra=access(Access.USER))
async def job_cost(job_id: Id, actor: CurrentActor, session: ReadSession) -> CostOut:
    """A job's (or notebook's) machine-hours and cost: final once its copies ended, estimated up to now while one
    runs (members of its workspace, platform admins)."""
    job = await jobs.load_job(session, actor, job_id)  # members of its workspace, platform admins; else 404
    return CostOut.model_validate(await billing.job_cost(session, job.id, utcnow()))


@router.get("/services/{service_id}/cost", openapi_extra=access(Access.USER))
async def service_cost(service_id: Id, actor: CurrentActor, session: ReadSession) -> CostOut:
    """The machine-hours and cost of a service's current replica jobs, estimated up to now while they run."""
    service = await serving.load_service(session, actor, service_id)
    return CostOut.model_validate(await billing.service_cost(session, service.id, utcnow()))


@router.get("/workspaces/{workspace_id}/billing-policy", openapi_extra=access(Access.WORKSPACE))
async def get_policy(workspace_id: Id, actor: CurrentActor, session: ReadSession) -> PolicyOut:
    """The workspace's billing policy (arrears mode, grace, monthly limit), its phase, balance and this month's
    spend. No policy set reads as arrears `off` without a limit: nothing is ever refused or stopped."""
    return PolicyOut.model_validate(await billing.get_policy(session, actor, workspace_id))


@router.put("/workspaces/{workspace_id}/billing-policy", openapi_extra=access(Access.ADMIN))
async def set_policy(workspace_id: Id, body: PolicyIn, actor: CurrentActor, session: WriteSession) -> PolicyOut:
    """Set the workspace's billing policy (platform admins). An unknown mode, a grace outside 0..43200 minutes or
    a limit that is not a positive amount of at most 2 decimal places is 422 `validation_failed` naming the
    field; nothing is written."""
    view = await billing.set_policy(
        session,
        actor,
        workspace_id,
        arrears=body.arrears,
        grace_minutes=body.grace_minutes,
        monthly_limit=body.monthly_limit,
    )
    return PolicyOut.model_validate(view)


_Period = Annotated[
    Literal["week", "month", "year"], Query(description="Bucket size: UTC weeks (Monday), months, years.")
]
_From = Annotated[str | None, Query(alias="from", description="First day, YYYY-MM-DD (with `to`).")]
_To = Annotated[str | None, Query(description="First day after the range, YYYY-MM-DD (with `from`).")]
_Anchor = Annotated[
    str | None, Query(description="Without from/to: the report is the period holding this day (default today).")
]


@router.get("/billing/report", openapi_extra=access(Access.USER), response_model=ReportOut)
async def billing_report(
    actor: CurrentActor,
    session: ReadSession,
    period: _Period = "month",
    group_by: Annotated[
        Literal["workspace", "user", "spec", "gpu_type", "kind"], Query(description="The one dimension.")
    ] = "workspace",
    from_: _From = None,
    to: _To = None,
    anchor: _Anchor = None,
    workspace_id: Annotated[
        Id | None, Query(description="Only this workspace (a member's or any, for admins).")
    ] = None,
    user_id: Annotated[Id | None, Query(description="Only this user's copies.")] = None,
    format: Annotated[Literal["json", "csv"], Query(description="csv: one line per bucket and group.")] = "json",
) -> ReportOut | Response:
    """Machine-hours and spend per period and group over `[from, to)` (both, at most five years) or the period
    holding `anchor`, of the workspaces the caller is a member of (platform admins: all). One end only, a
    reversed range or a bad date: 422 `validation_failed` naming the field."""
    result = await billing.report(
        session,
        actor,
        period=Period(period),
        group_by=billing.GroupBy(group_by),
        start=parse_day(from_, "from"),
        end=parse_day(to, "to"),
        anchor=parse_day(anchor, "anchor"),
        workspace_id=workspace_id,
        user_id=user_id,
    )
    if format == "csv":
        return Response(
            billing.report_csv(result),
            media_type="text/csv",
            headers={"Content-Disposition": f'attachment; filename="{billing.report_filename(result)}"'},
        )
    return ReportOut.model_validate(result)


@router.get("/billing/stats", openapi_extra=access(Access.ADMIN))
async def billing_stats(
    actor: CurrentActor,
    session: ReadSession,
    period: _Period = "month",
    from_: _From = None,
    to: _To = None,
    anchor: _Anchor = None,
) -> StatsOut:
    """The platform statistics summary (platform admins): users, workspaces, active workspaces, jobs that ran,
    machine-hours and spend, and machine-hours per accelerator type per period."""
    result = await billing.stats(
        session,
        actor,
        period=Period(period),
        start=parse_day(from_, "from"),
        end=parse_day(to, "to"),
        anchor=parse_day(anchor, "anchor"),
    )
    return StatsOut.model_validate(result)
