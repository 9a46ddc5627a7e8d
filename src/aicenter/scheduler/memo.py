"""Per-cycle memo of placement verdicts (kube-scheduler's equivalence classes, with dominance).

A cycle over a backlog of 1,000 jobs on a full cluster asks the placer the same question many times: Philly
has a dozen request shapes, so hundreds of pending 1-GPU or 8-GPU jobs fail alike. Two facts make a failure
reusable:

* **Shrinking capacity keeps a failure a failure.** Placements inside a cycle only take capacity. While
  ``ClusterState.freed_version`` is unchanged (no release, preemption, node change or cache drop) a job
  shape that did not fit still does not fit, however many other jobs were placed since.
* **Dominance.** A single-task job that asks at least as much in every dimension (replicas, gang minimum,
  devices or device share, device memory, cpu, memory) of the same kind (whole devices, a device share, cpu
  only), the same accelerator types and pool, fails where a smaller one failed. A failure on all nodes also
  holds on a subset (outside a reservation).

Why monotone: for one task of identical replicas, whether k replicas fit depends only on per-node replica
capacity (``min(free devices // d, free cpu // c, free memory // m)``, or the sum over devices for shares)
summed over the cluster, a leaf or a spine (``topology_limit``), and each of those shrinks with capacity and
with a bigger request. Jobs of several tasks have no such guarantee (greedy order matters), so their failure
is reused only for the exact shape on the exact same state (``ClusterState.version``). Stated approximation:
device-share candidates are truncated to ``fgd_candidates`` partly used nodes, so on clusters with more
partly used nodes than that a typed or device-memory-bound share could in principle fit after a placement
changed which nodes are candidates; the memo then defers it to the next cycle.

Successes are remembered only for the exact shape on the exact state (they are used to tell "behind the
reservation" from "does not fit at all", a reason, not a decision).
"""

from __future__ import annotations

from .model import Job
from .state import ClusterState

Vec = tuple[int, ...]
Shape = tuple[tuple[object, ...], Vec | None]


def _shape(job: Job, gang: bool, cache: bool) -> Shape:
    """(group, vector): equal groups compare by vector; vector ``None`` = exact shape only (several tasks)."""
    datasets = job.datasets if cache else ()
    if len(job.tasks) != 1:
        return ("multi", job.pool, tuple((t.replicas, t.request) for t in job.tasks), job.gang_min, datasets), None
    task = job.tasks[0]
    r = task.request
    kind = "share" if r.fractional else "whole" if r.accelerators else "cpu"
    need = job.gang_min if gang else 1
    vec = (task.replicas, need, r.milli, r.accelerator_memory_mib, r.cpu_milli, r.memory_mib)
    return (kind, job.pool, r.accelerator_types, datasets), vec


