"""Reading metric series: ranges downsampled on the server, latest values, names; filtered by tenant.

A range query picks the coarsest stored tier whose step divides the asked step and whose retention still covers
the range's start: raw points, 5-minute or 1-hour rollups. A 90-day chart at the default ~500 points asks for a
4-hour step, so it reads ~2,200 hourly rollup rows per series through the primary key (series, step, bucket):
one indexed range per series, never a scan of raw points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.core.clock import utcnow
from aicenter.core.errors import RangeTooWide, UnknownSeries, ValidationFailed
from aicenter.db.models import MetricPoint, MetricRollup, MetricSeries
from aicenter.services.access import member_workspace_ids
from aicenter.services.context import Actor
from aicenter.services.monitoring._series import to_ms

__all__ = [
    "DEFAULT_POINTS",
    "MAX_POINTS",
    "MAX_SERIES",
    "LatestValue",
    "Retention",
    "SeriesData",
    "SeriesPoint",
    "SeriesResult",
    "auto_step",
    "latest_values",
    "query_series",
    "series_names",
]

DEFAULT_POINTS = 500  # what a chart a few hundred pixels wide can show
MAX_POINTS = 10_000  # per series; beyond this a query is refused with the smallest step that fits
MAX_SERIES = 1_000  # per query: filter by job, node or label to read more
# Steps an automatic choice rounds up to: each a multiple of the tier below it where it can use one.
_NICE_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 14400, 21600, 43200, 86400)
_IN_CHUNK = 500
_S = TypeVar("_S", bound=Select[*tuple[Any, ...]])


@dataclass(frozen=True, slots=True)
class Retention:
    """How long each tier keeps data, in seconds (settings ``metrics_*_retention_s``)."""

    raw_s: int = 24 * 3600
    five_min_s: int = 90 * 24 * 3600
    hour_s: int = 5 * 365 * 24 * 3600

    @classmethod
    def from_settings(cls, settings: Settings) -> Retention:
        return cls(settings.metrics_raw_retention_s, settings.metrics_5m_retention_s, settings.metrics_1h_retention_s)


@dataclass(frozen=True, slots=True)
class SeriesPoint:
    """One step of a series: ``at`` is the bucket's start; ``value`` the mean of the points in it."""

    at: datetime
    value: float
    min: float
    max: float


@dataclass(slots=True)
class SeriesData:
    labels: dict[str, str]
    workspace_id: int | None
    job_id: int | None
    node_id: int | None
    points: list[SeriesPoint] = field(default_factory=list)


@dataclass(slots=True)
class SeriesResult:
    """A range query's answer: every matching series at the step actually used (``step_s``, which may be
    coarser than asked when only rollups still cover the range), and the tier read (``raw``, ``5m``, ``1h``)."""

    name: str
    step_s: int
    resolution: str
    series: list[SeriesData]


@dataclass(frozen=True, slots=True)
class LatestValue:
    name: str
    labels: dict[str, str]
    at: datetime
    value: float
    workspace_id: int | None
    job_id: int | None
    node_id: int | None


def _visible(actor: Actor | None) -> ColumnElement[bool] | None:
    """None: no restriction (the platform itself, platform admins). Members: cluster series and their
    workspaces' series."""
    if actor is None or actor.is_platform_admin:
        return None
    return or_(MetricSeries.workspace_id.is_(None), MetricSeries.workspace_id.in_(member_workspace_ids(actor)))


def _filtered(
    stmt: _S,
    actor: Actor | None,
    *,
    job_id: int | None = None,
    node_id: int | None = None,
    prefix: str | None = None,
) -> _S:
    visible = _visible(actor)
    if visible is not None:
        stmt = stmt.where(visible)
    if job_id is not None:
        stmt = stmt.where(MetricSeries.job_id == job_id)
    if node_id is not None:
        stmt = stmt.where(MetricSeries.node_id == node_id)
    if prefix:
        # substr rather than LIKE (case-insensitive on SQLite, with wildcards to escape) or a range of strings
        # (which a linguistic collation on PostgreSQL orders ignoring punctuation): exact on both databases.
        stmt = stmt.where(func.substr(MetricSeries.name, 1, len(prefix)) == prefix)
    return stmt


