"""Nodes, accelerator types, resource specs and pools."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal
from typing import Annotated, Any, ClassVar

from pydantic import Field, PlainSerializer, PlainValidator, WithJsonSchema

from aicenter.api.params import Id
from aicenter.api.schemas.common import Input, Schema
from aicenter.core.errors import ValidationFailed
from aicenter.services.inventory import NodeView, PoolView


def _quantity(value: Any) -> str | int | float:
    # A plain validator rather than a union of strict types: a union reports errors at "cpu.str", not "cpu".
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError('must be a quantity: a string such as "16Gi" or "500m", or a number')
    return value


Quantity = Annotated[
    str | int | float,
    PlainValidator(_quantity),
    WithJsonSchema({"anyOf": [{"type": "string"}, {"type": "number"}]}),
    Field(description='A quantity: CPUs as "500m", 2 or "2"; memory as "16Gi", "512M" or bytes.'),
]
Labels = Annotated[
    dict[str, str],
    Field(description='Labels such as {"aicenter.io/hostname": "gpu-01", "zone": "a"}; keys may have a DNS prefix.'),
]
Topology = Annotated[str | None, Field(default=None, max_length=64, description="A rack/leaf/spine/domain name.")]


class _Patch(Input):
    """A partial update: only the fields sent change. ``nullable`` fields may be sent as null to clear them."""

    nullable: ClassVar[frozenset[str]] = frozenset()

    def changes(self) -> dict[str, Any]:
        """The fields that were sent; a null where null means nothing is a ValidationFailed naming the field."""
        sent = self.model_dump(exclude_unset=True)
        for name, value in sent.items():
            if value is None and name not in self.nullable:
                raise ValidationFailed("must not be null (leave it out to keep it)", field=name)
        return sent


def _money(value: Decimal) -> str:
    return str(value.quantize(Decimal("0.0001")))


Money = Annotated[Decimal, PlainSerializer(_money, return_type=str)]


# --- accelerator types -------------------------------------------------------------------------------------


class AcceleratorTypeCreate(Input):
    name: str = Field(max_length=64, description="e.g. nvidia-a100, ascend-910b, cambricon-mlu370.")
    vendor: str = Field(max_length=64, description="e.g. nvidia, huawei, cambricon.")
    memory: Quantity | None = Field(default=None, description="Device memory, e.g. 80Gi.")
    description: str = Field(default="", max_length=512)


class AcceleratorTypeUpdate(_Patch):
    nullable = frozenset({"memory"})

    name: str | None = Field(default=None, max_length=64)
    vendor: str | None = Field(default=None, max_length=64)
    memory: Quantity | None = None
    description: str | None = Field(default=None, max_length=512)


class AcceleratorTypeOut(Schema):
    id: int
    name: str
    vendor: str
    memory_bytes: int
    description: str
    created_at: datetime


# --- nodes -------------------------------------------------------------------------------------------------


class AcceleratorIn(Input):
    index: int = Field(ge=0, le=4095, description="The device index the driver uses.")
    type: str = Field(max_length=64, description="An existing accelerator type.")
    memory: Quantity | None = Field(default=None, description="Device memory; default: the type's memory.")
    nvlink_domain: Topology = None


class AcceleratorOut(Schema):
    index: int
    type: str
    model: str | None = Field(default=None, description="The product name the driver reports.")
    memory_bytes: int
    nvlink_domain: str | None = None


class NodeCreate(Input):
    name: str = Field(max_length=64)
    address: str = Field(default="", max_length=256)
    cpu: Quantity
    memory: Quantity
    accelerators: list[AcceleratorIn] = Field(default_factory=list)
    labels: Labels = Field(default_factory=dict)
    rack: Topology = None
    leaf: Topology = None
    spine: Topology = None
    nvlink_domain: Topology = None


class NodeUpdate(_Patch):
    """Only the fields sent change; ``labels`` replaces all labels; null clears a topology field."""

    nullable = frozenset({"rack", "leaf", "spine", "nvlink_domain"})

    labels: Labels | None = None
    address: str | None = Field(default=None, max_length=256)
    rack: Topology = None
    leaf: Topology = None
    spine: Topology = None
    nvlink_domain: Topology = None


class NodeOut(Schema):
    id: int
    name: str
    address: str
    executor: str
    cpu_milli: int
    memory_bytes: int
    accelerators: list[AcceleratorOut]
    labels: dict[str, str]
    rack: str | None
    leaf: str | None
    spine: str | None
    nvlink_domain: str | None
    schedule: str = Field(description="schedulable, cordoned or draining.")
    state: str = Field(description="ready, not_ready or down (from heartbeats).")
    last_heartbeat_at: datetime | None
    pools: list[str] = Field(
        description="Every pool the node is in: those whose selector matches its labels (pools overlap)."
    )
    created_at: datetime
    updated_at: datetime

    @classmethod
    def of(cls, view: NodeView) -> NodeOut:
        node = view.node
        data: dict[str, Any] = {name: getattr(node, name) for name in cls.model_fields if name != "pools"}
        return cls.model_validate({**data, "pools": view.pools})


# --- specs -------------------------------------------------------------------------------------------------


class SpecCreate(Input):
    name: str = Field(max_length=64, description="e.g. gpu-a100-1.")
    description: str = Field(default="", max_length=512)
    cpu: Quantity
    memory: Quantity
    accelerators: int = Field(default=0, description="Whole devices.")
    accelerator_share: int = Field(default=0, description="Thousandths of one device (1..999), with accelerators=0.")
    accelerator_type: str | None = Field(default=None, max_length=64, description="None: any accelerator type.")
    price_per_hour: Decimal = Field(description="Coins per machine-hour, 0 or more, at most 2 decimal places.")
    billing_weight: float = Field(default=1.0, description="Multiplies machine time; more than 0.")
    pool_id: Id | None = Field(default=None, description="The only pool the spec is usable in; None: every pool.")
    enabled: bool = True


class SpecUpdate(_Patch):
    nullable = frozenset({"accelerator_type", "pool_id"})

    name: str | None = Field(default=None, max_length=64)
    description: str | None = Field(default=None, max_length=512)
    cpu: Quantity | None = None
    memory: Quantity | None = None
    accelerators: int | None = None
    accelerator_share: int | None = None
    accelerator_type: str | None = Field(default=None, max_length=64)
    price_per_hour: Decimal | None = None
    billing_weight: float | None = None
    pool_id: Id | None = None
    enabled: bool | None = None


class SpecOut(Schema):
    id: int
    name: str
    description: str
    cpu_milli: int
    memory_bytes: int
    accelerators: int
    accelerator_share: int
    accelerator_type: str | None
    price_per_hour: Money = Field(description="Coins per machine-hour, as a decimal string.")
    billing_weight: float
    pool_id: int | None
    enabled: bool
    created_at: datetime
    updated_at: datetime


# --- pools -------------------------------------------------------------------------------------------------


class PoolCreate(Input):
    name: str = Field(max_length=64)
    description: str = Field(default="", max_length=512)
    selector: Labels = Field(default_factory=dict, description="Labels a node must carry; {} selects every node.")


class PoolUpdate(_Patch):
    name: str | None = Field(default=None, max_length=64)
    description: str | None = Field(default=None, max_length=512)
    selector: Labels | None = None


class PoolOut(Schema):
    id: int
    name: str
    description: str
    selector: dict[str, str]
    is_default: bool
    node_count: int = Field(
        description="Nodes whose labels match the selector; pools overlap, so a node counts in every pool it is in."
    )
    workspaces: list[int] | None = Field(description="Ids of the workspaces that may use the pool (admins only).")
    created_at: datetime

    @classmethod
    def of(cls, view: PoolView) -> PoolOut:
        pool = view.pool
        return cls(
            id=pool.id,
            name=pool.name,
            description=pool.description,
            selector=dict(pool.selector or {}),
            is_default=pool.is_default,
            node_count=view.node_count,
            workspaces=view.workspace_ids,
            created_at=pool.created_at,
        )


class PoolWorkspaceOut(Schema):
    """A workspace allowed in a pool."""

    id: int
    name: str
    description: str
    created_at: datetime
