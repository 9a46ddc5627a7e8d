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

from aicenter.services.billing._cost import CostView, copies_cost, job_cost, service_cost
from aicenter.services.billing._ledger import (
    CREDIT_KINDS,
    MAX_AMOUNT,
    BalanceView,
    EntryKind,
    EntryView,
    add_entry,
    adjust,
    get_balance,
    list_ledger,
    month_spend,
    parse_amount,
    recharge,
    refund,
)
from aicenter.services.billing._meter import MeterRaced, MeterResult, meter, meter_jobs
from aicenter.services.billing._overview import (
    AccountView,
    all_accounts,
    list_entries,
    my_accounts,
)
from aicenter.services.billing._policy import (
    PolicyView,
    Transition,
    admit,
    balance_ratio,
    evaluate_policies,
    get_policy,
    list_policies,
    register_facts,
    set_policy,
)
from aicenter.services.billing._reports import (
    GroupBy,
    Report,
    ReportRow,
    Stats,
    report,
    report_csv,
    report_filename,
    stats,
)
from aicenter.services.billing._verify import Mismatch, verify

__all__ = [
    "CREDIT_KINDS",
    "MAX_AMOUNT",
    "AccountView",
    "BalanceView",
    "CostView",
    "EntryKind",
    "EntryView",
    # reports
    "GroupBy",
    "MeterRaced",
    "MeterResult",
    "Mismatch",
    "PolicyView",
    "Report",
    "ReportRow",
    "Stats",
    "Transition",
    "add_entry",
    "adjust",
    "admit",
    "all_accounts",
    "balance_ratio",
    "copies_cost",
    "evaluate_policies",
    "get_balance",
    "get_policy",
    "job_cost",
    "list_entries",
    "list_ledger",
    "list_policies",
    "meter",
    "meter_jobs",
    "month_spend",
    "my_accounts",
    "parse_amount",
    "recharge",
    "refund",
    "register_facts",
    "report",
    "report_csv",
    "report_filename",
    "service_cost",
    "set_policy",
    "stats",
    "verify",
]
