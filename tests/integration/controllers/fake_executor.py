"""An in-memory executor for the reconciler's edge tests: our own logic around it is what is tested, the real
executors have their contract suite (tests/contract). It keeps the contract's adoption rule: a launch into a
run dir that already has a replica returns that replica instead of starting a second one."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from aicenter.core.clock import utcnow
from aicenter.executors.base import (
    HostInfo,
    LaunchFailed,
    NodeCounters,
    ReplicaHandle,
    ReplicaPlan,
    ReplicaState,
    ReplicaStatus,
)


@dataclass
class FakeExecutor:
    """Replicas as entries of a dict by run dir. Tests set ``states`` and hooks to script what happens."""

    name: str = "local"
    started: dict[str, ReplicaHandle] = field(default_factory=dict)  # run dir -> the one replica started there
    launches: int = 0  # calls of launch, adoptions included
    states: dict[str, ReplicaStatus] = field(default_factory=dict)  # run dir -> what status() reports
    fail_launch: set[str] = field(default_factory=set)  # "task-index" names whose launch fails
    on_launch: Callable[[ReplicaPlan], Awaitable[None]] | None = None
    on_stop: Callable[[ReplicaHandle], Awaitable[None]] | None = None
    stopped: list[str] = field(default_factory=list)
    _pids: itertools.count[int] = field(default_factory=lambda: itertools.count(1000))

    async def launch(self, plan: ReplicaPlan) -> ReplicaHandle:
        self.launches += 1
        if self.on_launch is not None:
            await self.on_launch(plan)
        key = str(plan.run_dir)
        if f"{plan.task}-{plan.replica}" in self.fail_launch:
            raise LaunchFailed(f"{plan.task}/{plan.replica}: the engine refused it")
        if key not in self.started:
            self.started[key] = ReplicaHandle(self.name, plan.node, key, next(self._pids), 1.0)
            self.states[key] = ReplicaStatus(ReplicaState.RUNNING, started_at=utcnow())
        return self.started[key]

    async def status(self, handle: ReplicaHandle) -> ReplicaStatus:
        return self.states.get(handle.run_dir, ReplicaStatus(ReplicaState.LOST))

    async def stop(self, handle: ReplicaHandle, grace_s: float) -> None:
        if self.on_stop is not None:
            await self.on_stop(handle)
        self.stopped.append(handle.run_dir)
        current = self.states.get(handle.run_dir)
        if current is not None and current.state is ReplicaState.RUNNING:
            self.states[handle.run_dir] = ReplicaStatus(
                ReplicaState.EXITED, -15, "stopped", current.started_at, utcnow()
            )

    async def logs(self, handle: ReplicaHandle, since: int = 0, *, follow: bool = False) -> AsyncIterator[bytes]:
        if False:
            yield b""

    async def allocate_ports(self, node: str, count: int) -> list[int]:
        return list(range(20000, 20000 + count))

    async def nodes(self) -> list[HostInfo]:
        return []

    async def sample(self, handles: Sequence[ReplicaHandle]) -> list[NodeCounters]:
        return []

    async def close(self) -> None:
        return None

    def exit(self, run_dir: str, code: int, reason: str | None = None) -> None:
        """The replica in ``run_dir`` ends with ``code``."""
        current = self.states[run_dir]
        self.states[run_dir] = ReplicaStatus(ReplicaState.EXITED, code, reason, current.started_at, utcnow())

    def lose(self, run_dir: str) -> None:
        """The replica's node (or launcher) went away."""
        self.states[run_dir] = ReplicaStatus(ReplicaState.LOST)
