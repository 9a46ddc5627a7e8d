"""Balances and the ledger: amounts, admin recharges, refunds and adjustments, a workspace's balance and
entries. Every movement of a balance is an entry written in the same transaction as the balance."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core.billing_policy import month_start
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_text
from aicenter.db.ledger_writes import insert_entries_if_absent
from aicenter.db.models import BillingRollup, LedgerEntry, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor

MAX_AMOUNT = Decimal("1e12")  # coins in one admin entry; balances are Numeric(20, 4)
_MAX_KEY = 120


class EntryKind(StrEnum):
    CHARGE = "charge"
    RECHARGE = "recharge"
    REFUND = "refund"
    ADJUSTMENT = "adjustment"


@dataclass(frozen=True)
class EntryView:
    id: int
    workspace_id: int
    kind: EntryKind
    amount: Decimal  # signed: + credits the workspace
    machine_hours: Decimal
    idempotency_key: str
    job_id: int | None
    replica_id: int | None
    period_start: datetime | None
    period_end: datetime | None
    reason: str
    actor_name: str
    created_at: datetime

    @classmethod
    def of(cls, row: LedgerEntry) -> EntryView:
        return cls(
            row.id,
            row.workspace_id,
            EntryKind(row.kind),
            Decimal(row.amount_cents).scaleb(-billing.MINOR_PLACES),
            Decimal(row.machine_microhours).scaleb(-billing.HOURS_PLACES),
            row.idempotency_key,
            row.job_id,
            row.replica_id,
            row.period_start,
            row.period_end,
            row.reason,
            row.actor_name,
            row.created_at,
        )


@dataclass(frozen=True)
class BalanceView:
    workspace_id: int
    workspace: str
    balance: Decimal


def parse_amount(value: object, *, field_name: str = "amount", signed: bool = False) -> Decimal:
    """An amount of coins from user input: a decimal number with at most 2 places, more than 0 (or, when
    ``signed``, not 0), under ``MAX_AMOUNT``.

    Raises:
        ValidationFailed: not a number (floats are refused too: their binary value is not the amount typed),
            not finite, 0 or negative (unless signed), too large, or finer than 0.01.
    """
    if isinstance(value, bool) or not isinstance(value, Decimal | str | int):
        raise ValidationFailed('must be a decimal number given as a string, e.g. "100.50"', field=field_name)
    try:
        amount = value if isinstance(value, Decimal) else Decimal(str(value).strip())
    except InvalidOperation:
        raise ValidationFailed(f'"{value}" is not a decimal number', field=field_name) from None
    if not amount.is_finite():
        raise ValidationFailed(f'"{value}" is not a finite number', field=field_name)
    if amount == 0 or (amount < 0 and not signed):
        raise ValidationFailed("must be more than 0" if not signed else "must not be 0", field=field_name)
    if abs(amount) >= MAX_AMOUNT:
        raise ValidationFailed(f"must be less than {MAX_AMOUNT:f} in absolute value", field=field_name)
    if amount != amount.quantize(billing.MINOR_UNIT):
        raise ValidationFailed("has more than 2 decimal places (the smallest unit is 0.01)", field=field_name)
    return amount.quantize(billing.MINOR_UNIT)


async def move_balances(session: AsyncSession, deltas: dict[int, int]) -> None:
    """Add cents to workspaces' balances, rows locked in id order (no deadlock between two writers).

    Read-modify-write in Python rather than ``balance = balance + x`` in SQL: SQLite's NUMERIC is a float, and
    a million float additions would drift; each value written here is an exact decimal that reads back exact.
    """
    for workspace_id in sorted(deltas):
        if not deltas[workspace_id]:
            continue
        workspace = await session.get(Workspace, workspace_id, with_for_update=True, populate_existing=True)
        if workspace is None:  # deleted since its job ran: the ledger keeps the charge, there is no balance
            continue
        workspace.balance = Decimal(workspace.balance) + Decimal(deltas[workspace_id]).scaleb(-billing.MINOR_PLACES)


async def _post(
    session: AsyncSession,
    actor: Actor,
    kind: EntryKind,
    workspace_id: int,
    raw_amount: object,
    reason: str,
    idempotency_key: str | None,
) -> EntryView:
    require_platform_admin(actor, f"a billing {kind.value}")  # first: a member gets 403 whatever the body
    amount = parse_amount(raw_amount, signed=kind is EntryKind.ADJUSTMENT)
    reason = check_text(reason.strip(), "reason", 1024)
    if not reason:
        raise ValidationFailed("is required: say why the balance changes", field="reason")
    if idempotency_key is not None and not 1 <= len(idempotency_key) <= _MAX_KEY:
        raise ValidationFailed(f"must be 1 to {_MAX_KEY} characters", field="idempotency_key")
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    # The caller's key is namespaced by kind, so it can never collide with a meter's charge key.
    key = f"{kind.value}:{idempotency_key or uuid.uuid4().hex}"
    cents = billing.to_cents(amount)
    row = {
        "workspace_id": workspace_id,
        "kind": kind.value,
        "amount_cents": cents,
        "idempotency_key": key,
        "reason": reason,
        "actor_id": actor.user_id or None,
        "actor_name": actor.username,
    }
    inserted = await insert_entries_if_absent(session, [row])
    entry = await session.scalar(select(LedgerEntry).where(LedgerEntry.idempotency_key == key))
    assert entry is not None
    if not inserted:  # a retry: the same request answers with the same entry; another one is a conflict
        if (entry.workspace_id, entry.amount_cents) != (workspace_id, cents):
            raise Conflict(
                f'idempotency key "{idempotency_key}" was used for another {kind.value}',
                details={"field": "idempotency_key"},
            )
        return EntryView.of(entry)
    await move_balances(session, {workspace_id: cents})
    audit.record(
        session,
        actor,
        f"billing.{kind.value}",
        "workspace",
        workspace_id,
        workspace_id=workspace_id,
        details={"amount": str(amount), "reason": reason, "entry_id": entry.id},
    )
    return EntryView.of(entry)


async def recharge(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    amount: object,
    *,
    reason: str,
    idempotency_key: str | None = None,
) -> EntryView:
    """Credit a workspace (platform admins). Retrying with the same ``idempotency_key`` records nothing new.

    Raises:
        Forbidden: the actor is not a platform admin.
        ValidationFailed: a bad amount (``parse_amount``) or an empty reason; nothing is written.
        NotFound: no such workspace.
        Conflict: the key was used for a different recharge.
    """
    return await _post(session, actor, EntryKind.RECHARGE, workspace_id, amount, reason, idempotency_key)


async def refund(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    amount: object,
    *,
    reason: str,
    idempotency_key: str | None = None,
) -> EntryView:
    """Give coins back to a workspace (platform admins), e.g. for work lost to the platform. As ``recharge``."""
    return await _post(session, actor, EntryKind.REFUND, workspace_id, amount, reason, idempotency_key)


async def adjust(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    amount: object,
    *,
    reason: str,
    idempotency_key: str | None = None,
) -> EntryView:
    """Correct a workspace's balance by a signed amount (platform admins), with the reason. As ``recharge``."""
    return await _post(session, actor, EntryKind.ADJUSTMENT, workspace_id, amount, reason, idempotency_key)


