"""The seed's formula: copy = weight x (end - start), task = sum of copies, job = sum of tasks; money = hours x price,
Decimal throughout, rounded once (hours to 6 places, money to 0.01, half-even)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicenter.core.billing import (
    Copy,
    Metered,
    charge_key,
    copy_cost,
    copy_hours,
    cost,
    next_charge,
    to_cents,
    total,
    weight_decimal,
)

T0 = datetime(2026, 1, 1, tzinfo=UTC)
D = Decimal


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def test_copy_hours_is_weight_times_duration() -> None:
    assert copy_hours(D(2), at(0), at(3600)) == D("2.000000")
    assert copy_hours(D("0.5"), at(0), at(90)) == D("0.012500")
    assert copy_hours(D(1), at(0), at(1)) == D("0.000278")  # 1/3600 = 0.000277..., rounded up
    assert copy_hours(D(0), at(0), at(100)) == D(0)


def test_nothing_when_the_end_is_not_after_the_start() -> None:
    assert copy_hours(D(1), at(10), at(5)) == D(0)
    assert copy_hours(D(1), at(10), at(10)) == D(0)


def test_a_negative_weight_is_refused() -> None:
    with pytest.raises(ValueError, match="weight"):
        copy_hours(D(-1), at(0), at(1))


def test_hours_round_half_even_at_six_places() -> None:
    # 0.0018 s at weight 1 is 0.0000005 h exactly: half, rounded to the even 0.000000; 0.0054 s -> 0.0000015 -> ...02
    assert copy_hours(D(1), at(0), T0 + timedelta(microseconds=1800)) == D("0.000000")
    assert copy_hours(D(1), at(0), T0 + timedelta(microseconds=5400)) == D("0.000002")


def test_money_rounds_half_even_to_the_cent() -> None:
    assert cost(D("1.000000"), D("0.125")) == D("0.12")
    assert cost(D("1.000000"), D("0.135")) == D("0.14")
    assert cost(D("2.5"), D("12.3456")) == D("30.86")  # 30.864
    assert copy_cost(D("1.5"), D("10"), at(0), at(3600)) == D("15.00")


def test_float_weights_enter_as_their_shortest_decimal() -> None:
    assert weight_decimal(0.1) == D("0.1")
    assert weight_decimal(1.5) == D("1.5")
    assert weight_decimal(D("0.3")) == D("0.3")
    # 0.1 x 3 h: exactly 0.3, which float arithmetic would not give
    assert copy_hours(weight_decimal(0.1), at(0), at(3 * 3600)) == D("0.300000")


def test_task_and_job_are_sums() -> None:
    copies = [copy_hours(D("1.5"), at(0), at(600)), copy_hours(D("1.5"), at(0), at(1200))]
    task = total(copies)
    assert task == D("0.750000")
    assert total([task, copy_hours(D(1), at(0), at(3600))]) == D("1.750000")
    assert total([]) == D(0)


def test_cents() -> None:
    assert to_cents(D("12.34")) == 1234
    assert to_cents(D("-0.5")) == -50
    with pytest.raises(ValueError, match="decimal places"):
        to_cents(D("0.001"))


def test_keys_name_the_copy_and_the_period_start() -> None:
    assert charge_key(7, T0 + timedelta(microseconds=5)) == "charge:7:2026-01-01T00:00:00.000005Z"


weights = st.decimals(min_value=0, max_value=1000, places=3)
prices = st.decimals(min_value=0, max_value=100_000, places=4)
durations = st.integers(min_value=0, max_value=400 * 24 * 3600 * 10**6)  # microseconds, up to 400 days


@given(weights, prices, durations)
def test_hours_and_money_are_the_exact_value_rounded_once(weight: Decimal, price: Decimal, us: int) -> None:
    end = T0 + timedelta(microseconds=us)
    hours = copy_hours(weight, T0, end)
    exact = Fraction(weight) * us / 3_600_000_000
    # Fraction's round() is half-even: the integer arithmetic must give exactly the same
    assert Fraction(hours) == Fraction(round(exact * 10**6), 10**6)
    assert abs(Fraction(hours) - exact) <= Fraction(1, 2 * 10**6)
    assert hours.as_tuple().exponent == -6
    money = copy_cost(weight, price, T0, end)
    assert Fraction(money) == Fraction(round(Fraction(hours) * Fraction(price) * 100), 100)
    assert money.as_tuple().exponent == -2


@given(st.decimals(min_value=-1000, max_value=1000, places=6), st.decimals(min_value=0, max_value=1000, places=4))
def test_cost_rounds_half_even_for_any_sign(hours: Decimal, price: Decimal) -> None:
    assert Fraction(cost(hours, price)) == Fraction(round(Fraction(hours) * Fraction(price) * 100), 100)


# -- incremental metering ---------------------------------------------------------------------------------------

MIN = timedelta(seconds=60)


def meter(copy: Copy, passes: list[datetime]) -> tuple[Metered, list[str]]:
    """Run ``next_charge`` at every pass time, as the meter does; the final state and the keys written."""
    metered, keys = Metered(), []
    for now in passes:
        charge = next_charge(copy, metered, now, min_period=MIN)
        if charge is None:
            continue
        keys.append(charge.key)
        metered = charge.after(metered)
    return metered, keys


def test_a_running_copy_is_charged_per_period_and_closed_at_its_end() -> None:
    running = Copy(1, D(2), D("3.3333"), at(0), None)
    metered, keys = meter(running, [at(30), at(61), at(100), at(200)])
    assert metered.until == at(200)  # 30 s too short, 61 charged, 100 too short after 61, 200 charged
    assert len(keys) == 2
    ended = Copy(1, D(2), D("3.3333"), at(0), at(250))
    closing = next_charge(ended, metered, at(999), min_period=MIN)
    assert closing is not None
    assert closing.closes
    assert closing.period_end == at(250)
    final = closing.after(metered)
    assert final.hours == copy_hours(D(2), at(0), at(250))
    assert final.amount == copy_cost(D(2), D("3.3333"), at(0), at(250))


def test_a_period_charged_past_the_recorded_end_is_given_back() -> None:
    metered = meter(Copy(1, D(1), D(100), at(0), None), [at(3600)])[0]
    ended = Copy(1, D(1), D(100), at(0), at(1800))  # the end observed later, but recorded as it happened
    closing = next_charge(ended, metered, at(3700), min_period=MIN)
    assert closing is not None
    assert closing.amount == D("-50.00")
    assert closing.hours == D("-0.500000")


def test_never_started_and_clock_behind_charge_nothing() -> None:
    assert next_charge(Copy(1, D(1), D(1), None, None), Metered(), at(999), min_period=MIN) is None
    ahead = Metered(at(500))
    assert next_charge(Copy(1, D(1), D(1), at(0), None), ahead, at(400), min_period=timedelta(0)) is None


pass_gaps = st.lists(st.integers(min_value=0, max_value=3 * 3600 * 10**6), max_size=30)


@given(weights, prices, pass_gaps, st.integers(min_value=0, max_value=24 * 3600 * 10**6), st.booleans())
def test_periodic_charges_sum_to_the_formula_over_the_whole_copy(
    weight: Decimal, price: Decimal, gaps: list[int], run_us: int, overshoot: bool
) -> None:
    start = at(0)
    passes, t = [], start
    for gap in gaps:
        t += timedelta(microseconds=gap)
        passes.append(t)
    end = start + timedelta(microseconds=run_us)
    # While it runs the meter sees passes up to its end (or, with ``overshoot``, past it: the end is recorded late).
    seen = passes if overshoot else [p for p in passes if p <= end]
    metered, keys = meter(Copy(9, weight, price, start, None), seen)
    assert len(keys) == len(set(keys))  # a period is charged once: its key is never reused
    closing = next_charge(Copy(9, weight, price, start, end), metered, end + timedelta(hours=1), min_period=MIN)
    assert closing is not None
    assert closing.closes
    assert closing.key not in keys
    final = closing.after(metered)
    assert final.hours == copy_hours(weight, start, end)
    assert final.amount == copy_cost(weight, price, start, end)
