"""What a trace describes, before it meets the scheduler: jobs (work to run) and node specs (capacity)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True, slots=True)
class TraceJob:
    """One job of a trace.

    A job runs ``replicas`` identical replicas as one gang; each replica asks for ``gpus`` whole accelerators or
    ``gpu_milli`` (1..999) of one accelerator, plus cpu and memory. ``duration`` is the service the job needs when
    it runs without interruption, in seconds (``inf`` for tasks that never leave, as in fill mode).
    """

    id: str
    workspace: str
    user: str
    submit_time: float
    duration: float
    replicas: int = 1
    gpus: int = 0
    gpu_milli: int = 0
    cpu_milli: int = 1000
    memory_mib: int = 1024
    gpu_types: frozenset[str] = frozenset()
    priority: int = 0
    preemptible: bool = True
    estimate_s: float | None = None

    @property
    def total_gpus(self) -> float:
        """Accelerators the whole job holds while it runs (fractions count as such: 460 milli = 0.46)."""
        return self.replicas * (self.gpus if self.gpus else self.gpu_milli / 1000.0)


@dataclass(frozen=True, slots=True)
class NodeSpec:
    """One node as a trace describes it: whole accelerators of one type."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_type: str
    gpu_memory_mib: int = 0
    leaf: str | None = None
    spine: str | None = None


@dataclass(frozen=True, slots=True)
class Trace:
    """Jobs sorted by submit time (ties keep file order); ``origin`` is the wall-clock time of t = 0."""

    source: str
    jobs: tuple[TraceJob, ...]
    origin: datetime | None = None
    window_s: tuple[float, float] | None = None
    meta: dict[str, object] = field(default_factory=dict)

    @property
    def workspaces(self) -> list[str]:
        return sorted({j.workspace for j in self.jobs})
