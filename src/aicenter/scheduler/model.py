"""The scheduler's data model: cluster, work, quotas and decisions.

Units everywhere: cpu in milli-cores, memory in MiB, accelerator share in milli (1000 = one whole device),
accelerator memory in MiB, time in float seconds. The scheduler never reads a clock: callers pass ``now``.

Every class here is a frozen, slotted dataclass so a snapshot can be shared between the scheduler and its
caller without copies or defensive checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from aicenter.core.errors import ValidationFailed

NodeStatus = Literal["ready", "cordoned", "down"]
"""``ready`` takes work; ``cordoned`` keeps its jobs but takes no new ones; ``down`` takes nothing."""

FULL_MILLI = 1000
"""One whole accelerator in milli."""


@dataclass(frozen=True, slots=True)
class Device:
    """One accelerator of a node.

    Attributes:
        index: Position on the node (what ``CUDA_VISIBLE_DEVICES`` gets).
        type: Accelerator type, e.g. ``nvidia-a100``.
        memory_mib: Device memory.
        nvlink_domain: Devices of one node with the same domain talk over NVLink; ``None`` = PCIe only.
    """

    index: int
    type: str
    memory_mib: int = 0
    nvlink_domain: str | None = None


@dataclass(frozen=True, slots=True)
class Node:
    """A host.

    Attributes:
        name: Unique name.
        cpu_milli: Allocatable cpu.
        memory_mib: Allocatable memory.
        devices: Accelerators.
        pools: Every pool the node belongs to. Pools overlap (a node is in ``default`` and in ``a100``); a
            job of pool P may run on any node whose ``pools`` holds P.
        labels: Free-form labels.
        state: ``ready``, ``cordoned`` or ``down``.
        leaf: Leaf switch; ``None`` = a leaf of its own.
        spine: Spine switch above the leaf; ``None`` = a spine of its own leaf.
        cache_capacity_mib: Size of the node-local dataset cache.
        cached: Dataset version id -> size (MiB) held in the cache.
    """

    name: str
    cpu_milli: int
    memory_mib: int
    devices: tuple[Device, ...] = ()
    pools: frozenset[str] = frozenset({"default"})
    labels: Mapping[str, str] = field(default_factory=dict)
    state: NodeStatus = "ready"
    leaf: str | None = None
    spine: str | None = None
    cache_capacity_mib: int = 0
    cached: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReplicaRequest:
    """What one replica needs.

    Either ``accelerators`` whole devices, or ``accelerator_milli`` in 1..999 of ONE device (sharing), never
    both. ``accelerator_memory_mib`` is the device memory the replica needs on each device it uses.
    An empty ``accelerator_types`` accepts any type.

    Raises:
        ValidationFailed: On negative amounts or both whole and fractional accelerators.
    """

    cpu_milli: int
    memory_mib: int
    accelerators: int = 0
    accelerator_milli: int = 0
    accelerator_memory_mib: int = 0
    accelerator_types: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        for name in ("cpu_milli", "memory_mib", "accelerators", "accelerator_milli", "accelerator_memory_mib"):
            if getattr(self, name) < 0:
                raise ValidationFailed("must not be negative", field=name)
        if self.accelerators and self.accelerator_milli:
            raise ValidationFailed(
                "ask for whole accelerators or a fraction of one, not both", field="accelerator_milli"
            )
        if self.accelerator_milli >= FULL_MILLI:
            raise ValidationFailed(
                "a fraction is 1..999 milli; ask for whole accelerators instead", field="accelerator_milli"
            )

    @property
    def fractional(self) -> bool:
        """True when the replica shares one device."""
        return self.accelerator_milli > 0

    @property
    def milli(self) -> int:
        """Accelerator share in milli (1000 per whole device)."""
        return self.accelerators * FULL_MILLI + self.accelerator_milli


@dataclass(frozen=True, slots=True)
class Task:
    """A role of a job (worker, ps, master, launcher) with ``replicas`` copies of one request."""

    name: str
    replicas: int
    request: ReplicaRequest


@dataclass(frozen=True, slots=True)
class Job:
    """A unit of work the scheduler places as a whole.

    Attributes:
        id: Unique id.
        workspace: The tenant (queue) it is charged to.
        user: Who submitted it (for round robin inside a workspace).
        priority: Higher runs first under the priority order and may preempt lower.
        submit_time: When it entered the queue.
        tasks: Its tasks.
        min_replicas: Gang minimum: the job starts only with at least this many replicas placed at once;
            ``None`` = all replicas.
        preemptible: Whether the scheduler may evict it.
        estimate_s: Runtime estimate, if known (SJF, backfill).
        datasets: (dataset version id, size MiB) the job reads (cache affinity).
        pool: The pool it runs in: any node that belongs to it (among others, maybe); its quota is that pool's.
        attained_service: Accelerator-seconds received so far (LAS).
        last_checkpoint_at: When it last saved a checkpoint (cheaper to preempt when recent).
        started_at: When it last started, if ever.
    """

    id: str
    workspace: str
    user: str
    priority: int
    submit_time: float
    tasks: tuple[Task, ...]
    min_replicas: int | None = None
    preemptible: bool = True
    estimate_s: float | None = None
    datasets: tuple[tuple[str, int], ...] = ()
    pool: str = "default"
    attained_service: float = 0.0
    last_checkpoint_at: float | None = None
    started_at: float | None = None

    @property
    def replica_count(self) -> int:
        """All replicas over all tasks."""
        return sum(t.replicas for t in self.tasks)

    @property
    def gang_min(self) -> int:
        """Replicas that must be placed together for the job to start."""
        total = self.replica_count
        return total if self.min_replicas is None else max(1, min(self.min_replicas, total))

    @property
    def accelerator_milli(self) -> int:
        """Accelerator share of all replicas, in milli."""
        return sum(t.replicas * t.request.milli for t in self.tasks)


@dataclass(frozen=True, slots=True)
class Quota:
    """A workspace's share of a pool.

    Resource names: ``cpu`` (milli), ``memory`` (MiB), ``accelerators`` (devices, all types) and each
    accelerator type (devices). A resource missing from ``maximum`` is unlimited; missing from
    ``guaranteed`` is 0.

    Attributes:
        workspace: The workspace.
        pool: The pool.
        guaranteed: Always available to the workspace; others may borrow it while idle and give it back.
        maximum: Never exceeded, not even by borrowing.
    """

    workspace: str
    pool: str
    guaranteed: Mapping[str, float] = field(default_factory=dict)
    maximum: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica runs.

    Attributes:
        task: Task name.
        replica: Replica index within the task.
        node: Node name.
        devices: Device indexes on the node.
        accelerator_milli: The replica's total share: 1000 per whole device (4 devices = 4000), or the
            fraction taken on the single device.
    """

    task: str
    replica: int
    node: str
    devices: tuple[int, ...]
    accelerator_milli: int


