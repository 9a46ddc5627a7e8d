"""Billing policy: a workspace's arrears mode, grace and monthly limit (platform admins), admission of new work
(``admit``), and the controller's evaluation of every strict workspace (``evaluate_policies``).

The decisions are ``core.billing_policy``'s; this module reads the standing (balance, this month's charges),
stores the phase and writes the events of each transition. Stopping the work of a workspace is the caller's
(``controllers/billing.py``, with ``services.jobs`` and ``services.serving``): this package stays below them,
since they ask it for admission.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.core import billing_policy as core
from aicenter.core.alerts import Element, Severity
from aicenter.core.clock import utcnow
from aicenter.core.errors import InsufficientBalance, NotFound, SpendingLimitReached, ValidationFailed
from aicenter.db.models import BillingPolicy, Workspace
from aicenter.services import alerts, audit
from aicenter.services.access import get_visible_workspace, member_workspace_ids, require_platform_admin
from aicenter.services.billing._ledger import month_spend, parse_amount
from aicenter.services.context import Actor


@dataclass(frozen=True)
class PolicyView:
    workspace_id: int
    workspace: str
    arrears: core.ArrearsMode
    grace_minutes: int
    monthly_limit: Decimal | None
    phase: core.Phase
    arrears_since: datetime | None
    cause: core.Cause | None
    balance: Decimal
    month_spend: Decimal


@dataclass(frozen=True)
class Transition:
    """One workspace's change of phase in an evaluation, with the actions the caller carries out."""

    workspace_id: int
    workspace: str
    decision: core.Decision


def _policy_of(row: BillingPolicy | None) -> core.Policy:
    if row is None:
        return core.Policy()
    return core.Policy(core.ArrearsMode(row.arrears), timedelta(minutes=row.grace_minutes), row.monthly_limit_cents)


def _cents(amount: Decimal) -> int:
    return billing.to_cents(Decimal(amount).quantize(billing.MINOR_UNIT))


async def _standing(session: AsyncSession, workspace: Workspace, policy: core.Policy, now: datetime) -> core.Standing:
    spend = 0
    if policy.monthly_limit_cents is not None:
        spend = (await month_spend(session, [workspace.id], now)).get(workspace.id, 0)
    return core.Standing(_cents(workspace.balance), spend)


async def admit(session: AsyncSession, workspace_id: int) -> None:
    """Refuse new work (a job, a notebook, a service's deploy, start or scale-up) in a strict workspace in
    arrears; a workspace without a policy is always admitted. Call before writing anything.

    Raises:
        InsufficientBalance: code ``insufficient_balance`` (402), the balance in the message.
        SpendingLimitReached: code ``spending_limit_reached`` (402), the month's spend and the limit.
    """
    row = await session.get(BillingPolicy, workspace_id)
    policy = _policy_of(row)
    if not policy.strict:
        return
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        return  # the caller reports the missing workspace
    standing = await _standing(session, workspace, policy, utcnow())
    message = core.refusal(workspace.name, policy, standing)
    if message is None:
        return
    details: dict[str, Any] = {"workspace_id": workspace.id, "balance": core.coins(standing.balance_cents)}
    if core.arrears_cause(policy, standing) is core.Cause.LIMIT:
        assert policy.monthly_limit_cents is not None
        details["month_spend"] = core.coins(standing.month_spend_cents)
        details["monthly_limit"] = core.coins(policy.monthly_limit_cents)
        raise SpendingLimitReached(message, details=details)
    raise InsufficientBalance(message, details=details)


