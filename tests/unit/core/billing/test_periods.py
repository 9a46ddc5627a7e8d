"""Report periods: UTC calendar buckets (ISO weeks, months, years) and the checks of a report's range."""

from __future__ import annotations

from datetime import date, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aicenter.core.billing_periods import Period, bucket_start, buckets, next_bucket, parse_day, report_range
from aicenter.core.errors import ValidationFailed

DAYS = st.dates(min_value=date(2000, 1, 1), max_value=date(2100, 12, 31))


@given(DAYS, st.sampled_from(list(Period)))
def test_every_day_lies_in_its_bucket_and_buckets_tile(day: date, period: Period) -> None:
    start = bucket_start(day, period)
    end = next_bucket(start, period)
    assert start <= day < end
    assert bucket_start(end, period) == end  # the next bucket starts where this one ends
    assert bucket_start(end - timedelta(days=1), period) == start


@pytest.mark.parametrize(
    ("day", "period", "start"),
    [
        (date(2027, 1, 1), Period.WEEK, date(2026, 12, 28)),  # a Friday: the week began in the old year
        (date(2026, 12, 28), Period.WEEK, date(2026, 12, 28)),  # a Monday
        (date(2026, 12, 31), Period.MONTH, date(2026, 12, 1)),
        (date(2028, 2, 29), Period.MONTH, date(2028, 2, 1)),
        (date(2026, 12, 31), Period.YEAR, date(2026, 1, 1)),
    ],
)
def test_bucket_edges(day: date, period: Period, start: date) -> None:
    assert bucket_start(day, period) == start


def test_buckets_cover_the_range() -> None:
    assert buckets(date(2026, 11, 15), date(2027, 2, 1), Period.MONTH) == [
        date(2026, 11, 1),
        date(2026, 12, 1),
        date(2027, 1, 1),
    ]


def test_range_without_ends_is_the_period_holding_the_anchor() -> None:
    assert report_range(Period.MONTH, None, None, date(2026, 2, 14)) == (date(2026, 2, 1), date(2026, 3, 1))
    assert report_range(Period.YEAR, None, None, date(2026, 2, 14)) == (date(2026, 1, 1), date(2027, 1, 1))


@pytest.mark.parametrize(
    ("start", "end", "field"),
    [
        (date(2026, 1, 1), None, "to"),
        (None, date(2026, 1, 1), "from"),
        (date(2026, 2, 1), date(2026, 1, 1), "to"),
        (date(2026, 1, 1), date(2026, 1, 1), "to"),
        (date(2020, 1, 1), date(2025, 1, 3), "to"),
    ],
)
def test_bad_ranges(start: date | None, end: date | None, field: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        report_range(Period.MONTH, start, end, date(2026, 1, 1))
    assert info.value.details["field"] == field


def test_five_years_is_allowed_and_bad_days_are_named() -> None:
    assert report_range(Period.YEAR, date(2021, 1, 1), date(2026, 1, 1), date(2026, 1, 1))[1] == date(2026, 1, 1)
    assert parse_day("", "from") is None
    with pytest.raises(ValidationFailed) as info:
        parse_day("2026-02-30", "from")
    assert info.value.details["field"] == "from"


@pytest.mark.parametrize(
    ("period", "start", "end", "anchor", "field"),
    [
        (Period.MONTH, None, None, date(9999, 12, 31), "anchor"),
        (Period.YEAR, None, None, date(9999, 6, 1), "anchor"),
        (Period.YEAR, date(9998, 1, 1), date(9999, 6, 1), date(2026, 1, 1), "from"),
        (Period.WEEK, date(8999, 1, 1), date(9001, 1, 1), date(2026, 1, 1), "to"),
    ],
)
def test_days_near_the_calendars_end_are_refused_not_overflowed(
    period: Period, start: date | None, end: date | None, anchor: date, field: str
) -> None:
    with pytest.raises(ValidationFailed) as info:
        report_range(period, start, end, anchor)
    assert info.value.details["field"] == field
    last = report_range(Period.YEAR, None, None, date(9000, 12, 31))
    assert last == (date(9000, 1, 1), date(9001, 1, 1))
    assert buckets(*last, Period.WEEK)[-1] == date(9000, 12, 29)  # a Monday
