"""The activator's queue: the first hold activates, waiters wake when ``pick`` finds a replica, the queue is
bounded, a timeout answers None; ``activate`` is asked again while requests stay held."""

from __future__ import annotations

import asyncio

import pytest

from aicenter.core.serving.routing import Endpoint, RevisionRoute
from aicenter.gateway.activator import Activator, HoldRefused
from aicenter.gateway.load import LoadMeter

REPLICA = Endpoint(5, "127.0.0.1", 1)


class Control:
    def __init__(self) -> None:
        self.activations: list[int] = []
        self.holds = 0

    async def activate(self, revision_id: int) -> None:
        self.activations.append(revision_id)

    def on_hold(self) -> None:
        self.holds += 1


async def test_held_requests_are_released_when_a_replica_is_ready() -> None:
    control = Control()
    meter = LoadMeter()
    activator = Activator(control.activate, meter, on_hold=control.on_hold)
    revision = RevisionRoute(7, 1, 100, max_held=10)
    ready: list[Endpoint] = []
    waiters = [asyncio.create_task(activator.hold(revision, lambda: ready[0] if ready else None)) for _ in range(3)]
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert activator.held(7) == 3
    assert (control.activations, control.holds) == ([7], 1)  # one cold episode: one activation, one hurry
    ready.append(REPLICA)
    activator.wake(7)
    assert await asyncio.gather(*waiters) == [REPLICA] * 3
    assert activator.held(7) == 0
    assert not activator.holding
    assert meter.take({})[7].peak_concurrency == 3
    await activator.close()


async def test_the_queue_is_bounded_and_a_timeout_answers_none() -> None:
    control = Control()
    activator = Activator(control.activate, LoadMeter(), on_hold=control.on_hold)
    revision = RevisionRoute(7, 1, 100, max_held=1, activation_timeout_s=0.2)
    first = asyncio.create_task(activator.hold(revision, lambda: None))
    await asyncio.sleep(0)
    with pytest.raises(HoldRefused):
        await activator.hold(revision, lambda: None)
    assert await first is None
    assert activator.held(7) == 0
    await activator.close()


async def test_activate_is_asked_again_while_requests_stay_held() -> None:
    control = Control()
    activator = Activator(control.activate, LoadMeter(), on_hold=control.on_hold, repeat_s=0.1)
    revision = RevisionRoute(7, 1, 100, activation_timeout_s=1.0)
    assert await activator.hold(revision, lambda: None) is None
    assert len(control.activations) >= 2
    await activator.close()
