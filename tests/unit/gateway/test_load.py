"""The load meter's windows: time-weighted concurrency (held requests count), peaks, latency quantiles."""

from __future__ import annotations

import pytest

from aicenter.gateway.load import MAX_SAMPLES, LoadMeter


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_average_concurrency_is_weighted_by_time() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    meter.started(1)  # t=100: 1 in flight
    clock.now = 102.0
    meter.held(1)  # t=102: 1 in flight + 1 held
    clock.now = 103.0
    meter.unheld(1)
    meter.started(1)  # the held one went to a replica: still 2
    clock.now = 104.0
    meter.finished(1, 0.5, error=False)
    meter.finished(1, 1.5, error=True)  # t=104: 0
    clock.now = 110.0
    load = meter.take({1: {11: 0}})[1]
    # 1 x 2 s + 2 x 2 s + 0 x 6 s over 10 s
    assert load.average_concurrency == pytest.approx(0.6)
    assert (load.window_s, load.peak_concurrency, load.requests, load.errors, load.held) == (10.0, 2, 2, 1, 0)
    assert (load.latency_p50_s, load.latency_p99_s) == (0.5, 1.5)
    assert load.in_flight == {11: 0}


def test_a_window_carries_what_is_still_in_flight_and_an_idle_revision_is_reported_once() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    meter.held(1)
    clock.now = 101.0
    first = meter.take({})[1]
    assert (first.average_concurrency, first.held, first.requests) == (1.0, 1, 0)
    clock.now = 103.0
    meter.unheld(1)
    meter.finished(1, None, error=True, started=False)  # refused after holding: no replica ever had it
    clock.now = 105.0
    second = meter.take({})[1]
    assert second.average_concurrency == pytest.approx(0.5)
    assert (second.peak_concurrency, second.requests, second.errors, second.latency_p50_s) == (1, 1, 1, None)
    assert meter.take({})[1].average_concurrency == 0.0  # idle for a whole window: reported once...
    assert meter.take({}) == {}  # ...then forgotten


def test_abandoned_attempts_are_not_requests() -> None:
    clock = Clock()
    meter = LoadMeter(clock)
    meter.started(1)
    meter.abandoned(1)  # the replica was unreachable: the request goes elsewhere
    meter.started(1)
    meter.finished(1, 0.1, error=False)
    load = meter.take({})[1]
    assert (load.requests, load.errors, load.peak_concurrency) == (1, 0, 1)


def test_latencies_are_sampled_past_the_reservoir() -> None:
    meter = LoadMeter(Clock())
    for i in range(MAX_SAMPLES * 3):
        meter.started(1)
        meter.finished(1, float(i), error=False)
    load = meter.take({})[1]
    assert load.requests == MAX_SAMPLES * 3
    assert load.latency_p50_s is not None
    assert load.latency_p99_s is not None
    assert MAX_SAMPLES < load.latency_p50_s < MAX_SAMPLES * 2  # ~1.5 x MAX_SAMPLES: uniform over all of them
    assert load.latency_p99_s > MAX_SAMPLES * 2.8
