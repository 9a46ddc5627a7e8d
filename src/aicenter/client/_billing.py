"""Billing: a workspace's balance and ledger; admin recharges, refunds, adjustments and the reconciliation."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from aicenter.client._base import UNSET, BaseClient, body, query
from aicenter.client.models import ApiModel, Page


class Balance(ApiModel):
    workspace_id: int
    workspace: str
    balance: Decimal  # coins; negative when in arrears


class LedgerEntry(ApiModel):
    id: int
    workspace_id: int
    kind: str  # charge, recharge, refund, adjustment
    amount: Decimal  # signed: + credits the workspace
    machine_hours: Decimal
    idempotency_key: str
    job_id: int | None = None
    replica_id: int | None = None
    period_start: datetime | None = None
    period_end: datetime | None = None
    reason: str = ""
    actor_name: str = ""
    created_at: datetime | None = None


class Mismatch(ApiModel):
    what: str  # replica or workspace
    id: int
    expected: Decimal
    recorded: Decimal


class Verification(ApiModel):
    ok: bool
    mismatches: list[Mismatch]


class Cost(ApiModel):
    machine_hours: Decimal
    amount: Decimal  # coins
    estimated: bool  # a copy still runs: counted up to ``at``
    charged: Decimal  # what the meter charged so far
    copies: int
    at: datetime


class BillingPolicy(ApiModel):
    workspace_id: int
    workspace: str
    arrears: str  # off, warn or stop
    grace_minutes: int
    monthly_limit: Decimal | None = None  # None: no limit
    phase: str  # ok, warned or stopped
    arrears_since: datetime | None = None
    cause: str | None = None  # balance or limit, while in arrears
    balance: Decimal
    month_spend: Decimal  # coins charged since the start of this month (UTC)


class BillingMixin(BaseClient):
    def balance(self, workspace_id: int) -> Balance:
        """A workspace's balance in coins (members and platform admins)."""
        return self._one(Balance, "GET", f"/workspaces/{workspace_id}/balance")

    def ledger_page(
        self, workspace_id: int, *, kind: str | None = None, limit: int | None = None, cursor: str | None = None
    ) -> Page[LedgerEntry]:
        """One page of a workspace's ledger, newest first; ``kind``: charge, recharge, refund or adjustment."""
        return self._page(
            LedgerEntry, f"/workspaces/{workspace_id}/ledger", query(kind=kind), limit=limit, cursor=cursor
        )

    def ledger(self, workspace_id: int, *, kind: str | None = None) -> Iterator[LedgerEntry]:
        """Every entry of a workspace's ledger, newest first, fetched page by page as it is iterated."""
        return self._iterate(lambda cursor: self.ledger_page(workspace_id, kind=kind, cursor=cursor))

    def add_ledger_entry(
        self,
        workspace_id: int,
        kind: str,
        amount: Decimal | str | int,
        reason: str,
        *,
        idempotency_key: str | None = None,
    ) -> LedgerEntry:
        """Recharge, refund or adjust a workspace's balance (platform admins).

        Args:
            kind: ``recharge`` or ``refund`` (credits, more than 0) or ``adjustment`` (either sign, not 0).
            amount: Coins, at most 2 decimal places (a string or Decimal; floats are refused by the server).
            reason: Why; kept in the ledger.
            idempotency_key: Retrying with the same key returns the first entry instead of writing a second.

        Raises:
            ApiError: ``validation_failed`` (details.field ``amount`` or ``reason``), ``not_found`` (no such
                workspace), ``forbidden``, ``conflict`` (the key was used for another entry).
        """
        return self._one(
            LedgerEntry,
            "POST",
            f"/workspaces/{workspace_id}/ledger",
            json=body(kind=kind, amount=str(amount), reason=reason, idempotency_key=idempotency_key or UNSET),
        )

    def verify_billing(self) -> Verification:
        """Recompute the formula over every closed copy and compare with the ledger (platform admins)."""
        return self._one(Verification, "GET", "/billing/verify")

    def job_cost(self, job_id: int) -> Cost:
        """A job's or notebook's machine-hours and cost (estimated up to now while a copy runs)."""
        return self._one(Cost, "GET", f"/jobs/{job_id}/cost")

    def service_cost(self, service_id: int) -> Cost:
        """The machine-hours and cost of a service's current replica jobs."""
        return self._one(Cost, "GET", f"/services/{service_id}/cost")

    def billing_policy(self, workspace_id: int) -> BillingPolicy:
        """A workspace's billing policy, phase, balance and this month's spend (members and platform admins)."""
        return self._one(BillingPolicy, "GET", f"/workspaces/{workspace_id}/billing-policy")

    def set_billing_policy(
        self,
        workspace_id: int,
        arrears: str,
        *,
        grace_minutes: int = 0,
        monthly_limit: Decimal | str | int | None = None,
    ) -> BillingPolicy:
        """Set a workspace's billing policy (platform admins).

        Args:
            arrears: ``off``, ``warn`` (new work refused in arrears) or ``stop`` (also stops its notebooks and
                jobs and scales its services to zero after ``grace_minutes``).
            monthly_limit: Coins charged per calendar month (UTC) at most; None: no limit.

        Raises:
            ApiError: ``validation_failed`` naming ``arrears``, ``grace_minutes`` or ``monthly_limit``;
                ``forbidden``; ``not_found``.
        """
        limit = None if monthly_limit is None else str(monthly_limit)
        return self._one(
            BillingPolicy,
            "PUT",
            f"/workspaces/{workspace_id}/billing-policy",
            json={"arrears": arrears, "grace_minutes": grace_minutes, "monthly_limit": limit},
        )


