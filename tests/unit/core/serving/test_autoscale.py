"""The autoscaler's decision: stable and panic windows, rate limits, bounds, scale to zero after the grace and
from zero at the first held request."""

from __future__ import annotations

import pytest

from aicenter.core.serving.autoscale import (
    ConcurrencySample,
    ScalePolicy,
    ScaleState,
    decide_scale,
    window_average,
)

POLICY = ScalePolicy(min_replicas=0, max_replicas=10, target_concurrency=1.0, target_utilization=1.0)


def _steady(value: float, start: float = 0.0, end: float = 120.0, step: float = 1.0) -> list[ConcurrencySample]:
    return [ConcurrencySample(start + i * step, value) for i in range(int((end - start) / step) + 1)]


def test_window_average_weights_each_value_by_how_long_it_held() -> None:
    samples = [ConcurrencySample(0, 4), ConcurrencySample(30, 0), ConcurrencySample(50, 2)]
    assert window_average(samples, 60, 60) == pytest.approx((4 * 30 + 0 * 20 + 2 * 10) / 60)
    assert window_average(samples, 60, 6) == pytest.approx(2.0)
    assert window_average([], 60, 60) == 0.0


def test_steady_load_asks_for_load_over_capacity_per_replica() -> None:
    decision = decide_scale(_steady(3.0), ready=3, now=120, policy=POLICY)
    assert (decision.desired, decision.reason, decision.panicking) == (3, "steady", False)
    headroom = ScalePolicy(max_replicas=10, target_concurrency=2.0, target_utilization=0.5)
    assert decide_scale(_steady(3.0), ready=3, now=120, policy=headroom).desired == 3


def test_a_burst_panics_and_there_is_no_scale_down_until_it_has_been_gone_a_stable_window() -> None:
    samples = _steady(1.0, end=113) + _steady(8.0, start=114, end=120)  # the whole panic window at 8
    burst = decide_scale(samples, ready=1, now=120, policy=POLICY)
    assert (burst.panicking, burst.reason, burst.desired) == (True, "panic", 8)
    calm = samples + _steady(1.0, start=121, end=150)
    later = decide_scale(calm, ready=8, now=150, policy=POLICY, state=burst.state)
    assert (later.panicking, later.desired) == (True, 8)  # still within the stable window of the burst
    after = decide_scale(calm + _steady(1.0, start=151, end=200), ready=8, now=200, policy=POLICY, state=later.state)
    assert not after.panicking
    assert after.desired == 4  # down by at most half per decision (max_scale_down_rate 2)


def test_from_zero_one_held_request_asks_for_a_replica_at_once() -> None:
    decision = decide_scale([], ready=0, now=10, policy=POLICY, held=1)
    assert (decision.desired, decision.reason) == (1, "from-zero")
    many = decide_scale(_steady(5.0, start=9, end=10), ready=0, now=10, policy=POLICY, held=5)
    assert many.desired == 5  # straight to the need, no rate limit from zero


def test_scale_to_zero_waits_for_the_grace_without_any_request() -> None:
    samples = [ConcurrencySample(0, 1), ConcurrencySample(5, 0)]
    policy = ScalePolicy(min_replicas=0, max_replicas=4, stable_window_s=10, scale_to_zero_grace_s=30)
    state = ScaleState(last_request_at=5)
    within = decide_scale(samples, ready=1, now=20, policy=policy, state=state)
    assert (within.desired, within.reason) == (1, "grace")
    gone = decide_scale(samples, ready=1, now=40, policy=policy, state=within.state)
    assert (gone.desired, gone.reason) == (0, "to-zero")


@pytest.mark.parametrize(
    ("minimum", "maximum", "load", "ready", "expected", "reason"),
    [(2, 10, 0.0, 2, 2, "min"), (0, 3, 9.0, 3, 3, "max"), (1, 10, 0.0, 1, 1, "min")],
)
def test_replicas_stay_within_their_bounds(
    minimum: int, maximum: int, load: float, ready: int, expected: int, reason: str
) -> None:
    policy = ScalePolicy(min_replicas=minimum, max_replicas=maximum, target_utilization=1.0)
    decision = decide_scale(_steady(load), ready=ready, now=120, policy=policy)
    assert (decision.desired, decision.reason) == (expected, reason)


def test_scale_up_is_rate_limited_by_what_is_ready() -> None:
    policy = ScalePolicy(max_replicas=100, target_utilization=1.0, max_scale_up_rate=2.0)
    assert decide_scale(_steady(50.0), ready=3, now=120, policy=policy).desired == 6


@pytest.mark.parametrize(
    "bad",
    [
        {"min_replicas": 3, "max_replicas": 2},
        {"max_replicas": 0},
        {"target_concurrency": 0},
        {"target_utilization": 1.5},
        {"panic_window_fraction": 0},
        {"max_scale_down_rate": 0.5},
    ],
)
def test_a_policy_that_cannot_hold_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ScalePolicy(**bad)  # type: ignore[arg-type]
