"""Writing metric series: samples in, series rows get-or-created, raw points inserted, rollups upserted.

One call is one batch in the caller's transaction. Series ids are cached per process (a dict lookup instead of a
SELECT per batch): a sampler writes the same few hundred series every 15 s. A cached id whose series was deleted
meanwhile (job deleted, pruned on another replica) fails the points' foreign key; the batch then forgets the
cache and resolves again inside a savepoint, so a stale cache costs one retry, never a lost batch.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import ValidationFailed
from aicenter.db.metric_writes import add_to_rollups, insert_new_points, insert_series_if_absent
from aicenter.db.models import MetricSeries

__all__ = ["ROLLUP_STEPS", "Sample", "forget_series_ids", "labels_key", "record_samples", "to_ms"]

# Rollup tiers, in seconds: 5 minutes (a day's chart at ~300 points) and 1 hour (90 days at ~2,200).
ROLLUP_STEPS = (300, 3600)
MAX_NAME = 200
MAX_LABELS_KEY = 512
# Cached ids per process; past this many the cache restarts empty (200k keys of ~100 bytes: ~40 MB at most).
_CACHE_MAX = 200_000
_ids: dict[tuple[str, str], int] = {}
_IN_CHUNK = 500


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of one series at one moment.

    Attributes:
        name: Dotted metric name, e.g. ``node.cpu_utilization`` or ``report.loss``.
        at: When, timezone-aware (UTC).
        value: The value; NaN and infinities are dropped on write.
        labels: A small fixed set per name (``{"node": "n1"}``, ``{"task": "worker", "replica": "0"}``).
        workspace_id: The tenant of job and replica series; None for cluster series (every user sees those).
        job_id: The job a series belongs to, if any. node_id: The node, if any.
    """

    name: str
    at: datetime
    value: float
    labels: Mapping[str, str] = field(default_factory=dict)
    workspace_id: int | None = None
    job_id: int | None = None
    node_id: int | None = None


def labels_key(labels: Mapping[str, str]) -> str:
    """The canonical text of a label set (sorted JSON): equal sets give equal keys."""
    return json.dumps({str(k): str(v) for k, v in labels.items()}, sort_keys=True, separators=(",", ":"))


def to_ms(moment: datetime) -> int:
    if moment.tzinfo is None:
        raise ValidationFailed("a naive datetime was given; times are UTC", field="at")
    return int(moment.timestamp() * 1000)


def _series_key(sample: Sample, key: str) -> str:
    """The identity of a sample's series. The workspace is part of it: two tenants' series never merge, even
    with equal names and labels and no job."""
    ids = (sample.workspace_id, sample.job_id, sample.node_id)
    return "\x1f".join([sample.name, key, *("" if i is None else str(i) for i in ids)])


def forget_series_ids() -> None:
    """Drop the per-process id cache (after series were deleted)."""
    _ids.clear()


def _cache_scope(session: AsyncSession) -> str:
    # Several databases may live in one process (tests, tools): ids are per database.
    return str(session.get_bind().engine.url)


async def _resolve(session: AsyncSession, rows: Mapping[str, dict[str, Any]]) -> dict[str, int]:
    """Ids of the series ``series_key -> row``, creating those that do not exist."""
    scope = _cache_scope(session)
    found = {key: _ids[(scope, key)] for key in rows if (scope, key) in _ids}
    missing = [key for key in rows if key not in found]
    if missing:
        await insert_series_if_absent(session, [rows[key] for key in missing])
        for i in range(0, len(missing), _IN_CHUNK):
            chunk = missing[i : i + _IN_CHUNK]
            stmt = select(MetricSeries.series_key, MetricSeries.id).where(MetricSeries.series_key.in_(chunk))
            found.update((await session.execute(stmt)).all())
        if len(_ids) + len(missing) > _CACHE_MAX:
            _ids.clear()
        _ids.update(((scope, key), found[key]) for key in missing)
    return found


def _rollups(points: Iterable[tuple[int, int, float]]) -> list[dict[str, Any]]:
    buckets: dict[tuple[int, int, int], list[float]] = {}
    for series_id, at_ms, value in points:
        for step_s in ROLLUP_STEPS:
            step_ms = step_s * 1000
            key = (series_id, step_s, at_ms - at_ms % step_ms)
            agg = buckets.get(key)
            if agg is None:
                buckets[key] = [1, value, value, value]
            else:
                agg[0] += 1
                agg[1] += value
                agg[2] = min(agg[2], value)
                agg[3] = max(agg[3], value)
    return [
        {"series_id": s, "step_s": st, "bucket_ms": b, "count": int(a[0]), "sum": a[1], "min": a[2], "max": a[3]}
        for (s, st, b), a in buckets.items()
    ]


def _check(sample: Sample) -> None:
    if not sample.name or len(sample.name) > MAX_NAME:
        raise ValidationFailed(f"a metric name has 1 to {MAX_NAME} characters: {sample.name[:40]!r}", field="name")


async def record_samples(session: AsyncSession, samples: Sequence[Sample]) -> int:
    """Store one batch of samples in the caller's transaction.

    Series are created on first sight; a point whose series already has one at the same millisecond is skipped
    (so writing a batch twice changes nothing); rollups count each stored point once.

    Args:
        session: A write session.
        samples: The batch, any mix of series. Non-finite values are dropped.

    Returns:
        The number of points stored.

    Raises:
        ValidationFailed: A name or label set too long, or a naive datetime.
    """
    rows: dict[str, dict[str, Any]] = {}
    keyed: list[tuple[str, int, float]] = []
    for sample in samples:
        value = float(sample.value)
        if not math.isfinite(value):
            continue
        _check(sample)
        key_of_labels = labels_key(sample.labels)
        if len(key_of_labels) > MAX_LABELS_KEY:
            raise ValidationFailed(f"labels of {sample.name} exceed {MAX_LABELS_KEY} characters", field="labels")
        key = _series_key(sample, key_of_labels)
        if key not in rows:
            rows[key] = {
                "series_key": key,
                "name": sample.name,
                "labels_key": key_of_labels,
                "labels": json.loads(key_of_labels),
                "workspace_id": sample.workspace_id,
                "job_id": sample.job_id,
                "node_id": sample.node_id,
            }
        keyed.append((key, to_ms(sample.at), value))
    if not keyed:
        return 0
    for attempt in range(2):
        ids = await _resolve(session, rows)
        # The last value given for a (series, millisecond) wins within a batch: one statement may not hold both.
        points = {(ids[key], at_ms): value for key, at_ms, value in keyed}
        try:
            async with session.begin_nested():
                inserted = await insert_new_points(session, [(s, t, v) for (s, t), v in points.items()])
        except IntegrityError:
            if attempt:
                raise
            forget_series_ids()  # a cached series was deleted meanwhile
            continue
        await add_to_rollups(session, _rollups(inserted))
        return len(inserted)
    raise AssertionError("unreachable")
