"""Machine-time billing, pure: the seed's formula and the incremental meter's next charge.

The formula (issue 15, the seed's rules), with its rounding stated once, here:

- **copy** machine-hours = weight x (end - start), in hours, rounded half-even to 6 decimal places
  (``HOURS_STEP``, 0.0036 s of a weight-1 copy). The duration is counted in whole microseconds (what a datetime
  holds) and the product is exact (integer arithmetic on the decimals' ratios) before that one rounding.
- **task** machine-hours = the sum of its copies'; **job** = the sum of its tasks' (sums of 6-place decimals are
  exact, so no rounding happens there).
- **money** of a copy = its machine-hours x the price per machine-hour snapshotted for it, rounded half-even to
  the currency's minor unit (``MINOR_UNIT``, 0.01) once per copy. A task's and a job's cost are the sums of
  their copies' costs. Anyone can check a copy's charge with a calculator from the two numbers shown
  (machine-hours and price): that is why money is computed from the rounded hours, not the exact ones.

Weights are floats in the database (``ResourceSpec.billing_weight``); they enter as ``Decimal(str(weight))``,
the shortest decimal that reads back as the same float ("1.5", "0.1"), never the float's binary expansion.
Nothing here uses float arithmetic.

**Metering while a copy runs** charges periods ``[charged_until, now)``: each period's amount is the formula
over the whole copy so far minus what was already charged (``next_charge``), so the periodic charges telescope
to exactly the formula over the whole copy, to the cent, whatever the periods were and even when a period
charged past the copy's end (the closing charge is then negative). Each charge is keyed by (copy, period start),
the idempotency key of its ledger entry: two meters that compute the same period write one entry.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from functools import lru_cache

__all__ = [
    "HOURS_PLACES",
    "HOURS_STEP",
    "MINOR_PLACES",
    "MINOR_UNIT",
    "Charge",
    "Copy",
    "Metered",
    "charge_key",
    "copy_cost",
    "copy_hours",
    "cost",
    "next_charge",
    "to_cents",
    "total",
    "weight_decimal",
]

HOURS_PLACES = 6
HOURS_STEP = Decimal(1).scaleb(-HOURS_PLACES)  # 0.000001 machine-hour
MINOR_PLACES = 2
MINOR_UNIT = Decimal(1).scaleb(-MINOR_PLACES)  # 0.01 coin
_MICROSECONDS_PER_HOUR = 3_600_000_000


def _div_half_even(numerator: int, denominator: int) -> int:
    """``numerator / denominator`` (denominator > 0) rounded half-even to an integer, in integers only: what
    ``round(Fraction(n, d))`` gives, ~10x faster (a metering pass computes two per running copy)."""
    quotient, remainder = divmod(numerator, denominator)
    twice = 2 * remainder
    if twice > denominator or (twice == denominator and quotient % 2):
        quotient += 1
    return quotient


def _ratio(value: Decimal) -> tuple[int, int]:
    numerator, denominator = value.as_integer_ratio()
    return numerator, denominator


def weight_decimal(weight: float | Decimal | str) -> Decimal:
    """A billing weight as a decimal: a float's shortest repr ("0.1"), not its binary expansion."""
    if isinstance(weight, Decimal):
        return weight
    return Decimal(str(weight))


def _microseconds(delta: timedelta) -> int:
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def copy_hours(weight: Decimal, start: datetime, end: datetime) -> Decimal:
    """Machine-hours of one copy: ``weight x (end - start)``, rounded half-even to 6 places (0 if end <= start).

    Raises:
        ValueError: a negative weight.
    """
    if weight < 0:
        raise ValueError("a billing weight is 0 or more")
    return Decimal(_copy_microhours(_ratio(weight), start, end)).scaleb(-HOURS_PLACES)


