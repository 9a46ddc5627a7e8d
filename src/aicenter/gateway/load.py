"""What the gateway measures of each revision's load, for the autoscaler (``core.serving.autoscale``) and drain.

Concurrency is integrated over time as it changes (each request's start, end, hold and release), so the average
a window reports is exact, not sampled: a burst of 2 ms requests between two samples still counts. Latencies
are kept per window up to ``MAX_SAMPLES`` (a uniform reservoir past that), enough for a p99 of a window.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Mapping

from aicenter.core.serving.routing import RevisionLoad

__all__ = ["MAX_SAMPLES", "LoadMeter"]

MAX_SAMPLES = 2048


class _Window:
    __slots__ = ("area", "concurrency", "errors", "held", "last", "latencies", "peak", "requests", "seen", "start")

    def __init__(self, now: float) -> None:
        self.concurrency = 0
        self.held = 0
        self.area = 0.0
        self.start = now
        self.last = now
        self.peak = 0
        self.requests = 0
        self.errors = 0
        self.seen = 0  # latencies offered this window (the reservoir's denominator)
        self.latencies: list[float] = []

    def move(self, now: float, delta: int) -> None:
        self.area += self.concurrency * (now - self.last)
        self.last = now
        self.concurrency += delta
        self.peak = max(self.peak, self.concurrency)


class LoadMeter:
    """Per revision load between two ``take`` calls. Not thread-safe: the gateway's event loop owns it.

    Args:
        clock: Monotonic seconds (tests pass their own).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._windows: dict[int, _Window] = {}

    def _window(self, revision_id: int) -> _Window:
        window = self._windows.get(revision_id)
        if window is None:
            window = self._windows[revision_id] = _Window(self._clock())
        return window

    def started(self, revision_id: int) -> None:
        """A request began at a replica of the revision."""
        self._window(revision_id).move(self._clock(), 1)

    def abandoned(self, revision_id: int) -> None:
        """A request counted by ``started`` never reached the replica (it is sent elsewhere or refused)."""
        self._window(revision_id).move(self._clock(), -1)

    def held(self, revision_id: int) -> None:
        """The activator holds a request for the revision (it counts as demand)."""
        window = self._window(revision_id)
        window.move(self._clock(), 1)
        window.held += 1

    def unheld(self, revision_id: int) -> None:
        """A held request left the queue (sent to a replica: ``started`` follows; or refused)."""
        window = self._window(revision_id)
        window.move(self._clock(), -1)
        window.held -= 1

    def finished(self, revision_id: int, latency_s: float | None, *, error: bool, started: bool = True) -> None:
        """A request ended (``started``: it had been counted by ``started``)."""
        window = self._window(revision_id)
        if started:
            window.move(self._clock(), -1)
        window.requests += 1
        window.errors += error
        if latency_s is not None:
            window.seen += 1
            if len(window.latencies) < MAX_SAMPLES:
                window.latencies.append(latency_s)
            else:
                slot = random.randrange(window.seen)
                if slot < MAX_SAMPLES:
                    window.latencies[slot] = latency_s

    def take(self, in_flight: Mapping[int, Mapping[int, int]]) -> dict[int, RevisionLoad]:
        """Each revision's load since the last call, and a new window.

        Args:
            in_flight: Per revision, requests in flight now per replica job id (the gateway's counts).

        Returns:
            Per revision id; a revision idle for a whole window is reported once (zeros), then forgotten.
        """
        now = self._clock()
        out: dict[int, RevisionLoad] = {}
        for revision_id, window in list(self._windows.items()):
            window.move(now, 0)
            span = now - window.start
            latencies = sorted(window.latencies)
            out[revision_id] = RevisionLoad(
                revision_id=revision_id,
                window_s=span,
                average_concurrency=window.area / span if span > 0 else float(window.concurrency),
                peak_concurrency=window.peak,
                requests=window.requests,
                errors=window.errors,
                held=window.held,
                in_flight=dict(in_flight.get(revision_id, {})),
                latency_p50_s=_quantile(latencies, 0.5),
                latency_p99_s=_quantile(latencies, 0.99),
            )
            if window.concurrency == 0 and window.requests == 0 and window.peak == 0:
                del self._windows[revision_id]
                continue
            fresh = _Window(now)
            fresh.concurrency = fresh.peak = window.concurrency
            fresh.held = window.held
            self._windows[revision_id] = fresh
        return out


def _quantile(ordered: list[float], q: float) -> float | None:
    """The nearest-rank quantile of sorted values (None for none)."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]
