"""The one function that changes a replica row's status (its machine time follows from it)."""

from __future__ import annotations

from datetime import datetime

from aicenter.core.clock import utcnow
from aicenter.core.jobs import ReplicaStatus, check_replica_transition
from aicenter.core.jobs.reconcile import ReplicaChange
from aicenter.db.models import Replica

__all__ = ["change_replica"]


def change_replica(row: Replica, change: ReplicaChange, *, now: datetime | None = None) -> None:
    """Change one replica row: the one place a replica's status, start and end are written.

    ``started_at`` and ``finished_at`` are the replica's machine time (what billing charges): the start is
    kept once known, the end is written with the finished status (``now`` when the change has none), and a
    finished replica never changes status again.

    Raises:
        InvalidTransition: The replica status table (``core.jobs.REPLICA_TRANSITIONS``) does not allow it.
    """
    if change.status is not None and change.status.value != row.status:
        check_replica_transition(ReplicaStatus(row.status), change.status)
        row.status = change.status.value
        if change.status.is_finished():
            row.reason = change.reason.value if change.reason is not None else None
            row.exit_code = change.exit_code
            row.finished_at = change.finished_at or now or utcnow()
    if change.started_at is not None and row.started_at is None:
        row.started_at = change.started_at
    if change.handle is not None:
        row.handle = dict(change.handle)
    if change.ports is not None:
        row.ports = list(change.ports)