@dataclass(frozen=True, slots=True)
class Place:
    """Start ``job_id`` with these replica placements (already allocated in the state)."""

    job_id: str
    placements: tuple[ReplicaPlacement, ...]


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop ``job_id`` (already released in the state) so that ``for_job_id`` can run."""

    job_id: str
    reason: str
    for_job_id: str


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold ``nodes`` for ``job_id``; ``start_at`` is the expected start when runtime estimates exist."""

    job_id: str
    nodes: tuple[str, ...]
    start_at: float | None


@dataclass(frozen=True, slots=True)
class EvictCache:
    """Drop ``dataset`` from ``node``'s cache (already dropped in the state) to make room."""

    node: str
    dataset: str


Decision = Place | Preempt | Reserve | EvictCache

Admission = Callable[[Job], str | None]
"""A hook that refuses a job with a reason (e.g. the billing balance check) or admits it with ``None``."""


class PendingReasons(Mapping[str, str]):
    """Job id -> reason for every pending job not placed, built lazily.

    The examined jobs have their own reasons; every other pending job shares ``default``. Listing all of them
    costs O(pending), so it happens on first use of the whole mapping (iteration, ``len``, equality), not in
    the cycle: a simulator with tens of thousands of jobs waiting reads none of it. Looking up one job is
    O(1) when the pending sequence can say whether it holds an id (``has``, as ``PendingQueue`` does).
    The pending sequence is read when the mapping is first used: read it before changing that sequence.

    Args:
        explicit: Reasons of the examined jobs.
        pending: The cycle's pending jobs.
        default: The reason of every other pending job.
        drop: Ids that are not pending any more (placed this cycle).
        running: Ids that run (``state.running``): a stale pending entry gets no reason.
    """

    __slots__ = ("_default", "_drop", "_explicit", "_full", "_pending", "_running")

    def __init__(
        self,
        explicit: dict[str, str],
        pending: Sequence[Job],
        default: str,
        drop: set[str],
        running: Mapping[str, object],
    ) -> None:
        self._explicit = explicit
        self._pending = pending
        self._default = default
        self._drop = drop
        self._running = running
        self._full: dict[str, str] | None = None

    def _all(self) -> dict[str, str]:
        if self._full is None:
            full = dict.fromkeys([j.id for j in self._pending], self._default)
            full.update(self._explicit)
            for jid in self._drop:
                full.pop(jid, None)
            running = self._running
            if running:
                for jid in [j for j in full if j in running]:
                    del full[jid]
            self._full = full
        return self._full

    def __getitem__(self, job_id: str) -> str:
        if self._full is not None:
            return self._full[job_id]
        if job_id in self._drop or job_id in self._running:
            raise KeyError(job_id)
        hit = self._explicit.get(job_id)
        if hit is not None:
            return hit
        has = getattr(self._pending, "has", None)
        if has is not None:
            if has(job_id):
                return self._default
            raise KeyError(job_id)
        return self._all()[job_id]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def __repr__(self) -> str:
        return f"PendingReasons({self._all()!r})"