def auto_step(range_s: float, points: int = DEFAULT_POINTS) -> int:
    """The smallest "round" step that shows ``range_s`` in at most ``points`` steps."""
    wanted = range_s / points
    for step in _NICE_STEPS:
        if step >= wanted:
            return step
    return int(math.ceil(wanted / 86400) * 86400)


def _tier(step_s: int, start: datetime, now: datetime, retention: Retention) -> tuple[int, int]:
    """(tier step in seconds, 0 for raw; the step to use). The coarsest tier that divides the step and still
    holds the range's start; failing that, the finest tier that holds it, with the step rounded up to it."""
    age_s = (now - start).total_seconds()
    tiers = ((3600, retention.hour_s), (300, retention.five_min_s), (0, retention.raw_s))
    for tier, kept_s in tiers:
        if (tier == 0 or step_s % tier == 0) and age_s <= kept_s:
            return tier, step_s
    for tier, kept_s in reversed(tiers):
        if age_s <= kept_s and tier:
            return tier, tier * math.ceil(step_s / tier)
    return 3600, 3600 * math.ceil(step_s / 3600)  # older than every retention: whatever hourly rows remain


def _label_match(labels: Mapping[str, Any], wanted: Mapping[str, str] | None) -> bool:
    return not wanted or all(str(labels.get(k)) == v for k, v in wanted.items())