class PlacementMemo:
    """Placement verdicts of one cycle.

    Args:
        state: The cycle's state (its versions decide what stays valid).
        gang: Whether the policy places gangs all-or-nothing (the gang minimum is then part of the shape).
        cache: Whether cache affinity is on (the job's datasets are then part of the shape).
    """

    def __init__(
        self, state: ClusterState, gang: bool, cache: bool, shapes: dict[str, tuple[Job, Shape]] | None = None
    ) -> None:
        self.state = state
        # job id -> (job, shape): shapes outlive the cycle (the caller keeps this dict); a job object that
        # changed (e.g. requeued after preemption) is recomputed, since the identity check fails.
        self._shapes: dict[str, tuple[Job, Shape]] = {} if shapes is None else shapes
        self.gang = gang
        self.cache = cache
        self._freed = state.freed_version
        # (group, restricted) -> vector -> reason (single-task shapes, valid while freed_version holds)
        self._fail: dict[tuple[tuple[object, ...], bool], dict[Vec, str]] = {}
        # (group, restricted) -> (state.version, reason) (several tasks: exact state only)
        self._fail_exact: dict[tuple[tuple[object, ...], bool], tuple[int, str]] = {}
        # shape -> state.version at which the exact shape fitted on all nodes
        self._fits: dict[Shape, int] = {}
        # (group, restricted, vector) -> entries seen when it was found not dominated (skips rescans)
        self._not_dominated: dict[tuple[tuple[object, ...], bool, Vec], int] = {}
        # Failed victim searches: (group, rank key) -> vectors (None = exact multi-task shape), valid on one state
        self._no_victims: dict[tuple[tuple[object, ...], tuple[object, ...]], set[Vec | None]] = {}
        self._no_victims_at = (state.version, state.freed_version)

    def _valid(self) -> None:
        if self.state.freed_version != self._freed:
            self._freed = self.state.freed_version
            self._fail.clear()
            self._not_dominated.clear()

    def shape(self, job: Job) -> Shape:
        """The job's shape, the key of every other method (cached per job object)."""
        hit = self._shapes.get(job.id)
        if hit is not None and hit[0] is job:
            return hit[1]
        shape = _shape(job, self.gang, self.cache)
        self._shapes[job.id] = (job, shape)
        return shape

    def failure(self, shape: Shape, restricted: bool) -> tuple[bool, str | None]:
        """Whether a job of ``shape`` is known not to fit (on all nodes, or ``restricted`` to outside a reservation).

        Returns:
            ``(False, None)``: unknown; ``(True, reason)``: the same shape failed; ``(True, None)``: a shape
            it dominates failed (the caller explains this one).
        """
        self._valid()
        group, vec = shape
        if vec is None:
            for flag in (restricted, False) if restricted else (False,):
                hit = self._fail_exact.get((group, flag))
                if hit is not None and hit[0] == self.state.version:
                    return True, hit[1]
            return False, None
        found = False
        for flag in (restricted, False) if restricted else (False,):
            entries = self._fail.get((group, flag))
            if not entries:
                continue
            reason = entries.get(vec)
            if reason is not None:  # on all nodes, the reason is the same for the restricted case
                return True, reason
            if not found:
                seen = (group, flag, vec)
                if self._not_dominated.get(seen) == len(entries):
                    continue
                found = any(all(a >= b for a, b in zip(vec, other, strict=True)) for other in entries)
                if not found:
                    self._not_dominated[seen] = len(entries)
        return found, None

    def record_failure(self, shape: Shape, restricted: bool, reason: str) -> None:
        """Remember that ``shape`` did not fit (on all nodes, or outside the reservation)."""
        self._valid()
        group, vec = shape
        if vec is None:
            self._fail_exact[(group, restricted)] = (self.state.version, reason)
        else:
            self._fail.setdefault((group, restricted), {})[vec] = reason

    def no_victims(self, shape: Shape, key: tuple[object, ...]) -> bool:
        """Whether a victim search for ``shape`` already failed on this very state (same ``key``: the
        preemptor's rank and whatever else decides the candidates).

        Exact state only (``state.version`` and ``freed_version``): a placement adds a running job that may
        become a candidate. On one state, with the same candidates, a search fails for a single-task shape
        at least as large as one that failed (the what-if placement with every candidate lifted is monotone,
        as above).
        """
        at = (self.state.version, self.state.freed_version)
        if at != self._no_victims_at:
            self._no_victims_at = at
            self._no_victims.clear()
            return False
        group, vec = shape
        failed = self._no_victims.get((group, key))
        if not failed:
            return False
        if vec in failed:
            return True
        return vec is not None and any(
            other is not None and all(a >= b for a, b in zip(vec, other, strict=True)) for other in failed
        )

    def record_no_victims(self, shape: Shape, key: tuple[object, ...]) -> None:
        """Remember that a victim search for ``shape`` failed on the current state."""
        at = (self.state.version, self.state.freed_version)
        if at != self._no_victims_at:
            self._no_victims_at = at
            self._no_victims.clear()
        self._no_victims.setdefault((shape[0], key), set()).add(shape[1])

    def fits(self, shape: Shape) -> bool:
        """Whether ``shape`` fitted on all nodes of this very state."""
        return self._fits.get(shape) == self.state.version

    def record_fit(self, shape: Shape) -> None:
        """Remember that ``shape`` fits on all nodes of the current state."""
        self._fits[shape] = self.state.version
