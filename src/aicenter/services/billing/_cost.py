"""What a job (or a notebook, or a service's replicas) costs: the formula over its copies, estimated while they run.

The amounts are ``core.billing``'s formula over each copy's own weight and price snapshots, a running copy
ending ``now``: the same numbers the meter charges, so a finished job's cost equals the sum of its charges to
the cent (``charged`` shows the latter, which lags the estimate by up to one meter interval while it runs).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import billing
from aicenter.db.models import BillingMeter, Replica, ServiceReplica


@dataclass(frozen=True)
class CostView:
    """The machine-hours and money of some copies.

    ``estimated``: a copy still runs and was counted up to ``at`` (its figures grow until it ends); otherwise the
    figures are final. ``charged``: what the meter has charged for these copies so far (coins, positive).
    """

    machine_hours: Decimal
    amount: Decimal
    estimated: bool
    charged: Decimal
    copies: int
    at: datetime


def _utc(value: datetime) -> datetime:
    # Rows read back aware (UTC); a caller's naive ``now`` is taken as UTC, so the two subtract.
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def copies_cost(rows: Iterable[Replica], now: datetime) -> tuple[Decimal, Decimal, bool, int]:
    """The formula over ``rows`` (copies), each running one ending ``now``: (hours, money, estimated, copies)."""
    now = _utc(now)
    hours: list[Decimal] = []
    money: list[Decimal] = []
    estimated = False
    for row in rows:
        if row.started_at is None:
            continue
        end = row.finished_at
        if end is None:
            end, estimated = now, True
        h = billing.copy_hours(billing.weight_decimal(row.billing_weight), _utc(row.started_at), _utc(end))
        hours.append(h)
        money.append(billing.cost(h, Decimal(row.price_per_hour)))
    return billing.total(hours), billing.total(money), estimated, len(hours)


async def _cost_of_jobs(session: AsyncSession, job_ids: Sequence[int], now: datetime) -> CostView:
    rows = (await session.scalars(select(Replica).where(Replica.job_id.in_(job_ids)))).all() if job_ids else []
    hours, amount, estimated, copies = copies_cost(rows, now)
    charged_cents = 0
    if job_ids:
        # The copies' meter rows hold the sums of their charges (written with each charge, in its transaction):
        # a few rows per job by its index, where the ledger has a charge per copy per minute.
        charged_cents = int(
            await session.scalar(
                select(func.coalesce(func.sum(BillingMeter.cents), 0)).where(BillingMeter.job_id.in_(job_ids))
            )
            or 0
        )
    charged = Decimal(charged_cents).scaleb(-billing.MINOR_PLACES)
    return CostView(hours, amount, estimated, charged, copies, now)


async def job_cost(session: AsyncSession, job_id: int, now: datetime) -> CostView:
    """A job's (or a notebook's: its job) machine-hours and cost so far, estimated up to ``now`` while a copy
    runs. The caller has loaded the job for its actor (``jobs.load_job``): billing imports neither jobs nor
    serving, which ask billing for admission."""
    return await _cost_of_jobs(session, [job_id], now)


async def service_cost(session: AsyncSession, service_id: int, now: datetime) -> CostView:
    """A service's cost over the replica jobs it has now (drained replicas it has forgotten are no longer
    linked to it; their charges stay in the ledger under their job ids). The caller has loaded the service for
    its actor (``serving.load_service``)."""
    job_ids = list(
        (await session.scalars(select(ServiceReplica.job_id).where(ServiceReplica.service_id == service_id))).all()
    )
    return await _cost_of_jobs(session, job_ids, now)
