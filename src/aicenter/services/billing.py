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

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.names import check_text
from aicenter.db.ledger_writes import advance_meters, insert_entries_if_absent, insert_meters_if_absent
from aicenter.db.models import BillingMeter, Job, LedgerEntry, Replica, Workspace
from aicenter.db.pagination import Page, paginate
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor

__all__ = [
    "MAX_AMOUNT",
    "BalanceView",
    "EntryKind",
    "EntryView",
    "MeterRaced",
    "MeterResult",
    "Mismatch",
    "adjust",
    "get_balance",
    "list_ledger",
    "meter",
    "parse_amount",
    "recharge",
    "refund",
    "verify",
]

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


async def _move_balances(session: AsyncSession, deltas: dict[int, int]) -> None:
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
    await _move_balances(session, {workspace_id: cents})
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


# -- the meter ---------------------------------------------------------------------------------------------------


class MeterRaced(RuntimeError):
    """Another meter charged a copy between this pass's read and its write: the pass must roll back."""


@dataclass
class MeterResult:
    """What one pass did: entries written, copies closed, cents charged, and where the next batch starts."""

    entries: int = 0
    closed: int = 0
    cents: int = 0
    last_replica_id: int | None = None
    more: bool = False
    workspaces: set[int] = field(default_factory=set)


async def meter(
    session: AsyncSession,
    now: datetime,
    *,
    min_period: timedelta = timedelta(seconds=60),
    after_replica_id: int = 0,
    limit: int = 2000,
) -> MeterResult:
    """Charge every started copy that is not closed, up to ``now`` (running) or its end (finished), in the
    caller's write transaction: ledger entries, meter rows and balances together.

    Copies are taken in replica id order after ``after_replica_id``, at most ``limit`` of them; ``more`` says
    whether to call again with ``after_replica_id=result.last_replica_id``.

    Raises:
        MeterRaced: another meter wrote one of these copies meanwhile; roll back and run again.
    """
    stmt = (
        select(
            Replica.id,
            Replica.job_id,
            Job.workspace_id,
            Replica.billing_weight,
            Replica.price_per_hour,
            Replica.started_at,
            Replica.finished_at,
            BillingMeter.charged_until,
            BillingMeter.microhours,
            BillingMeter.cents,
        )
        .join(Job, Job.id == Replica.job_id)
        .outerjoin(BillingMeter, BillingMeter.replica_id == Replica.id)
        .where(Replica.started_at.is_not(None), BillingMeter.closed_at.is_(None), Replica.id > after_replica_id)
        .order_by(Replica.id)
        .limit(limit)
    )
    rows = (await session.execute(stmt)).all()
    result = MeterResult(last_replica_id=rows[-1].id if rows else None, more=len(rows) == limit)
    pending: list[tuple[billing.Charge, billing.Metered, int, int, bool]] = []
    for r in rows:
        copy = billing.Copy(
            r.id, billing.weight_decimal(r.billing_weight), Decimal(r.price_per_hour), r.started_at, r.finished_at
        )
        known = r.charged_until is not None
        metered = (
            billing.Metered(
                r.charged_until,
                Decimal(r.microhours).scaleb(-billing.HOURS_PLACES),
                Decimal(r.cents).scaleb(-billing.MINOR_PLACES),
            )
            if known
            else billing.Metered()
        )
        charge = billing.next_charge(copy, metered, now, min_period=min_period)
        if charge is not None:
            pending.append((charge, metered, r.workspace_id, r.job_id, known))
    entries = [
        {
            "workspace_id": workspace_id,
            "kind": EntryKind.CHARGE.value,
            "amount_cents": -billing.to_cents(charge.amount),
            "machine_microhours": int(charge.hours.scaleb(billing.HOURS_PLACES)),
            "idempotency_key": charge.key,
            "job_id": job_id,
            "replica_id": charge.copy_id,
            "period_start": charge.period_start,
            "period_end": charge.period_end,
            "reason": "",
            "actor_id": None,
            "actor_name": "system",
            "created_at": now,
        }
        for charge, _, workspace_id, job_id, _ in pending
        if charge.hours or charge.amount
    ]
    inserted = await insert_entries_if_absent(session, entries)
    wanted = {e["idempotency_key"] for e in entries}
    new_meters: list[dict[str, object]] = []
    moved: list[dict[str, object]] = []
    deltas: dict[int, int] = {}
    for charge, metered, workspace_id, job_id, known in pending:
        if charge.key in wanted and charge.key not in inserted:
            continue  # another meter charged this very period (and moved the copy's meter row with it)
        after = charge.after(metered)
        values = {
            "charged_until": after.until,
            "microhours": int(after.hours.scaleb(billing.HOURS_PLACES)),
            "cents": billing.to_cents(after.amount),
            "closed_at": now if charge.closes else None,
        }
        if known:
            moved.append({"replica_id": charge.copy_id, "old": metered.until, **values})
        else:
            new_meters.append({"replica_id": charge.copy_id, "workspace_id": workspace_id, "job_id": job_id, **values})
        if charge.key in inserted:
            cents = billing.to_cents(charge.amount)
            deltas[workspace_id] = deltas.get(workspace_id, 0) - cents
            result.entries += 1
            result.cents += cents
            result.workspaces.add(workspace_id)
        result.closed += charge.closes
    if await advance_meters(session, moved) != len(moved):
        raise MeterRaced("a copy was metered by another pass")
    if len(await insert_meters_if_absent(session, new_meters)) != len(new_meters):
        raise MeterRaced("a copy's first charge was written by another pass")
    await _move_balances(session, deltas)
    return result