class ReportRow(ApiModel):
    bucket: date  # the first day (UTC) of the week, month or year
    group: str
    machine_hours: Decimal
    amount: Decimal  # coins spent
    entries: int = 0


class Report(ApiModel):
    period: str
    group_by: str
    start: date
    end: date  # excluded
    buckets: list[date]
    groups: list[str]
    rows: list[ReportRow]
    machine_hours: Decimal
    amount: Decimal


class BillingStats(ApiModel):
    period: str
    start: date
    end: date
    users: int
    workspaces: int
    active_workspaces: int
    jobs: int
    machine_hours: Decimal
    amount: Decimal
    buckets: list[date]
    hours_by_gpu_type: dict[str, list[Decimal]]


def _range(period: str, start: date | str | None, end: date | str | None, anchor: date | str | None) -> dict[str, Any]:
    return query(period=period, anchor=_day(anchor), **{"from": _day(start), "to": _day(end)})


def _day(value: date | str | None) -> str | None:
    return value.isoformat() if isinstance(value, date) else value


def _report_params(
    period: str,
    group_by: str,
    start: date | str | None,
    end: date | str | None,
    anchor: date | str | None,
    workspace_id: int | None,
    user_id: int | None,
) -> dict[str, Any]:
    return _range(period, start, end, anchor) | query(group_by=group_by, workspace_id=workspace_id, user_id=user_id)


class BillingReportsMixin(BaseClient):
    def billing_report(
        self,
        *,
        period: str = "month",
        group_by: str = "workspace",
        start: date | str | None = None,
        end: date | str | None = None,
        anchor: date | str | None = None,
        workspace_id: int | None = None,
        user_id: int | None = None,
    ) -> Report:
        """Machine-hours and spend per ``period`` (week, month, year; UTC) and ``group_by`` (workspace, user,
        spec, gpu_type, kind) over ``[start, end)`` (both or neither: then the period holding ``anchor``, default
        today), of the workspaces you are a member of (platform admins: all).

        Raises:
            ApiError: ``validation_failed`` for one end only, a reversed range or one over five years.
        """
        params = _report_params(period, group_by, start, end, anchor, workspace_id, user_id)
        return self._one(Report, "GET", "/billing/report", params=params)

    def billing_report_csv(
        self,
        *,
        period: str = "month",
        group_by: str = "workspace",
        start: date | str | None = None,
        end: date | str | None = None,
        anchor: date | str | None = None,
        workspace_id: int | None = None,
        user_id: int | None = None,
    ) -> str:
        """The same report as CSV text, one line per period and group (arguments as ``billing_report``)."""
        params = _report_params(period, group_by, start, end, anchor, workspace_id, user_id) | {"format": "csv"}
        return self._request("GET", "/billing/report", params=params).text

    def billing_stats(
        self,
        *,
        period: str = "month",
        start: date | str | None = None,
        end: date | str | None = None,
        anchor: date | str | None = None,
    ) -> BillingStats:
        """The platform statistics summary (platform admins): users, workspaces, jobs, machine-hours and spend,
        machine-hours per accelerator type per period."""
        return self._one(BillingStats, "GET", "/billing/stats", params=_range(period, start, end, anchor))