def _copy_microhours(weight: tuple[int, int], start: datetime, end: datetime) -> int:
    """``copy_hours`` in millionths of an hour, from the weight's integer ratio: weight x us / 3600."""
    us = max(0, _microseconds(end - start))
    return _div_half_even(weight[0] * us, weight[1] * (_MICROSECONDS_PER_HOUR // 10**HOURS_PLACES))


def _cents(microhours: int, price: tuple[int, int]) -> int:
    """``cost`` in minor units, from millionths of an hour and the price's integer ratio."""
    return _div_half_even(microhours * price[0] * 10**MINOR_PLACES, 10**HOURS_PLACES * price[1])


def cost(hours: Decimal, price: Decimal) -> Decimal:
    """Money for ``hours`` machine-hours at ``price`` per machine-hour, rounded half-even to 0.01."""
    hn, hd = _ratio(hours)
    pn, pd = _ratio(price)
    return Decimal(_div_half_even(hn * pn * 10**MINOR_PLACES, hd * pd)).scaleb(-MINOR_PLACES)


def copy_cost(weight: Decimal, price: Decimal, start: datetime, end: datetime) -> Decimal:
    """The formula's money for one copy: ``cost(copy_hours(...), price)``."""
    return cost(copy_hours(weight, start, end), price)


def total(values: Iterable[Decimal]) -> Decimal:
    """A task's (sum of copies) or a job's (sum of tasks) machine-hours or money: exact decimal sums."""
    return sum(values, Decimal(0))


def to_cents(amount: Decimal) -> int:
    """An amount in minor units (the ledger's integers).

    Raises:
        ValueError: ``amount`` has more than 2 decimal places.
    """
    cents = amount.scaleb(MINOR_PLACES)
    if cents != cents.to_integral_value():
        raise ValueError(f"{amount} has more than {MINOR_PLACES} decimal places")
    return int(cents)


@dataclass(frozen=True, slots=True)
class Copy:
    """A copy (replica attempt) as billing sees it: its weight and price snapshots and when it ran.

    ``started_at`` None: it never started (nothing to charge). ``finished_at`` None: it still runs.
    """

    id: int
    weight: Decimal
    price: Decimal
    started_at: datetime | None
    finished_at: datetime | None


class _InUnits:
    """Integer sums (millionths of a machine-hour, minor units) read as the decimals the formula speaks in."""

    __slots__ = ()
    microhours: int
    cents: int

    @property
    def hours(self) -> Decimal:
        return Decimal(self.microhours).scaleb(-HOURS_PLACES)

    @property
    def amount(self) -> Decimal:
        return Decimal(self.cents).scaleb(-MINOR_PLACES)


@dataclass(frozen=True, slots=True)
class Metered(_InUnits):
    """What was charged for a copy so far: up to ``until`` (None: nothing yet), the sums of its charges in
    millionths of a machine-hour and in minor units (the meter row's integers)."""

    until: datetime | None = None
    microhours: int = 0
    cents: int = 0


@lru_cache(maxsize=4096)
def _stamp(at: datetime) -> str:
    # A pass charges thousands of copies from the same period start (the previous pass): formatted once.
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def charge_key(copy_id: int, period_start: datetime) -> str:
    """The idempotency key of a copy's charge for the period starting at ``period_start`` (UTC, microseconds)."""
    return f"charge:{copy_id}:{_stamp(period_start)}"


@dataclass(frozen=True, slots=True)
class Charge(_InUnits):
    """One period's charge of one copy, in millionths of a machine-hour and in minor units: money owed,
    positive; negative when a period charged earlier ran past the copy's recorded end. ``closes``: the copy
    ended and this is its last charge."""

    copy_id: int
    period_start: datetime
    period_end: datetime
    microhours: int
    cents: int
    closes: bool

    @property
    def key(self) -> str:
        return charge_key(self.copy_id, self.period_start)

    def after(self, metered: Metered) -> Metered:
        """The copy's metered state once this charge is recorded."""
        return Metered(self.period_end, metered.microhours + self.microhours, metered.cents + self.cents)


def next_charge(copy: Copy, metered: Metered, now: datetime, *, min_period: timedelta) -> Charge | None:
    """The copy's next charge: from where the last one ended to its end (closing it) or to ``now``.

    A running copy is charged only once ``min_period`` has passed since the last charge (the meter's interval:
    a charge per copy per pass, not per request). The amounts are totals over the whole copy minus what was
    charged, so rounding never drifts: the sum of every charge of a closed copy is ``copy_hours`` and
    ``copy_cost`` over its whole run. Integer arithmetic throughout (the same roundings as ``copy_hours`` and
    ``cost``): a metering pass computes one per running copy.

    Returns:
        None when there is nothing to charge yet: the copy never started, its period is shorter than
        ``min_period`` (or ``now`` lies before the last charge's end: another server's clock ran ahead).
    """
    if copy.started_at is None:
        return None
    start = metered.until or copy.started_at
    if copy.finished_at is not None:
        end, closes = copy.finished_at, True
    else:
        end, closes = now, False
        if end - start < min_period or end <= start:
            return None
    if copy.weight < 0:
        raise ValueError("a billing weight is 0 or more")
    microhours = _copy_microhours(_ratio(copy.weight), copy.started_at, end)
    cents = _cents(microhours, _ratio(copy.price))
    return Charge(copy.id, start, end, microhours - metered.microhours, cents - metered.cents, closes)