def _view(workspace: Workspace, row: BillingPolicy | None, standing: core.Standing) -> PolicyView:
    policy = _policy_of(row)
    limit = policy.monthly_limit_cents
    return PolicyView(
        workspace.id,
        workspace.name,
        policy.arrears,
        int(policy.grace.total_seconds() // 60),
        None if limit is None else Decimal(limit).scaleb(-billing.MINOR_PLACES),
        core.Phase(row.phase) if row is not None else core.Phase.OK,
        row.arrears_since if row is not None else None,
        core.Cause(row.cause) if row is not None and row.cause else None,
        Decimal(standing.balance_cents).scaleb(-billing.MINOR_PLACES),
        Decimal(standing.month_spend_cents).scaleb(-billing.MINOR_PLACES),
    )


async def get_policy(session: AsyncSession, actor: Actor, workspace_id: int) -> PolicyView:
    """A workspace's policy, its phase, balance and this month's spend (its members and platform admins)."""
    workspace = await get_visible_workspace(session, actor, workspace_id)
    now = utcnow()
    spend = (await month_spend(session, [workspace.id], now)).get(workspace.id, 0)
    standing = core.Standing(_cents(workspace.balance), spend)
    return _view(workspace, await session.get(BillingPolicy, workspace.id), standing)


def _parse_mode(value: object) -> core.ArrearsMode:
    try:
        return core.ArrearsMode(str(value))
    except ValueError:
        modes = ", ".join(m.value for m in core.ArrearsMode)
        raise ValidationFailed(f'"{value}" is not a mode; use one of {modes}', field="arrears") from None


def _parse_grace(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationFailed("must be a whole number of minutes", field="grace_minutes")
    if not 0 <= value <= core.MAX_GRACE_MINUTES:
        raise ValidationFailed(f"must be 0 to {core.MAX_GRACE_MINUTES} minutes (30 days)", field="grace_minutes")
    return value


async def set_policy(
    session: AsyncSession,
    actor: Actor,
    workspace_id: int,
    *,
    arrears: object,
    grace_minutes: object = 0,
    monthly_limit: object = None,
) -> PolicyView:
    """Set a workspace's policy (platform admins): ``arrears`` off | warn | stop, ``grace_minutes`` before a
    stop, ``monthly_limit`` in coins (None: none). The phase is kept: the controller re-evaluates it.

    Raises:
        Forbidden: not a platform admin (checked first, whatever the body).
        ValidationFailed: an unknown mode, a grace outside 0..30 days, a limit that is not a positive amount
            of at most 2 decimal places; ``field`` names it and nothing is written.
        NotFound: no such workspace.
    """
    require_platform_admin(actor, "setting a billing policy")
    mode = _parse_mode(arrears)
    grace = _parse_grace(grace_minutes)
    limit = None
    if monthly_limit is not None:
        limit = billing.to_cents(parse_amount(monthly_limit, field_name="monthly_limit"))
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    row = await session.get(BillingPolicy, workspace_id, with_for_update=True)
    if row is None:
        row = BillingPolicy(workspace_id=workspace_id, phase=core.Phase.OK.value)
        session.add(row)
    row.arrears = mode.value
    row.grace_minutes = grace
    row.monthly_limit_cents = limit
    row.updated_at = utcnow()
    row.updated_by = actor.username
    shown_limit = None if limit is None else core.coins(limit)
    details = {"arrears": mode.value, "grace_minutes": grace, "monthly_limit": shown_limit}
    audit.record(
        session, actor, "billing.policy", "workspace", workspace_id, workspace_id=workspace_id, details=details
    )
    await session.flush()
    return await get_policy(session, actor, workspace_id)


_MESSAGES = {
    core.Action.WARN: ("billing.arrears", Severity.WARNING),
    core.Action.STOP: ("billing.stopped", Severity.CRITICAL),
    core.Action.RECOVER: ("billing.recovered", Severity.INFO),
}


def _event_message(action: core.Action, workspace: str, policy: core.Policy, decision: core.Decision) -> str:
    why = "its monthly spending limit is reached" if decision.cause is core.Cause.LIMIT else "its balance ran out"
    if action is core.Action.WARN:
        if policy.arrears is core.ArrearsMode.STOP:
            minutes = int(policy.grace.total_seconds() // 60)
            return f"workspace {workspace} is in arrears ({why}): its work stops in {minutes} min unless recharged"
        return f"workspace {workspace} is in arrears ({why}): new work is refused until it is recharged"
    if action is core.Action.STOP:
        return f"workspace {workspace} is in arrears ({why}): its notebooks and jobs stop, its services scale to zero"
    return f"workspace {workspace} is out of arrears: new work is admitted (stopped work stays stopped)"


async def evaluate_policies(session: AsyncSession, now: datetime) -> list[Transition]:
    """Move every workspace with a policy one step (``core.billing_policy.decide``), store the new phase and
    record one event per action; returns the transitions, whose ``stop`` actions the caller carries out in the
    same transaction. Rows are locked, so two evaluators cannot both see the same transition."""
    rows = list(
        (await session.scalars(select(BillingPolicy).order_by(BillingPolicy.workspace_id).with_for_update())).all()
    )
    if not rows:
        return []
    ids = [r.workspace_id for r in rows]
    workspaces = {w.id: w for w in (await session.scalars(select(Workspace).where(Workspace.id.in_(ids)))).all()}
    spends = await month_spend(session, ids, now)
    out: list[Transition] = []
    for row in rows:
        workspace = workspaces.get(row.workspace_id)
        if workspace is None:
            continue
        policy = _policy_of(row)
        standing = core.Standing(_cents(workspace.balance), spends.get(workspace.id, 0))
        decision = core.decide(policy, core.Phase(row.phase), row.arrears_since, standing, now)
        changed = (decision.phase.value, decision.since) != (row.phase, row.arrears_since)
        row.phase = decision.phase.value
        row.arrears_since = decision.since
        row.cause = decision.cause.value if decision.cause else None
        for action in decision.actions:
            kind, severity = _MESSAGES[action]
            alerts.record_event(
                session,
                kind,
                _event_message(action, workspace.name, policy, decision),
                severity=severity,
                workspace_id=workspace.id,
                details={
                    "balance": core.coins(standing.balance_cents),
                    "month_spend": core.coins(standing.month_spend_cents),
                    "cause": decision.cause.value if decision.cause else None,
                },
            )
        if changed or decision.actions:
            out.append(Transition(workspace.id, workspace.name, decision))
    return out


async def balance_ratio(session: AsyncSession, now: datetime) -> list[Element]:
    """The alert fact ``billing.balance_ratio`` (the built-in rule ``balance-low`` fires below 0.1), one element
    per workspace with a policy: its balance / its monthly limit; without a limit, 1 while the balance is
    positive and the balance itself (0 or less) once it is not. Workspaces without a policy have no element:
    nothing is billed strictly there, nothing to warn about."""
    rows = list((await session.scalars(select(BillingPolicy))).all())
    strict = {r.workspace_id: policy for r in rows if (policy := _policy_of(r)).strict}
    if not strict:
        return []
    workspaces = (await session.scalars(select(Workspace).where(Workspace.id.in_(list(strict))))).all()
    out = []
    for workspace in workspaces:
        limit = strict[workspace.id].monthly_limit_cents
        cents = _cents(workspace.balance)
        value = cents / limit if limit else (1.0 if cents > 0 else cents / 100)
        out.append(Element({"workspace": workspace.name}, value, workspace.id))
    return out


def register_facts() -> None:
    """Plug ``billing.balance_ratio`` into the alert evaluator (the app factory calls it; once)."""
    alerts.EXTRA_FACTS.setdefault("billing.balance_ratio", balance_ratio)


async def list_policies(session: AsyncSession, actor: Actor, workspace_ids: list[int]) -> dict[int, PolicyView]:
    """The policies of several workspaces at once (the console's balance lists), by workspace id; ids the actor
    may not see (not a member, not a platform admin) and missing ones are left out, as ``get_policy`` would 404."""
    if not workspace_ids:
        return {}
    stmt = select(Workspace).where(Workspace.id.in_(workspace_ids))
    if not actor.is_platform_admin:
        stmt = stmt.where(Workspace.id.in_(member_workspace_ids(actor)))
    workspaces = list((await session.scalars(stmt)).all())
    ids = [w.id for w in workspaces]
    if not ids:
        return {}
    stored = await session.scalars(select(BillingPolicy).where(BillingPolicy.workspace_id.in_(ids)))
    rows = {r.workspace_id: r for r in stored.all()}
    spends = await month_spend(session, ids, utcnow())
    return {w.id: _view(w, rows.get(w.id), core.Standing(_cents(w.balance), spends.get(w.id, 0))) for w in workspaces}
