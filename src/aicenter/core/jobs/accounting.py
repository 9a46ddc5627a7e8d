"""Machine time: what billing charges for.

A replica's machine time is its spec's billing weight times how long it held its resources (DESIGN.md,
"Vocabulary"); a task sums its replicas, a job its tasks. Every replica attempt is one record (the ``replicas``
row: ``billing_weight``, ``started_at``, ``finished_at``), so a restarted job is charged for each attempt and
never twice for one. A meter that charges in periods passes ``since``/``until`` and charges only the overlap,
so consecutive periods add up to the whole.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol


class TimedReplica(Protocol):
    """What machine time reads from a replica attempt (the ORM ``Replica`` row has these attributes)."""

    @property
    def task(self) -> str: ...
    @property
    def billing_weight(self) -> float: ...
    @property
    def started_at(self) -> datetime | None: ...
    @property
    def finished_at(self) -> datetime | None: ...


def machine_time_s(
    weight: float,
    started: datetime | None,
    ended: datetime | None,
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> float:
    """Weight x seconds held, within the window ``[since, until)`` when given.

    Args:
        weight: The billing weight of the replica's resource spec (>= 0).
        started: When the replica started holding resources; ``None`` (never started) is 0.
        ended: When it released them; ``None`` while it still runs, then ``now`` is the end.
        now: The end of a replica that still runs.
        since: Start of the charged period (inclusive).
        until: End of the charged period.

    Raises:
        ValueError: A negative or non-finite weight, or a running replica without ``now``.
    """
    if not math.isfinite(weight) or weight < 0:
        raise ValueError(f"billing weight must be a finite number >= 0, got {weight!r}")
    if started is None:
        return 0.0
    if ended is None:
        if now is None:
            raise ValueError("the replica still runs: pass now")
        ended = now
    if since is not None and since > started:
        started = since
    if until is not None and until < ended:
        ended = until
    seconds = (ended - started).total_seconds()
    return weight * seconds if seconds > 0 else 0.0


def replica_machine_time_s(
    replica: TimedReplica, *, now: datetime | None = None, since: datetime | None = None, until: datetime | None = None
) -> float:
    return machine_time_s(
        replica.billing_weight, replica.started_at, replica.finished_at, now=now, since=since, until=until
    )


@dataclass(frozen=True, slots=True)
class MachineTime:
    """A job's machine time: the total and each task's share (weight-seconds)."""

    total_s: float = 0.0
    by_task: dict[str, float] = field(default_factory=dict)


def job_machine_time(
    replicas: Iterable[TimedReplica],
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> MachineTime:
    """Sum replica attempts into tasks and the job (``math.fsum``: exact enough to add up across periods)."""
    parts: dict[str, list[float]] = {}
    for replica in replicas:
        parts.setdefault(replica.task, []).append(replica_machine_time_s(replica, now=now, since=since, until=until))
    by_task = {task: math.fsum(values) for task, values in parts.items()}
    return MachineTime(math.fsum(v for values in parts.values() for v in values), by_task)


def task_machine_time_s(
    replicas: Iterable[TimedReplica],
    task: str,
    *,
    now: datetime | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
) -> float:
    """The machine time of one task: the sum over its replica attempts."""
    return math.fsum(replica_machine_time_s(r, now=now, since=since, until=until) for r in replicas if r.task == task)
