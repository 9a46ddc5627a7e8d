"""The serving autoscaler's decision, pure: how many replicas a revision should have now (Knative's KPA model).

Inputs are what the gateway observed: the number of requests in flight at a revision (answered by replicas and
held by the activator while none is ready) sampled over time. Two averages of that concurrency decide:

- the **stable** window (default 60 s) sets the replicas in steady state:
  ``ceil(average concurrency / (target concurrency per replica x target utilization))``;
- the **panic** window (default 10 % of it, 6 s) reacts to a burst: when what it asks for reaches
  ``panic_threshold`` times the replicas ready now, the autoscaler panics: it scales to the panic window's
  need at once and does not scale down until the burst has been gone for a whole stable window.

Around that: scale-up is at most ``max_scale_up_rate`` times the ready replicas per decision (from zero: the
need, at least one), scale-down at most down to ``ready / max_scale_down_rate``; replicas stay within
``min_replicas..max_replicas``; and a revision with ``min_replicas = 0`` goes to zero only once it has had no
request for ``scale_to_zero_grace_s`` (a request held by the activator counts). From zero, one held request is
enough to ask for a replica at once: the activator must never wait for a window to fill.

No I/O, no clock: ``decide_scale`` takes ``now`` and returns the next ``ScaleState`` to keep with the decision.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

__all__ = ["ConcurrencySample", "ScaleDecision", "ScalePolicy", "ScaleState", "decide_scale", "window_average"]


@dataclass(frozen=True, slots=True)
class ScalePolicy:
    """A revision's scaling settings (the service's spec).

    Attributes:
        min_replicas: Never fewer (0 allows scale to zero).
        max_replicas: Never more.
        target_concurrency: Requests in flight one replica is meant to handle.
        target_utilization: The share of ``target_concurrency`` aimed at, leaving headroom for bursts.
        stable_window_s: The averaging window of steady state.
        panic_window_fraction: The panic window as a fraction of the stable window.
        panic_threshold: Panic when the panic window asks for this many times the ready replicas.
        max_scale_up_rate: At most this many times the ready replicas per decision.
        max_scale_down_rate: At least ready / this after a decision.
        scale_to_zero_grace_s: Without any request this long, a revision allowed to reach zero does.
    """

    min_replicas: int = 0
    max_replicas: int = 1
    target_concurrency: float = 1.0
    target_utilization: float = 0.7
    stable_window_s: float = 60.0
    panic_window_fraction: float = 0.1
    panic_threshold: float = 2.0
    max_scale_up_rate: float = 1000.0
    max_scale_down_rate: float = 2.0
    scale_to_zero_grace_s: float = 30.0

    def __post_init__(self) -> None:
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise ValueError("replicas: need 0 <= min_replicas <= max_replicas and max_replicas >= 1")
        if self.target_concurrency <= 0 or not 0 < self.target_utilization <= 1:
            raise ValueError("target_concurrency must be > 0 and target_utilization in (0, 1]")
        if self.stable_window_s <= 0 or not 0 < self.panic_window_fraction <= 1:
            raise ValueError("stable_window_s must be > 0 and panic_window_fraction in (0, 1]")
        if self.panic_threshold < 1 or self.max_scale_up_rate <= 1 or self.max_scale_down_rate < 1:
            raise ValueError("panic_threshold >= 1, max_scale_up_rate > 1, max_scale_down_rate >= 1")

    @property
    def panic_window_s(self) -> float:
        return self.stable_window_s * self.panic_window_fraction

    @property
    def per_replica(self) -> float:
        """The concurrency one replica is sized for."""
        return self.target_concurrency * self.target_utilization


@dataclass(frozen=True, slots=True)
class ConcurrencySample:
    """Requests in flight at a revision at time ``at`` (seconds, any monotonic origin): answered by replicas
    plus held by the activator."""

    at: float
    in_flight: float


@dataclass(frozen=True, slots=True)
class ScaleState:
    """What the autoscaler remembers between decisions of one revision.

    Attributes:
        panic_until: Panic mode lasts until then (None: not panicking).
        panic_floor: The replicas panic mode never goes below.
        last_request_at: When a request was last in flight (None: never).
    """

    panic_until: float | None = None
    panic_floor: int = 0
    last_request_at: float | None = None


@dataclass(frozen=True, slots=True)
class ScaleDecision:
    """The replicas wanted now and why.

    Attributes:
        desired: The replicas the revision should have.
        stable: What the stable window asked for; panic: what the panic window asked for.
        panicking: Whether panic mode holds.
        reason: A word for events and logs: ``steady``, ``panic``, ``from-zero``, ``to-zero``, ``grace``,
            ``min``, ``max``.
        state: The state to keep for the next decision.
    """

    desired: int
    stable: int
    panic: int
    panicking: bool
    reason: str
    state: ScaleState = field(default_factory=ScaleState)


def window_average(samples: Sequence[ConcurrencySample], now: float, window_s: float) -> float:
    """The time-weighted average of in-flight requests over ``(now - window_s, now]``.

    Each sample holds until the next one (the gateway reports changes); the time before the first sample in the
    window counts as the last value before it, or 0 when there is none.
    """
    start = now - window_s
    ordered = sorted(samples, key=lambda s: s.at)
    value = 0.0
    for s in ordered:
        if s.at <= start:
            value = s.in_flight
    total, at = 0.0, start
    for s in ordered:
        if s.at <= start or s.at > now:
            continue
        total += value * (s.at - at)
        value, at = s.in_flight, s.at
    total += value * (now - at)
    return total / window_s


def _need(concurrency: float, policy: ScalePolicy) -> int:
    return math.ceil(concurrency / policy.per_replica - 1e-9) if concurrency > 0 else 0


def decide_scale(
    samples: Sequence[ConcurrencySample],
    *,
    ready: int,
    now: float,
    policy: ScalePolicy,
    state: ScaleState | None = None,
    held: int = 0,
) -> ScaleDecision:
    """The replicas a revision should have now.

    Args:
        samples: In-flight requests observed (older than the stable window are ignored).
        ready: Replicas ready now (answering).
        now: The current time, on the samples' clock.
        policy: The revision's settings.
        state: What the previous decision kept.
        held: Requests the activator holds right now (none of its replicas is ready).
    """
    state = state or ScaleState()
    recent = [s for s in samples if now - policy.stable_window_s < s.at <= now]
    busy_now = held > 0 or any(s.in_flight > 0 for s in recent if s.at > now - 1.0)
    last = max([s.at for s in recent if s.in_flight > 0], default=None)
    if held > 0:
        last = now
    last_request_at = max((t for t in (state.last_request_at, last) if t is not None), default=None)
    stable = _need(window_average(samples, now, policy.stable_window_s), policy)
    panic = _need(window_average(samples, now, policy.panic_window_s), policy)

    # Panic: a burst that asks for panic_threshold times what is ready (from zero: any demand at all).
    panicking = state.panic_until is not None and now < state.panic_until
    floor = state.panic_floor if panicking else 0
    if (ready > 0 and panic >= policy.panic_threshold * ready) or (ready == 0 and (panic > 0 or held > 0)):
        panicking = True
        state = replace(state, panic_until=now + policy.stable_window_s)
    wanted = max(stable, panic) if panicking else stable
    if panicking:
        wanted = max(wanted, ready, floor)  # no scale-down while panicking
    reason = "panic" if panicking else "steady"

    # Rate limits around what is ready (from zero: straight to the need).
    if ready > 0:
        wanted = min(wanted, math.ceil(policy.max_scale_up_rate * ready))
        wanted = max(wanted, math.floor(ready / policy.max_scale_down_rate))
    if held > 0 or busy_now:
        # Requests waiting now are a need already, whatever the windows have seen of them yet.
        wanted = max(wanted, 1, _need(float(held), policy))
        if ready == 0:
            reason = "from-zero"

    # Zero only after the grace with no request at all.
    if wanted == 0 and policy.min_replicas == 0:
        idle_since = last_request_at
        if ready > 0 and idle_since is not None and now - idle_since < policy.scale_to_zero_grace_s:
            wanted, reason = 1, "grace"
        elif ready > 0:
            reason = "to-zero"
    if wanted < policy.min_replicas:
        wanted, reason = policy.min_replicas, "min"
    if wanted > policy.max_replicas:
        wanted, reason = policy.max_replicas, "max"
    if not panicking:
        state = replace(state, panic_until=None, panic_floor=0)
    else:
        state = replace(state, panic_floor=max(floor, wanted))
    state = replace(state, last_request_at=last_request_at)
    return ScaleDecision(wanted, stable, panic, panicking, reason, state)
