"""Billing use cases: balances, the ledger, admin recharges and adjustments, the meter and its reconciliation.

Who pays: the workspace a job was submitted in (``Job.workspace_id``). Its balance is ``Workspace.balance``; a
user's personal workspace (created with the user, ``User.default_workspace_id``) is that user's account. Every
movement of a balance is a ledger entry written in the same transaction as the balance, so the balance always
equals the sum of the workspace's entries (``verify`` checks it).

The meter (``meter``) charges each started copy (replica attempt) from where its last charge ended, with the
amounts of ``core.billing.next_charge`` (the formula over the whole copy so far minus what was charged, so the
charges add up to the formula to the cent). It is exactly once by two guards that commit with the charges:
each entry's idempotency key (copy, period start) is unique and inserted-or-skipped, and each copy's meter row
is updated only from the state the charge was computed on. A pass that loses either race writes nothing of
that copy (or, when the two disagree, rolls back whole: ``MeterRaced``); the next pass computes it again.
"""

from aicenter.services.billing._ledger import (
    MAX_AMOUNT,
    BalanceView,
    EntryKind,
    EntryView,
    adjust,
    get_balance,
    list_ledger,
    parse_amount,
    recharge,
    refund,
)
from aicenter.services.billing._meter import MeterRaced, MeterResult, meter
from aicenter.services.billing._reports import GroupBy, Report, ReportRow, Stats, report, report_csv, stats
from aicenter.services.billing._verify import Mismatch, verify

__all__ = [
    "MAX_AMOUNT",
    "BalanceView",
    "EntryKind",
    "EntryView",
    # reports
    "GroupBy",
    "MeterRaced",
    "MeterResult",
    "Mismatch",
    "Report",
    "ReportRow",
    "Stats",
    "adjust",
    "get_balance",
    "list_ledger",
    "meter",
    "parse_amount",
    "recharge",
    "refund",
    "report",
    "report_csv",
    "stats",
    "verify",
]