async def query_series(
    session: AsyncSession,
    actor: Actor | None,
    *,
    name: str,
    start: datetime,
    end: datetime,
    step_s: int | None = None,
    job_id: int | None = None,
    node_id: int | None = None,
    labels: Mapping[str, str] | None = None,
    retention: Retention | None = None,
) -> SeriesResult:
    """Every series named ``name`` that the actor may see and the filters match, over ``[start, end)``.

    Args:
        session: A read session.
        actor: Who asks; None for the platform itself (everything).
        name: The metric name.
        start: Range start (UTC). end: Range end, after start.
        step_s: Seconds per point; None picks one giving ~500 points.
        job_id: Only this job's series. node_id: Only this node's. labels: Only series with these label values.
        retention: The tiers' retention (settings); defaults to 1 day / 90 days / 5 years.

    Returns:
        The series with one point per step that holds data (mean, min and max of the step).

    Raises:
        ValidationFailed: ``end`` not after ``start``, a step under 1 s, or more than 1,000 series match.
        RangeTooWide: More than 10,000 points per series; ``details['min_step_s']`` is the smallest step that fits.
        UnknownSeries: No visible series matches.
    """
    start_ms, end_ms = to_ms(start), to_ms(end)
    if end_ms <= start_ms:
        raise ValidationFailed("the range's end must be after its start", field="end")
    if step_s is not None and step_s < 1:
        raise ValidationFailed("the step is at least 1 second", field="step")
    range_s = (end_ms - start_ms) / 1000
    step = step_s if step_s is not None else auto_step(range_s)
    if range_s / step > MAX_POINTS:
        min_step = math.ceil(range_s / MAX_POINTS)
        raise RangeTooWide(
            f"{range_s:.0f} s at a {step} s step is {math.ceil(range_s / step)} points per series, over "
            f"{MAX_POINTS}: use a step of at least {min_step} s or a shorter range",
            details={"min_step_s": min_step, "max_points": MAX_POINTS},
        )
    tier, step = _tier(step, start, utcnow(), retention or Retention())

    rows = (
        await session.execute(
            _filtered(select(MetricSeries).where(MetricSeries.name == name), actor, job_id=job_id, node_id=node_id)
        )
    ).scalars()
    chosen = {row.id: row for row in rows if _label_match(row.labels, labels)}
    if not chosen:
        raise UnknownSeries(f"no series {name!r} matches", details={"name": name})
    if len(chosen) > MAX_SERIES:
        raise ValidationFailed(
            f"{len(chosen)} series named {name!r} match, over {MAX_SERIES}: filter by job, node or label",
            field="name",
        )
    data = {sid: SeriesData(dict(row.labels), row.workspace_id, row.job_id, row.node_id) for sid, row in chosen.items()}
    step_ms = step * 1000
    ids = sorted(chosen)
    for i in range(0, len(ids), _IN_CHUNK):
        chunk = ids[i : i + _IN_CHUNK]
        if tier == 0:
            bucket = (MetricPoint.at_ms // step_ms).label("b")
            stmt = select(
                MetricPoint.series_id,
                bucket,
                func.avg(MetricPoint.value),
                func.min(MetricPoint.value),
                func.max(MetricPoint.value),
            ).where(MetricPoint.series_id.in_(chunk), MetricPoint.at_ms >= start_ms, MetricPoint.at_ms < end_ms)
            stmt = stmt.group_by(MetricPoint.series_id, bucket)
        else:
            bucket = (MetricRollup.bucket_ms // step_ms).label("b")
            stmt = select(
                MetricRollup.series_id,
                bucket,
                func.sum(MetricRollup.sum) / func.sum(MetricRollup.count),
                func.min(MetricRollup.min),
                func.max(MetricRollup.max),
            ).where(
                MetricRollup.series_id.in_(chunk),
                MetricRollup.step_s == tier,
                MetricRollup.bucket_ms >= start_ms - start_ms % (tier * 1000),
                MetricRollup.bucket_ms < end_ms,
            )
            stmt = stmt.group_by(MetricRollup.series_id, bucket)
        # Through the session's connection (Core), not the ORM: thousands of plain rows, no entities to build.
        connection = await session.connection()
        found = await connection.execute(stmt.order_by(stmt.selected_columns[0], bucket))
        for series_id, b, mean, low, high in found:
            at = datetime.fromtimestamp(int(b) * step, tz=UTC)
            data[series_id].points.append(SeriesPoint(at, float(mean), float(low), float(high)))
    resolution = {0: "raw", 300: "5m", 3600: "1h"}[tier]
    ordered = sorted(data.values(), key=lambda s: (sorted(s.labels.items()), s.job_id or 0, s.node_id or 0))
    return SeriesResult(name=name, step_s=step, resolution=resolution, series=ordered)


async def latest_values(
    session: AsyncSession,
    actor: Actor | None,
    *,
    names: Sequence[str] | None = None,
    prefix: str | None = None,
    job_id: int | None = None,
    node_id: int | None = None,
    max_age_s: float | None = None,
) -> list[LatestValue]:
    """The newest raw point of every matching series (one index probe per series).

    Args:
        session: A read session.
        actor: Who asks; None for the platform itself.
        names: Only these names. prefix: Only names starting so (``node.``).
        job_id: Only this job's series. node_id: Only this node's.
        max_age_s: Leave out series whose newest point is older than this.

    Returns:
        One value per series, ordered by name, then labels.
    """
    newest = (
        select(MetricPoint.at_ms)
        .where(MetricPoint.series_id == MetricSeries.id)
        .order_by(MetricPoint.at_ms.desc())
        .limit(1)
        .correlate(MetricSeries)
        .scalar_subquery()
    )
    stmt = select(MetricSeries, MetricPoint.at_ms, MetricPoint.value).join(
        MetricPoint, and_(MetricPoint.series_id == MetricSeries.id, MetricPoint.at_ms == newest)
    )
    stmt = _filtered(stmt, actor, job_id=job_id, node_id=node_id, prefix=prefix)
    if names is not None:
        stmt = stmt.where(MetricSeries.name.in_(list(names)))
    if max_age_s is not None:
        stmt = stmt.where(MetricPoint.at_ms >= to_ms(utcnow()) - int(max_age_s * 1000))
    values = [
        LatestValue(
            name=row.name,
            labels=dict(row.labels),
            at=datetime.fromtimestamp(at_ms / 1000, tz=UTC),
            value=float(value),
            workspace_id=row.workspace_id,
            job_id=row.job_id,
            node_id=row.node_id,
        )
        for row, at_ms, value in await session.execute(stmt)
    ]
    values.sort(key=lambda v: (v.name, sorted(v.labels.items()), v.job_id or 0, v.node_id or 0))
    return values


async def series_names(
    session: AsyncSession,
    actor: Actor | None,
    *,
    job_id: int | None = None,
    node_id: int | None = None,
    prefix: str | None = None,
) -> list[str]:
    """The distinct names of the series the actor may see, sorted."""
    stmt = _filtered(select(MetricSeries.name).distinct(), actor, job_id=job_id, node_id=node_id, prefix=prefix)
    return sorted(await session.scalars(stmt))
