"""Billing: the append-only ledger and the meter's state per copy (core/billing.py holds the formula).

The account is the workspace: ``Workspace.balance`` is its balance (a personal workspace is its user's
account), kept equal to the sum of its ledger entries by the services that write both in one transaction.
Amounts and machine time are integers (cents, micro machine-hours): exact, and summed exactly by SQL, on SQLite
(whose NUMERIC is a float) and PostgreSQL alike.
"""

from __future__ import annotations

from datetime import date, datetime
from decimal import Decimal

from sqlalchemy import BigInteger, Date, ForeignKey, Index, Integer, Numeric, String, text
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.core.clock import utcnow
from aicenter.db.base import Base, BigIntId, IdMixin


class LedgerEntry(IdMixin, Base):
    """One movement of a workspace's balance: a ``charge`` (negative), ``recharge``, ``refund`` or
    ``adjustment`` (either sign). Never updated nor deleted.

    ``idempotency_key`` is unique: ``charge:<replica id>:<period start>`` for the meter
    (core.billing.charge_key), the caller's key (or a random one) for an admin's recharge, so a retried write
    records nothing twice.
    """

    __tablename__ = "billing_ledger"

    # No foreign keys: the ledger outlives deleted workspaces, jobs and replicas (the history of money).
    workspace_id: Mapped[int] = mapped_column(BigIntId)
    kind: Mapped[str] = mapped_column(String(16))
    amount_cents: Mapped[int] = mapped_column(BigInteger)  # signed: + credits the workspace, - debits it
    machine_microhours: Mapped[int] = mapped_column(BigInteger, default=0)  # charges: 10^-6 machine-hours
    idempotency_key: Mapped[str] = mapped_column(String(200), unique=True)
    job_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    replica_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    period_start: Mapped[datetime | None] = mapped_column(default=None)
    period_end: Mapped[datetime | None] = mapped_column(default=None)
    reason: Mapped[str] = mapped_column(String(1024), default="")
    actor_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    actor_name: Mapped[str] = mapped_column(String(64), default="system")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)

    __table_args__ = (
        # Nothing looks entries up by copy or job (a job's charges are its meter rows' sums): each index here
        # is one more insert per copy per metering pass.
        Index("ix_billing_ledger_workspace_id_id", "workspace_id", "id"),
        {"sqlite_autoincrement": True},
    )


class BillingMeter(Base):
    """What the meter charged for one copy (replica attempt) so far: up to ``charged_until``, the sums of its
    charges; ``closed_at`` once the copy ended and its last charge is written. Kept so that a pass reads one row
    per open copy, not the copy's ledger entries.

    Also billing's own copy record: the copy's facts (who, what, at which weight and price, from when) written
    with its first charge, and ``finished_at`` with its last. No foreign keys: deleting a finished job deletes
    its replicas, never this row, so ``verify`` and the reports still see the copy.
    """

    __tablename__ = "billing_meters"

    replica_id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=False)
    workspace_id: Mapped[int] = mapped_column(BigIntId)
    job_id: Mapped[int] = mapped_column(BigIntId)
    charged_until: Mapped[datetime] = mapped_column()
    microhours: Mapped[int] = mapped_column(BigInteger, default=0)
    cents: Mapped[int] = mapped_column(BigInteger, default=0)
    closed_at: Mapped[datetime | None] = mapped_column(default=None)
    # The copy record (see the class docstring); defaults only for rows written before these columns existed.
    user_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    task: Mapped[str] = mapped_column(String(64), default="")
    kind: Mapped[str] = mapped_column(String(16), default="train")  # Job.kind: train, notebook or service
    spec_id: Mapped[int | None] = mapped_column(BigInteger, default=None)
    spec_name: Mapped[str] = mapped_column(String(64), default="")
    gpu_type: Mapped[str] = mapped_column(String(64), default="")
    gpu: Mapped[int] = mapped_column(default=0)
    billing_weight: Mapped[float] = mapped_column(default=1.0)
    price_per_hour: Mapped[Decimal] = mapped_column(Numeric(20, 4), default=Decimal(0))
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)

    __table_args__ = (
        # The open rows only (a pass looks for those whose replica is gone): an index of every row's closed_at
        # cost a third of inserting a pass's new rows.
        Index(
            "ix_billing_meters_open",
            "replica_id",
            postgresql_where=text("closed_at IS NULL"),
            sqlite_where=text("closed_at IS NULL"),
        ),
        Index("ix_billing_meters_job_id", "job_id"),  # a job's or a service's charged so far
        # Every pass rewrites each open copy's row: pages half empty keep those updates on their page (HOT, no
        # index entries), which took a third off the update of 10,000 rows.
        {"postgresql_with": {"fillfactor": 50}},
    )


class BillingPolicy(Base):
    """A workspace's billing policy, set by platform admins, and the billing controller's state for it.

    No row (the default) is the policy ``off`` without a limit: the workspace is never refused nor stopped for
    money (core.billing_policy). ``phase``/``arrears_since``/``cause`` are written by the controller only, one
    transition at a time, so its events are written once per transition.
    """

    __tablename__ = "billing_policies"

    workspace_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True, autoincrement=False
    )
    arrears: Mapped[str] = mapped_column(String(8), default="off")  # off | warn | stop
    grace_minutes: Mapped[int] = mapped_column(Integer, default=0)
    monthly_limit_cents: Mapped[int | None] = mapped_column(BigInteger, default=None)  # None: no limit
    phase: Mapped[str] = mapped_column(String(16), default="ok")  # ok | warned | stopped
    arrears_since: Mapped[datetime | None] = mapped_column(default=None)
    cause: Mapped[str | None] = mapped_column(String(16), default=None)  # balance | limit
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str] = mapped_column(String(64), default="")


class BillingRollup(Base):
    """The charges of one UTC day per (workspace, user, kind, spec, accelerator type): the reports' source.

    Written by the meter in the transaction of the charges it sums, only for entries actually inserted, so a
    rollup is exactly the sum of its day's charge entries (a charge belongs to the UTC day its period ends).
    ``user_id`` 0 is a copy without a user; ``spec_name`` and ``gpu_type`` "" are none: key columns are never
    NULL, so the upsert's conflict target always matches.
    """

    __tablename__ = "billing_rollups"

    day: Mapped[date] = mapped_column(Date, primary_key=True)
    workspace_id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=False)
    user_id: Mapped[int] = mapped_column(BigIntId, primary_key=True, autoincrement=False)
    kind: Mapped[str] = mapped_column(String(16), primary_key=True)
    spec_name: Mapped[str] = mapped_column(String(64), primary_key=True)
    gpu_type: Mapped[str] = mapped_column(String(64), primary_key=True)
    microhours: Mapped[int] = mapped_column(BigInteger, default=0)
    cents: Mapped[int] = mapped_column(BigInteger, default=0)
    entries: Mapped[int] = mapped_column(BigInteger, default=0)

    __table_args__ = (Index("ix_billing_rollups_workspace_id_day", "workspace_id", "day"),)