@dataclass(slots=True)
class CycleResult:
    """What one cycle decided.

    Attributes:
        decisions: In the order they were taken (a Preempt precedes the Place it makes room for).
        pending: Job id -> a reason a person can act on, for every pending job not placed (a
            ``PendingReasons`` from ``Scheduler.cycle``, built lazily; a plain dict elsewhere).
    """

    decisions: list[Decision] = field(default_factory=list)
    pending: Mapping[str, str] = field(default_factory=dict)

    @property
    def placed(self) -> list[Place]:
        """The Place decisions."""
        return [d for d in self.decisions if isinstance(d, Place)]

    @property
    def preempted(self) -> list[Preempt]:
        """The Preempt decisions."""
        return [d for d in self.decisions if isinstance(d, Preempt)]


@dataclass(slots=True)
class RunningJob:
    """A job the state holds resources for.

    Attributes:
        job: The job.
        placements: Its replica placements.
        started_at: When it was allocated.
        by_preemption: Whether others were evicted to start it (protects it from eviction for a while).
    """

    job: Job
    placements: tuple[ReplicaPlacement, ...]
    started_at: float
    by_preemption: bool = False
    accelerator_milli: int = field(init=False, default=0)
    """Accelerator share held, in milli (computed once: LAS reads it for every running job each cycle)."""

    def __post_init__(self) -> None:
        self.accelerator_milli = sum(p.accelerator_milli for p in self.placements)

    def attained_service(self, now: float) -> float:
        """Accelerator-seconds received up to ``now`` (for LAS)."""
        return self.job.attained_service + self.accelerator_milli / FULL_MILLI * max(0.0, now - self.started_at)

    def expected_end(self) -> float | None:
        """``started_at + estimate`` when the job has an estimate."""
        est = self.job.estimate_s
        return None if est is None else self.started_at + est
