"""The billing policy's pure core: who is in arrears, admission's message, and one transition per evaluation."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from aicenter.core.billing_policy import (
    Action,
    ArrearsMode,
    Cause,
    Phase,
    Policy,
    Standing,
    arrears_cause,
    coins,
    decide,
    month_start,
    refusal,
)

T0 = datetime(2026, 3, 15, 12, 0, tzinfo=UTC)
BROKE = Standing(balance_cents=-320)
RICH = Standing(balance_cents=10_000)
STOP30 = Policy(ArrearsMode.STOP, timedelta(minutes=30))


def test_no_policy_is_never_in_arrears_nor_refused() -> None:
    # A fresh install: no policy, balance 0 (prices 0 everywhere). Nothing may be refused.
    assert arrears_cause(Policy(), Standing(0)) is None
    assert refusal("vision", Policy(), Standing(-500)) is None
    assert decide(Policy(), Phase.OK, None, Standing(-500), T0).actions == ()


@pytest.mark.parametrize("balance", [0, -1, -320])
def test_a_balance_not_positive_is_arrears_and_refused_with_the_balance(balance: int) -> None:
    policy = Policy(ArrearsMode.WARN)
    assert arrears_cause(policy, Standing(balance)) is Cause.BALANCE
    message = refusal("vision", policy, Standing(balance))
    assert message is not None
    assert f"balance is {balance / 100:.2f} coins" in message
    assert "recharge" in message


def test_refusal_message_exact() -> None:
    assert refusal("vision", Policy(ArrearsMode.STOP), BROKE) == (
        "workspace vision's balance is -3.20 coins; ask a platform admin to recharge"
    )


def test_monthly_limit_reached_is_arrears_even_with_money_and_mode_off() -> None:
    policy = Policy(ArrearsMode.OFF, monthly_limit_cents=50_000)
    assert arrears_cause(policy, Standing(10_000, 49_999)) is None
    assert arrears_cause(policy, Standing(10_000, 50_000)) is Cause.LIMIT
    message = refusal("vision", policy, Standing(10_000, 50_000))
    assert message is not None
    assert "spent 500.00 coins this month" in message
    assert "limit is 500.00" in message
    # Mode off with a limit refuses new work but tracks and stops nothing.
    assert decide(policy, Phase.OK, None, Standing(10_000, 50_000), T0) == decide(policy, Phase.OK, None, RICH, T0)


def test_the_balance_is_named_before_the_limit() -> None:
    assert arrears_cause(Policy(ArrearsMode.WARN, monthly_limit_cents=1), Standing(0, 5)) is Cause.BALANCE


def test_warn_once_then_nothing_per_tick() -> None:
    policy = Policy(ArrearsMode.WARN)
    first = decide(policy, Phase.OK, None, BROKE, T0)
    assert (first.phase, first.since, first.cause, first.actions) == (Phase.WARNED, T0, Cause.BALANCE, (Action.WARN,))
    later = decide(policy, first.phase, first.since, BROKE, T0 + timedelta(days=3))
    assert (later.phase, later.since, later.actions) == (Phase.WARNED, T0, ())


def test_stop_after_the_grace_exactly_once() -> None:
    d = decide(STOP30, Phase.OK, None, BROKE, T0)
    assert d.actions == (Action.WARN,)
    d = decide(STOP30, d.phase, d.since, BROKE, T0 + timedelta(minutes=29, seconds=59))
    assert (d.phase, d.actions) == (Phase.WARNED, ())
    d = decide(STOP30, d.phase, d.since, BROKE, T0 + timedelta(minutes=30))
    assert (d.phase, d.since, d.actions) == (Phase.STOPPED, T0, (Action.STOP,))
    d = decide(STOP30, d.phase, d.since, BROKE, T0 + timedelta(hours=5))
    assert (d.phase, d.actions) == (Phase.STOPPED, ())


def test_grace_zero_warns_and_stops_in_one_evaluation() -> None:
    d = decide(Policy(ArrearsMode.STOP), Phase.OK, None, BROKE, T0)
    assert (d.phase, d.actions) == (Phase.STOPPED, (Action.WARN, Action.STOP))


@pytest.mark.parametrize("phase", [Phase.WARNED, Phase.STOPPED])
def test_recovery_once_and_the_clock_restarts(phase: Phase) -> None:
    d = decide(STOP30, phase, T0, RICH, T0 + timedelta(hours=1))
    assert (d.phase, d.since, d.cause, d.actions) == (Phase.OK, None, None, (Action.RECOVER,))
    assert decide(STOP30, d.phase, d.since, RICH, T0 + timedelta(hours=2)).actions == ()
    # In arrears again: a new warning, and a new grace counted from now.
    again = decide(STOP30, d.phase, d.since, BROKE, T0 + timedelta(hours=3))
    assert (again.phase, again.since, again.actions) == (Phase.WARNED, T0 + timedelta(hours=3), (Action.WARN,))


def test_limit_reached_stops_like_arrears_and_a_new_month_recovers() -> None:
    policy = Policy(ArrearsMode.STOP, monthly_limit_cents=1000)
    d = decide(policy, Phase.OK, None, Standing(5000, 1000), T0)
    assert (d.phase, d.cause, d.actions) == (Phase.STOPPED, Cause.LIMIT, (Action.WARN, Action.STOP))
    d = decide(policy, d.phase, d.since, Standing(5000, 0), T0 + timedelta(days=20))
    assert d.actions == (Action.RECOVER,)


def test_turning_the_policy_off_returns_to_ok_silently() -> None:
    d = decide(Policy(), Phase.STOPPED, T0, BROKE, T0 + timedelta(hours=1))
    assert (d.phase, d.since, d.actions) == (Phase.OK, None, ())


def test_month_start_is_the_utc_calendar_month() -> None:
    assert month_start(datetime(2026, 3, 31, 23, 59, 59, 999999, tzinfo=UTC)) == datetime(2026, 3, 1, tzinfo=UTC)
    assert month_start(datetime(2026, 3, 1, tzinfo=UTC)) == datetime(2026, 3, 1, tzinfo=UTC)


@pytest.mark.parametrize(("cents", "shown"), [(0, "0.00"), (-320, "-3.20"), (5, "0.05"), (123_456, "1234.56")])
def test_coins_always_show_two_places(cents: int, shown: str) -> None:
    assert coins(cents) == shown
    assert refusal("w", Policy(ArrearsMode.WARN), Standing(min(cents, 0))) is not None