# -- reconciliation ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mismatch:
    """A closed copy whose charges differ from the formula, or a workspace whose balance is not its ledger's sum."""

    what: str  # "replica" or "workspace"
    id: int
    expected: Decimal
    recorded: Decimal


async def verify(session: AsyncSession, actor: Actor) -> list[Mismatch]:
    """Recompute the formula over every closed copy and compare with its charges in the ledger, and every
    workspace's balance with the sum of its entries (platform admins). Empty: the ledger is the formula."""
    require_platform_admin(actor, "billing verification")
    charged = await session.execute(
        select(LedgerEntry.replica_id, func.sum(LedgerEntry.amount_cents))
        .where(LedgerEntry.kind == EntryKind.CHARGE.value)
        .group_by(LedgerEntry.replica_id)
    )
    sums: dict[int | None, int] = dict(charged.all())
    out: list[Mismatch] = []
    closed = await session.execute(
        select(Replica.id, Replica.billing_weight, Replica.price_per_hour, Replica.started_at, Replica.finished_at)
        .join(BillingMeter, BillingMeter.replica_id == Replica.id)
        .where(BillingMeter.closed_at.is_not(None))
        .order_by(Replica.id)
    )
    for r in closed:
        expected = billing.copy_cost(
            billing.weight_decimal(r.billing_weight), Decimal(r.price_per_hour), r.started_at, r.finished_at
        )
        recorded = -Decimal(sums.get(r.id) or 0).scaleb(-billing.MINOR_PLACES)
        if recorded != expected:
            out.append(Mismatch("replica", r.id, expected, recorded))
    per_workspace = await session.execute(
        select(LedgerEntry.workspace_id, func.sum(LedgerEntry.amount_cents)).group_by(LedgerEntry.workspace_id)
    )
    totals: dict[int, int] = dict(per_workspace.all())
    for workspace_id, balance in (await session.execute(select(Workspace.id, Workspace.balance))).all():
        expected = Decimal(totals.get(workspace_id) or 0).scaleb(-billing.MINOR_PLACES)
        if Decimal(balance).quantize(billing.MINOR_UNIT) != expected:
            out.append(Mismatch("workspace", workspace_id, expected, Decimal(balance)))
    return out
