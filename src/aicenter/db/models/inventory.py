"""Nodes, accelerator types, resource specs, pools and which workspaces may use which pool."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Any

from sqlalchemy import BigInteger, ForeignKey, Numeric, String
from sqlalchemy.orm import Mapped, mapped_column

from aicenter.db.base import Base, BigIntId, IdMixin, TimestampMixin


class AcceleratorType(IdMixin, TimestampMixin, Base):
    __tablename__ = "accelerator_types"

    name: Mapped[str] = mapped_column(String(64), unique=True)  # e.g. nvidia-a100, ascend-910b
    vendor: Mapped[str] = mapped_column(String(64))  # nvidia, huawei, cambricon, ...
    memory_bytes: Mapped[int] = mapped_column(BigInteger, default=0)
    description: Mapped[str] = mapped_column(String(512), default="")


class Node(IdMixin, TimestampMixin, Base):
    """A host. ``accelerators`` is a list of ``{index, type, memory_bytes, nvlink_domain}``."""

    __tablename__ = "nodes"

    name: Mapped[str] = mapped_column(String(128), unique=True)
    address: Mapped[str] = mapped_column(String(256), default="")
    executor: Mapped[str] = mapped_column(String(16), default="local")
    cpu_milli: Mapped[int] = mapped_column(BigInteger)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    accelerators: Mapped[list[Any]] = mapped_column(default=list)
    labels: Mapped[dict[str, Any]] = mapped_column(default=dict)
    rack: Mapped[str | None] = mapped_column(String(64), default=None)
    leaf: Mapped[str | None] = mapped_column(String(64), default=None)
    spine: Mapped[str | None] = mapped_column(String(64), default=None)
    nvlink_domain: Mapped[str | None] = mapped_column(String(64), default=None)
    schedule: Mapped[str] = mapped_column(String(16), default="schedulable")
    state: Mapped[str] = mapped_column(String(16), default="ready")
    last_heartbeat_at: Mapped[datetime | None] = mapped_column(default=None)


class Pool(IdMixin, TimestampMixin, Base):
    """A set of nodes chosen by a label selector (``{}`` selects every node), with its own queue and policy."""

    __tablename__ = "pools"

    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(String(512), default="")
    selector: Mapped[dict[str, Any]] = mapped_column(default=dict)
    is_default: Mapped[bool] = mapped_column(default=False)
    policy: Mapped[dict[str, Any]] = mapped_column(default=dict)


class PoolGrant(Base):
    """Workspace ``workspace_id`` may run work in pool ``pool_id``."""

    __tablename__ = "pool_grants"

    pool_id: Mapped[int] = mapped_column(BigIntId, ForeignKey("pools.id", ondelete="CASCADE"), primary_key=True)
    workspace_id: Mapped[int] = mapped_column(
        BigIntId, ForeignKey("workspaces.id", ondelete="CASCADE"), primary_key=True, index=True
    )


class ResourceSpec(IdMixin, TimestampMixin, Base):
    """A named, priced bundle of resources, e.g. ``gpu-a100-1``: 1 A100 + 8 CPU + 64 GiB."""

    __tablename__ = "resource_specs"

    name: Mapped[str] = mapped_column(String(64), unique=True)
    description: Mapped[str] = mapped_column(String(512), default="")
    cpu_milli: Mapped[int] = mapped_column(BigInteger)
    memory_bytes: Mapped[int] = mapped_column(BigInteger)
    accelerators: Mapped[int] = mapped_column(default=0)  # whole devices
    accelerator_share: Mapped[int] = mapped_column(default=0)  # milli of one device, for a fractional spec
    accelerator_type: Mapped[str | None] = mapped_column(String(64), default=None)
    price_per_hour: Mapped[Decimal] = mapped_column(Numeric(20, 4), default=Decimal(0))  # coins/machine-hour
    billing_weight: Mapped[float] = mapped_column(default=1.0)
    pool_id: Mapped[int | None] = mapped_column(  # None: usable in every pool
        BigIntId, ForeignKey("pools.id", ondelete="RESTRICT"), default=None
    )
    enabled: Mapped[bool] = mapped_column(default=True)
