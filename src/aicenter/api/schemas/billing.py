"""Billing request and response bodies: balances, ledger entries, admin entries, the reconciliation."""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, PlainSerializer

from aicenter.api.schemas.common import Input


def _coins(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.01")))


def _hours(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.000001")))


Coins = Annotated[Decimal, PlainSerializer(_coins, return_type=str)]
MachineHours = Annotated[Decimal, PlainSerializer(_hours, return_type=str)]


class BalanceOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    workspace_id: int
    workspace: str = Field(description="The workspace's name.")
    balance: Coins = Field(description="Coins, as a decimal string with 2 places; negative when in arrears.")


class EntryOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    id: int
    workspace_id: int
    kind: str = Field(description="charge, recharge, refund or adjustment.")
    amount: Coins = Field(description="Signed coins: + credits the workspace, - debits it (charges).")
    machine_hours: MachineHours = Field(description="Charges: the machine-hours of the period, 6 places.")
    idempotency_key: str
    job_id: int | None
    replica_id: int | None
    period_start: datetime | None
    period_end: datetime | None
    reason: str
    actor_name: str
    created_at: datetime


class EntryCreate(Input):
    kind: Literal["recharge", "refund", "adjustment"] = Field(
        description="recharge and refund credit the workspace; an adjustment may be negative."
    )
    amount: str = Field(max_length=32, description='Coins as a decimal string with at most 2 places, e.g. "100.50".')
    reason: str = Field(max_length=1024, description="Why the balance changes (required; kept in the ledger).")
    idempotency_key: str | None = Field(
        default=None,
        max_length=120,
        description="Retrying with the same key returns the first entry instead of writing a second.",
    )


class MismatchOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    what: str = Field(description="replica (its charges vs the formula) or workspace (its balance vs its ledger).")
    id: int
    expected: Coins
    recorded: Coins


class VerifyOut(BaseModel):
    ok: bool = Field(description="True when the ledger equals the formula over every closed copy.")
    mismatches: list[MismatchOut]


class CostOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    machine_hours: MachineHours = Field(description="Sum over its copies of billing weight x run time, 6 places.")
    amount: Coins = Field(description="Sum over its copies of machine-hours x the price snapshotted at submit.")
    estimated: bool = Field(description="A copy still runs and was counted up to `at`: the figures still grow.")
    charged: Coins = Field(description="What the meter has charged so far (lags a running estimate by a period).")
    copies: int = Field(description="Copies (replica attempts) that started.")
    at: datetime = Field(description="The instant running copies were counted up to.")


class PolicyIn(Input):
    arrears: str = Field(
        max_length=16,
        description="off (nothing happens), warn (new work refused, an event), or stop (as warn, and after "
        "grace_minutes its notebooks and jobs stop and its services scale to zero).",
    )
    grace_minutes: int = Field(default=0, description="Minutes in arrears before a stop, 0 to 43200 (30 days).")
    monthly_limit: str | None = Field(
        default=None,
        max_length=32,
        description='Coins charged per calendar month (UTC) at most, e.g. "500.00"; null: no limit.',
    )


class PolicyOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    workspace_id: int
    workspace: str
    arrears: str = Field(description="off, warn or stop.")
    grace_minutes: int
    monthly_limit: Coins | None = Field(description="null: no limit.")
    phase: str = Field(description="ok, warned (in arrears since arrears_since) or stopped (its work was stopped).")
    arrears_since: datetime | None
    cause: str | None = Field(description="balance or limit, while in arrears.")
    balance: Coins
    month_spend: Coins = Field(description="Coins charged since the start of this month (UTC).")


class ReportRowOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    bucket: date = Field(description="The first day (UTC) of the week (Monday), month or year.")
    group: str = Field(description="The group's name: a workspace, user, spec, accelerator type or kind.")
    machine_hours: MachineHours
    amount: Coins = Field(description="Coins charged (positive: spent).")
    entries: int = Field(description="Charge entries summed.")


class ReportOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    period: str
    group_by: str
    start: date = Field(description="First day of the range (UTC).")
    end: date = Field(description="First day after the range: the range is [start, end).")
    buckets: list[date]
    groups: list[str]
    rows: list[ReportRowOut]
    machine_hours: MachineHours
    amount: Coins


class StatsOut(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    period: str
    start: date
    end: date
    users: int = Field(description="Active users.")
    workspaces: int
    active_workspaces: int = Field(description="Workspaces charged in the range.")
    jobs: int = Field(description="Jobs, notebooks and services with a copy running in the range.")
    machine_hours: MachineHours
    amount: Coins
    buckets: list[date]
    hours_by_gpu_type: dict[str, list[MachineHours]] = Field(
        description='Machine-hours per accelerator type ("" none) per bucket: the accelerator-time trend.'
    )