CREDIT_KINDS = frozenset({EntryKind.RECHARGE, EntryKind.REFUND, EntryKind.ADJUSTMENT})  # what admins write


async def add_entry(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    kind: object,
    amount: object,
    *,
    reason: str,
    idempotency_key: str | None = None,
) -> EntryView:
    """A recharge, refund or adjustment named by its kind (the API's and the console's one form), as
    ``recharge``, ``refund`` and ``adjust``.

    Raises:
        Forbidden: not a platform admin (checked first, whatever the kind).
        ValidationFailed: ``kind`` is none of those three (``field`` "kind"), or as ``recharge``.
    """
    require_platform_admin(actor, "a billing entry")
    entry_kind = next((k for k in CREDIT_KINDS if k.value == kind), None)
    if entry_kind is None:
        raise ValidationFailed("choose recharge, refund or adjustment", field="kind")
    return await _post(session, actor, entry_kind, workspace_id, amount, reason, idempotency_key)


async def get_balance(session: AsyncSession, actor: Actor, workspace_id: int) -> BalanceView:
    """A workspace's balance (its members and platform admins; others get NotFound)."""
    workspace = await get_visible_workspace(session, actor, workspace_id)
    return BalanceView(workspace.id, workspace.name, Decimal(workspace.balance).quantize(billing.MINOR_UNIT))


async def list_ledger(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    *,
    kind: EntryKind | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[EntryView]:
    """A workspace's ledger, newest first (its members and platform admins)."""
    await get_visible_workspace(session, actor, workspace_id)
    stmt = select(LedgerEntry).where(LedgerEntry.workspace_id == workspace_id)
    if kind is not None:
        stmt = stmt.where(LedgerEntry.kind == kind.value)
    page = await paginate(session, stmt, LedgerEntry.id, limit=limit, cursor=cursor, descending=True)
    return Page([EntryView.of(row) for row in page.items], page.next_cursor)


async def month_spend(session: AsyncSession, workspace_ids: list[int], now: datetime) -> dict[int, int]:
    """Cents charged to each workspace for machine time this month (UTC): the meter's charges whose periods end
    on or after the 1st, 00:00 UTC, summed from the day rollups (``BillingRollup``, by workspace and day), which
    the meter writes with every charge in the same transaction.

    The rollups rather than the ledger: admission and every metering pass ask, and the ledger's charges of a
    busy workspace are tens of thousands a day, with no index by time. A copy closed after midnight on the 1st
    but ended before it counts in the month it ended, as in the reports."""
    if not workspace_ids:
        return {}
    rows = await session.execute(
        select(BillingRollup.workspace_id, func.sum(BillingRollup.cents))
        .where(BillingRollup.workspace_id.in_(workspace_ids), BillingRollup.day >= month_start(now).date())
        .group_by(BillingRollup.workspace_id)
    )
    return {ws: int(total or 0) for ws, total in rows.all()}
