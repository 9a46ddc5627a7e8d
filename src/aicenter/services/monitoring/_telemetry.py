"""What this process measures about itself in memory, for the Prometheus exposition at ``/metrics``.

The snapshot (``_snapshot.py``) reads the database's state at scrape time; what happens between two scrapes (how
long each scheduling cycle took, what it decided, the requests a service answered) is counted here, as it happens,
by whoever does it: the scheduling controller feeds the scheduler families (the scheduler core stays pure and
knows nothing of Prometheus), the serving gateway will feed the service families. ``AppContext.telemetry`` holds
one ``ProcessTelemetry`` per app; the API layer registers its collectors in the app's registry.

Each process counts its own work, so with several replicas only the scheduler lease holder's cycles appear, and a
service's requests are summed over the gateways by PromQL (``sum by (service)``), as Prometheus intends for
counters. The metrics are created unregistered (``registry=None``): two apps in one process (the tests) never
collide on names in prometheus_client's global registry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.registry import Collector

# A cycle on the lease holder reads the node and id lists, decides and writes: ~2 ms on an idle SQLite center,
# ~50 ms with 1,000 pending jobs, seconds only when something is badly wrong; 13 buckets span 1 ms to 10 s.
CYCLE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# Inference requests: a small model answers in milliseconds, an LLM streams for a minute.
SERVICE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


class DecisionKind:
    """The ``kind`` label values of ``aicenter_scheduler_decisions_total``."""

    STARTED = "started"  # a placement written: the job moved queued -> scheduled
    PREEMPTED = "preempted"  # a running job asked to stop so that a queued one fits
    UNDONE = "undone"  # a placement the database refused (the job changed meanwhile); retried next cycle

    ALL = (STARTED, PREEMPTED, UNDONE)


class ProcessTelemetry:
    """The in-memory metrics of one app: scheduler cycles and decisions, serving requests and replicas.

    Thread-safe (prometheus_client's metrics lock their values), cheap enough to update on every request.

    Attributes:
        cycle_duration: ``aicenter_scheduler_cycle_duration_seconds``, one observation per cycle of the
            scheduler lease holder, from its database read to its decisions written.
        decisions: ``aicenter_scheduler_decisions_total{pool, kind}``.
        service_requests: ``aicenter_service_requests_total{service, revision, code}``; ``service`` is
            ``<workspace>/<service>`` (bounded by the services deployed), ``revision`` its number ("" when the
            request was refused before one was chosen), ``code`` the HTTP status.
        service_duration: ``aicenter_service_request_duration_seconds{service, revision}``.
        service_replicas: ``aicenter_service_replicas{service, state}``.
    """

    def __init__(self) -> None:
        self.cycle_duration = Histogram(
            "aicenter_scheduler_cycle_duration_seconds",
            "Time of one scheduling cycle on the scheduler lease holder: read, decide, write.",
            buckets=CYCLE_BUCKETS,
            registry=None,
        )
        self.decisions = Counter(
            "aicenter_scheduler_decisions",
            "Scheduling decisions written, by the pool of the job they were taken for and kind "
            "(started, preempted, undone).",
            ["pool", "kind"],
            registry=None,
        )
        self.service_requests = Counter(
            "aicenter_service_requests",
            "Inference requests answered by the gateway, by service (workspace/name), revision and HTTP status code.",
            ["service", "revision", "code"],
            registry=None,
        )
        self.service_duration = Histogram(
            "aicenter_service_request_duration_seconds",
            "Time to answer an inference request (to the response's start), by service (workspace/name) and revision.",
            ["service", "revision"],
            buckets=SERVICE_BUCKETS,
            registry=None,
        )
        self.service_replicas = Gauge(
            "aicenter_service_replicas",
            "Replicas of a service (workspace/name) by state (starting, ready, draining).",
            ["service", "state"],
            registry=None,
        )

    def collectors(self) -> Sequence[Collector]:
        """The metrics to register in an app's registry."""
        return (
            self.cycle_duration,
            self.decisions,
            self.service_requests,
            self.service_duration,
            self.service_replicas,
        )

    def observe_cycle(self, seconds: float, decisions: Mapping[tuple[str, str], int]) -> None:
        """Record one scheduling cycle.

        Args:
            seconds: Its duration.
            decisions: ``(pool, kind) -> count`` of what it decided (kinds from ``DecisionKind``).
        """
        self.cycle_duration.observe(seconds)
        for (pool, kind), count in decisions.items():
            if count:
                self.decisions.labels(pool, kind).inc(count)
