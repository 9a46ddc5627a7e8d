"""Report periods of billing (pure): UTC calendar buckets and the checked range of a report.

A week starts on Monday (ISO 8601), a month on its 1st, a year on January 1st, all at 00:00 UTC. A range is
half-open in days, ``[start, end)``: ``from=2026-01-01&to=2027-01-01`` is the year 2026.
"""

from __future__ import annotations

from datetime import date, timedelta
from enum import StrEnum

from aicenter.core.errors import ValidationFailed

MAX_RANGE_YEARS = 5
# A range's last bucket and its five-year bound must stay within the calendar's year 9999.
LAST_YEAR = 9000


class Period(StrEnum):
    DAY = "day"
    WEEK = "week"
    MONTH = "month"
    YEAR = "year"


def bucket_start(day: date, period: Period) -> date:
    """The first day of the period that holds ``day``."""
    if period is Period.DAY:
        return day
    if period is Period.WEEK:
        return day - timedelta(days=day.weekday())
    if period is Period.MONTH:
        return day.replace(day=1)
    return day.replace(month=1, day=1)


def next_bucket(start: date, period: Period) -> date:
    """The first day of the period after the one starting at ``start``."""
    if period is Period.DAY:
        return start + timedelta(days=1)
    if period is Period.WEEK:
        return start + timedelta(days=7)
    if period is Period.MONTH:
        return date(start.year + start.month // 12, start.month % 12 + 1, 1)
    return date(start.year + 1, 1, 1)


def buckets(start: date, end: date, period: Period) -> list[date]:
    """The starts of every period that meets ``[start, end)``, in order."""
    out, at = [], bucket_start(start, period)
    while at < end:
        out.append(at)
        at = next_bucket(at, period)
    return out


def _add_years(day: date, years: int) -> date:
    """The same day ``years`` later; February 29th becomes March 1st in a common year."""
    try:
        return day.replace(year=day.year + years)
    except ValueError:
        return date(day.year + years, 3, 1)


def parse_day(value: str | None, field: str) -> date | None:
    """A ``YYYY-MM-DD`` day, or None when absent.

    Raises:
        ValidationFailed: not a date.
    """
    if value is None or value == "":
        return None
    try:
        return date.fromisoformat(value)
    except ValueError:
        raise ValidationFailed(f'"{value}" is not a date; use YYYY-MM-DD', field=field) from None


def report_range(period: Period, start: date | None, end: date | None, anchor: date) -> tuple[date, date]:
    """The ``[start, end)`` days of a report: both ends given, or neither (then the ``period`` holding
    ``anchor``).

    Raises:
        ValidationFailed: one end only (unbounded), ``to`` not after ``from`` (reversed or empty), longer
            than five years, or a day after ``LAST_YEAR``.
    """
    for day, field in ((anchor, "anchor"), (start, "from"), (end, "to")):
        if day is not None and day.year > LAST_YEAR:
            raise ValidationFailed(f"must be in the year {LAST_YEAR} or before", field=field)
    if start is None and end is None:
        first = bucket_start(anchor, period)
        return first, next_bucket(first, period)
    if start is None or end is None:
        raise ValidationFailed(
            "give both from and to (YYYY-MM-DD, to excluded), or neither for the period holding anchor",
            field="from" if start is None else "to",
        )
    if end <= start:
        raise ValidationFailed(f"must be after from ({start.isoformat()}): the range is [from, to)", field="to")
    if end > _add_years(start, MAX_RANGE_YEARS):
        raise ValidationFailed(f"the range is longer than {MAX_RANGE_YEARS} years; ask for a shorter one", field="to")
    return start, end
