"""Monitoring: what the cluster, every job and every service is doing.

``snapshot`` reads the platform's state as a few aggregate numbers for the Prometheus exposition at ``/metrics``;
``ProcessTelemetry`` counts what this process does between scrapes (scheduler cycles, service requests).
Series (``record_samples``, ``query_series``, ``latest_values``, ``series_names``) store sampled and reported
values with 5-minute and hourly rollups, queried by range with server-side downsampling.
"""

from aicenter.services.monitoring._cluster import (
    USED_FAMILIES,
    WORKSPACE_USED,
    ClusterSnapshot,
    UsedFamily,
)
from aicenter.services.monitoring._ingest import (
    REPORT_PREFIX,
    FileChunk,
    IngestTarget,
    ingest_targets,
    read_reported,
    store_reported,
)
from aicenter.services.monitoring._series import ROLLUP_STEPS, Sample, forget_series_ids, record_samples
from aicenter.services.monitoring._series_prune import PruneResult, prune_series
from aicenter.services.monitoring._series_query import (
    DEFAULT_POINTS,
    MAX_POINTS,
    MAX_SERIES,
    LatestValue,
    Retention,
    SeriesData,
    SeriesPoint,
    SeriesResult,
    auto_step,
    latest_values,
    query_series,
    series_names,
)
from aicenter.services.monitoring._snapshot import NO_POOL, PlatformSnapshot, snapshot
from aicenter.services.monitoring._telemetry import DecisionKind, ProcessTelemetry

__all__ = [
    "DEFAULT_POINTS",
    "MAX_POINTS",
    "MAX_SERIES",
    "NO_POOL",
    "REPORT_PREFIX",
    "ROLLUP_STEPS",
    "USED_FAMILIES",
    "WORKSPACE_USED",
    "ClusterSnapshot",
    "DecisionKind",
    "FileChunk",
    "IngestTarget",
    "LatestValue",
    "PlatformSnapshot",
    "ProcessTelemetry",
    "PruneResult",
    "Retention",
    "Sample",
    "SeriesData",
    "SeriesPoint",
    "SeriesResult",
    "UsedFamily",
    "auto_step",
    "forget_series_ids",
    "ingest_targets",
    "latest_values",
    "prune_series",
    "query_series",
    "read_reported",
    "record_samples",
    "series_names",
    "snapshot",
    "store_reported",
]
