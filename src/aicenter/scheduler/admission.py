"""Admission: quotas (maximum never exceeded; guarantee; borrowing) and the caller's hook (billing balance).

Borrowing needs no extra rule here: placement only ever uses free capacity, so whatever a workspace holds above
its guarantee was idle when it took it. ``is_borrowing`` marks it reclaimable by owners under their guarantee.
"""

from __future__ import annotations

from collections.abc import Mapping

from .model import Job
from .state import ClusterState

_EPS = 1e-9
_UNITS = {"cpu": ("cpu", 1000.0), "memory": ("MiB memory", 1.0)}


def _fmt(resource: str, amount: float) -> str:
    label, scale = _UNITS.get(resource, (resource, 1.0))
    return f"{amount / scale:g} {label}"


def quota_refusal(state: ClusterState, job: Job, demand: Mapping[str, float]) -> str | None:
    """Why the job would take its workspace past a quota maximum, or ``None``.

    Args:
        state: The state (usage per workspace and pool).
        job: The job.
        demand: Its resources (``job_demand`` before placement, ``placed_demand`` after).
    """
    q = state.quota(job.workspace, job.pool)
    if q is None:
        return None
    u = state.usage.get((job.workspace, job.pool), {})
    for r, mx in q.maximum.items():
        d = demand.get(r, 0.0)
        if d <= 0:
            continue
        used = u.get(r, 0.0)
        if used + d > mx + _EPS:
            if used >= mx - _EPS:
                return f"workspace {job.workspace} is at its maximum of {_fmt(r, mx)}"
            if d > mx + _EPS:
                return f"job needs {_fmt(r, d)}, more than workspace {job.workspace}'s maximum of {_fmt(r, mx)}"
            return (
                f"workspace {job.workspace} uses {_fmt(r, used)} of its maximum of {_fmt(r, mx)}; "
                f"the job needs {_fmt(r, d)}"
            )
    return None


def within_guarantee(state: ClusterState, job: Job, demand: Mapping[str, float]) -> bool:
    """Whether the workspace stays within its guarantee with this job (it may then reclaim lent capacity)."""
    q = state.quota(job.workspace, job.pool)
    if q is None or not any(v > 0 for v in q.guaranteed.values()):
        return False
    u = state.usage.get((job.workspace, job.pool), {})
    checked = False
    for r, d in demand.items():
        if d <= 0 or r not in q.guaranteed:
            continue
        checked = True
        if u.get(r, 0.0) + d > q.guaranteed[r] + _EPS:
            return False
    return checked


def is_borrowing(state: ClusterState, workspace: str, pool: str) -> bool:
    """Whether a workspace holds more than its guarantee of some resource (all of it, without a quota)."""
    u = state.usage.get((workspace, pool), {})
    q = state.quota(workspace, pool)
    g = q.guaranteed if q is not None else {}
    return any(v > g.get(r, 0.0) + _EPS for r, v in u.items() if r in g or q is None or not g)
