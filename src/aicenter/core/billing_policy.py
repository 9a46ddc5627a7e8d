"""Billing policy, pure: when a workspace is in arrears, what admission answers, and what the billing controller
does about running work (warn, stop after a grace, recover), one transition at a time.

A workspace is **strict** once a platform admin gives it a policy: an arrears mode other than ``off``, or a
monthly spending limit. Only strict workspaces are refused new work or stopped: a fresh install (no policies,
every price 0, balances 0) keeps working. A strict workspace is **in arrears** when its balance is not positive
or, with a limit, when this month's charges (UTC calendar month) reached the limit.

The controller keeps a phase per workspace (``ok`` -> ``warned`` -> ``stopped``) and ``decide`` moves it one
step per evaluation, returning the actions of that transition only: a tick that changes nothing returns none, so
each event is written once per transition, never per tick. Recovery (back out of arrears) returns the phase to
``ok`` with a ``recovered`` action; work stopped stays stopped (its owners start it again).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum

__all__ = [
    "MAX_GRACE_MINUTES",
    "Action",
    "ArrearsMode",
    "Cause",
    "Decision",
    "Phase",
    "Policy",
    "Standing",
    "arrears_cause",
    "coins",
    "decide",
    "month_start",
    "refusal",
]

MAX_GRACE_MINUTES = 30 * 24 * 60  # a month: longer is "warn"


class ArrearsMode(StrEnum):
    OFF = "off"  # no admission check, nothing done about running work (unless a monthly limit is set)
    WARN = "warn"  # new work refused; an event when the workspace goes into arrears
    STOP = "stop"  # as warn, and its running notebooks and jobs stop and its services scale to zero after a grace


class Phase(StrEnum):
    OK = "ok"
    WARNED = "warned"  # in arrears since ``since``; events written
    STOPPED = "stopped"  # the grace passed and its work was stopped


class Cause(StrEnum):
    BALANCE = "balance"  # the balance is not positive
    LIMIT = "limit"  # this month's charges reached the monthly limit


class Action(StrEnum):
    WARN = "warn"  # record "went into arrears"
    STOP = "stop"  # stop running notebooks and jobs, scale services to zero
    RECOVER = "recover"  # record "out of arrears"


@dataclass(frozen=True)
class Policy:
    arrears: ArrearsMode = ArrearsMode.OFF
    grace: timedelta = timedelta(0)
    monthly_limit_cents: int | None = None  # None: no limit

    @property
    def strict(self) -> bool:
        """Whether the workspace is refused new work when in arrears (and watched by the controller)."""
        return self.arrears is not ArrearsMode.OFF or self.monthly_limit_cents is not None


@dataclass(frozen=True)
class Standing:
    """A workspace's money now: its balance and what this month's charges took (positive cents)."""

    balance_cents: int
    month_spend_cents: int = 0


@dataclass(frozen=True)
class Decision:
    phase: Phase
    since: datetime | None  # when the current arrears began; None when not in arrears
    cause: Cause | None
    actions: tuple[Action, ...] = ()


def month_start(now: datetime) -> datetime:
    """The start of ``now``'s calendar month (the spending limit's period), same tzinfo as ``now``."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


def arrears_cause(policy: Policy, standing: Standing) -> Cause | None:
    """Why a strict workspace is in arrears (the balance first), or None; a non-strict one never is."""
    if not policy.strict:
        return None
    if standing.balance_cents <= 0:
        return Cause.BALANCE
    if policy.monthly_limit_cents is not None and standing.month_spend_cents >= policy.monthly_limit_cents:
        return Cause.LIMIT
    return None


def coins(cents: int) -> str:
    """Cents as coins with 2 places ("-3.20", "0.00"), as messages and details show them."""
    return f"{Decimal(cents).scaleb(-2):.2f}"


def refusal(workspace: str, policy: Policy, standing: Standing) -> str | None:
    """The message refusing new work in ``workspace``, or None when it is admitted."""
    cause = arrears_cause(policy, standing)
    if cause is Cause.BALANCE:
        return (
            f"workspace {workspace}'s balance is {coins(standing.balance_cents)} coins; "
            "ask a platform admin to recharge"
        )
    if cause is Cause.LIMIT:
        assert policy.monthly_limit_cents is not None
        return (
            f"workspace {workspace} spent {coins(standing.month_spend_cents)} coins this month, its monthly limit "
            f"is {coins(policy.monthly_limit_cents)}; ask a platform admin to raise the limit, or wait for next month"
        )
    return None


def decide(policy: Policy, phase: Phase, since: datetime | None, standing: Standing, now: datetime) -> Decision:
    """The next phase of a workspace and the actions of the transition to it (none when nothing changes).

    ``off`` (or a policy removed) returns to ``ok`` silently. Under ``warn`` and ``stop`` the first evaluation in
    arrears warns; under ``stop`` the first evaluation at least ``grace`` after ``since`` stops (with grace 0, the
    same evaluation warns and stops). Out of arrears, a warned or stopped workspace recovers.
    """
    cause = arrears_cause(policy, standing)
    if policy.arrears is ArrearsMode.OFF:
        # A limit alone refuses new work (admission) but stops nothing: nothing to track.
        return Decision(Phase.OK, None, None)
    if cause is None:
        if phase is Phase.OK:
            return Decision(Phase.OK, None, None)
        return Decision(Phase.OK, None, None, (Action.RECOVER,))
    actions: list[Action] = []
    if phase is Phase.OK or since is None:
        phase, since = Phase.WARNED, now
        actions.append(Action.WARN)
    if policy.arrears is ArrearsMode.STOP and phase is Phase.WARNED and now - since >= policy.grace:
        phase = Phase.STOPPED
        actions.append(Action.STOP)
    return Decision(phase, since, cause, tuple(actions))
