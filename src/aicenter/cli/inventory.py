"""``aicenter node|accelerator-type|spec|pool ...`` (changes: platform admins)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from aicenter.cli import output as out
from aicenter.cli.common import (
    Output,
    OutputOpt,
    YesOpt,
    accelerator_type_id,
    client,
    confirm,
    invalid,
    node_id,
    pairs,
    pool_id,
    quantity,
    spec_id,
    workspace_id,
)

if TYPE_CHECKING:
    from aicenter.client import Client

node_app = typer.Typer(help="Hosts with CPUs, memory and accelerators (platform admins).", no_args_is_help=True)
accel_app = typer.Typer(help="Accelerator types such as nvidia-a100 or ascend-910b.", no_args_is_help=True)
spec_app = typer.Typer(help="Resource specs: named, priced bundles of resources.", no_args_is_help=True)
pool_app = typer.Typer(help="Pools of nodes and which workspaces may use them.", no_args_is_help=True)

_ACCEL = re.compile(r"^(?P<type>[a-z0-9][a-z0-9._-]*?)(?:[x*:](?P<count>\d+))?$")


def _accelerators(values: list[str]) -> list[dict[str, Any]]:
    """``--accelerator nvidia-a100x8`` (or ``nvidia-a100:8``, repeated per device) -> one entry per device."""
    devices: list[dict[str, Any]] = []
    for value in values:
        match = _ACCEL.match(value.strip())
        if not match:
            raise invalid("--accelerator", f"expected TYPE or TYPExCOUNT such as nvidia-a100x8, got {value!r}")
        for _ in range(int(match.group("count") or 1)):
            devices.append({"index": len(devices), "type": match.group("type")})
    return devices


_NODE_COLUMNS: list[out.Column] = [
    ("ID", lambda n: n.id),
    ("NAME", lambda n: n.name),
    ("STATE", lambda n: n.state),
    ("SCHEDULE", lambda n: n.schedule),
    ("CPU", lambda n: out.cores(n.cpu_milli)),
    ("MEMORY", lambda n: out.size(n.memory_bytes)),
    ("ACCELERATORS", lambda n: _accel_summary(n.accelerators)),
    ("LABELS", lambda n: out.labels(n.labels)),
    ("POOLS", lambda n: ",".join(n.pools)),
    ("HEARTBEAT", lambda n: n.last_heartbeat_at),
]
_NODE_DETAIL: list[out.Column] = [
    *_NODE_COLUMNS[:7],
    ("address", lambda n: n.address),
    ("executor", lambda n: n.executor),
    ("labels", lambda n: out.labels(n.labels)),
    ("rack / leaf / spine", lambda n: f"{n.rack or '-'} / {n.leaf or '-'} / {n.spine or '-'}"),
    ("nvlink domain", lambda n: n.nvlink_domain),
    ("pools", lambda n: ",".join(n.pools)),
    ("last heartbeat", lambda n: n.last_heartbeat_at),
]
_ACCEL_COLUMNS: list[out.Column] = [
    ("ID", lambda a: a.id),
    ("NAME", lambda a: a.name),
    ("VENDOR", lambda a: a.vendor),
    ("MEMORY", lambda a: out.size(a.memory_bytes)),
    ("DESCRIPTION", lambda a: a.description),
]
_SPEC_COLUMNS: list[out.Column] = [
    ("ID", lambda s: s.id),
    ("NAME", lambda s: s.name),
    ("CPU", lambda s: out.cores(s.cpu_milli)),
    ("MEMORY", lambda s: out.size(s.memory_bytes)),
    ("ACCELERATORS", lambda s: _spec_accel(s)),
    ("PRICE/H", lambda s: s.price_per_hour),
    ("WEIGHT", lambda s: s.billing_weight),
    ("POOL", lambda s: "any" if s.pool_id is None else s.pool_id),
    ("ENABLED", lambda s: s.enabled),
]
_POOL_COLUMNS: list[out.Column] = [
    ("ID", lambda p: p.id),
    ("NAME", lambda p: p.name),
    ("DEFAULT", lambda p: p.is_default),
    ("SELECTOR", lambda p: out.labels(p.selector) or "(all nodes)"),
    ("NODES", lambda p: p.node_count),
    ("DESCRIPTION", lambda p: p.description),
]


def _spec_columns(api: Client) -> list[out.Column]:
    """The spec columns with the pool's name instead of its id (a table is for people)."""
    names = {p.id: p.name for p in api.list_pools()}
    pool: out.Column = ("POOL", lambda s: "any" if s.pool_id is None else names.get(s.pool_id, s.pool_id))
    return [pool if header == "POOL" else (header, get) for header, get in _SPEC_COLUMNS]


def _accel_summary(devices: list[Any]) -> str:
    counts: dict[str, int] = {}
    for d in devices:
        counts[d.type] = counts.get(d.type, 0) + 1
    return ",".join(f"{t}x{n}" for t, n in counts.items())


def _spec_accel(spec: Any) -> str:
    if spec.accelerator_share:
        return f"{spec.accelerator_share / 1000:g} {spec.accelerator_type or 'any'}"
    if spec.accelerators:
        return f"{spec.accelerators} {spec.accelerator_type or 'any'}"
    return "-"


# -- nodes -----------------------------------------------------------------------------------------------------


@node_app.command("list")
def node_list(
    state: Annotated[str | None, typer.Option(help="ready or not_ready.")] = None,
    schedule: Annotated[str | None, typer.Option(help="schedulable, cordoned or draining.")] = None,
    label: Annotated[
        list[str] | None, typer.Option(help="Only nodes with this label, KEY=VALUE; repeat: all must match.")
    ] = None,
    pool: Annotated[str | None, typer.Option(help="Only nodes of this pool.")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Every node."""
    with client() as api:
        labels = pairs(label or [], "--label") or None
        nodes = api.list_nodes(state=state, schedule=schedule, label=labels, pool=pool)
        out.show(list(nodes), output, _NODE_COLUMNS)


@node_app.command("get")
def node_get(node: Annotated[str, typer.Argument(help="Node name or id.")], output: OutputOpt = Output.table) -> None:
    """One node, with its accelerators, topology and pools."""
    with client() as api:
        out.show(api.get_node(node_id(api, node)), output, _NODE_DETAIL)


@node_app.command("create")
def node_create(
    name: Annotated[str, typer.Argument(help="The node's name (usually its host name).")],
    cpu: Annotated[str, typer.Option(help="Cores, e.g. 64 or 500m.")],
    memory: Annotated[str, typer.Option(help="e.g. 512Gi.")],
    accelerator: Annotated[
        list[str] | None, typer.Option("--accelerator", help="TYPE or TYPExCOUNT, e.g. nvidia-a100x8; repeatable.")
    ] = None,
    address: Annotated[str | None, typer.Option(help="Host name or IP.")] = None,
    label: Annotated[list[str] | None, typer.Option("--label", help="KEY=VALUE; repeatable.")] = None,
    rack: Annotated[str | None, typer.Option()] = None,
    leaf: Annotated[str | None, typer.Option()] = None,
    spine: Annotated[str | None, typer.Option()] = None,
    nvlink_domain: Annotated[str | None, typer.Option("--nvlink-domain")] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Register a node by hand (executors register their own nodes)."""
    from aicenter.client import UNSET

    devices = _accelerators(accelerator or [])
    labels = pairs(label or [], "--label")
    with client() as api:
        node = api.create_node(
            name,
            cpu=quantity(cpu),
            memory=quantity(memory),
            accelerators=devices,
            address=address if address is not None else UNSET,
            labels=labels or UNSET,
            rack=rack or UNSET,
            leaf=leaf or UNSET,
            spine=spine or UNSET,
            nvlink_domain=nvlink_domain or UNSET,
        )
    out.show(node, output, _NODE_DETAIL)


@node_app.command("label")
def node_label(
    node: Annotated[str, typer.Argument(help="Node name or id.")],
    changes: Annotated[list[str], typer.Argument(help="KEY=VALUE to set, KEY- to remove.")],
    output: OutputOpt = Output.table,
) -> None:
    """Set or remove labels: `aicenter node label gpu-01 zone=a gpu=a100 old-`."""
    set_: dict[str, str] = {}
    remove: list[str] = []
    for change in changes:
        if change.endswith("-") and "=" not in change:
            remove.append(change[:-1])
        else:
            set_.update(pairs([change], "LABELS"))
    with client() as api:
        nid = node_id(api, node)
        labels = {k: v for k, v in api.get_node(nid).labels.items() if k not in remove}
        labels.update(set_)
        out.show(api.update_node(nid, labels=labels), output, _NODE_DETAIL)


def _node_action(action: str, node: str, output: Output) -> None:
    with client() as api:
        nid = node_id(api, node)
        result = {"cordon": api.cordon_node, "drain": api.drain_node, "uncordon": api.uncordon_node}[action](nid)
    out.show(result, output, _NODE_DETAIL)


@node_app.command("cordon")
def node_cordon(
    node: Annotated[str, typer.Argument(help="Node name or id.")], output: OutputOpt = Output.table
) -> None:
    """Place no new work on the node; running work stays."""
    _node_action("cordon", node, output)


@node_app.command("drain")
def node_drain(node: Annotated[str, typer.Argument(help="Node name or id.")], output: OutputOpt = Output.table) -> None:
    """Cordon the node and move its work elsewhere."""
    _node_action("drain", node, output)


@node_app.command("uncordon")
def node_uncordon(
    node: Annotated[str, typer.Argument(help="Node name or id.")], output: OutputOpt = Output.table
) -> None:
    """Make the node schedulable again."""
    _node_action("uncordon", node, output)


@node_app.command("delete")
def node_delete(
    node: Annotated[str, typer.Argument(help="Node name or id.")], yes: YesOpt = False, output: OutputOpt = Output.table
) -> None:
    """Remove a node from the inventory."""
    confirm(f"Delete node {node!r}?", yes)
    with client() as api:
        api.delete_node(node_id(api, node))
    out.done(f"Deleted node {node!r}.", output)


# -- accelerator types -----------------------------------------------------------------------------------------


@accel_app.command("list")
def accel_list(output: OutputOpt = Output.table) -> None:
    """Every accelerator type."""
    with client() as api:
        out.show(list(api.list_accelerator_types()), output, _ACCEL_COLUMNS)


@accel_app.command("create")
def accel_create(
    name: Annotated[str, typer.Argument(help="e.g. nvidia-a100, ascend-910b, cambricon-mlu370.")],
    vendor: Annotated[str, typer.Option(help="e.g. nvidia, huawei, cambricon.")],
    memory: Annotated[str | None, typer.Option(help="Device memory, e.g. 80Gi.")] = None,
    description: Annotated[str | None, typer.Option()] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Declare an accelerator type."""
    from aicenter.client import UNSET

    with client() as api:
        created = api.create_accelerator_type(
            name,
            vendor=vendor,
            memory=quantity(memory) if memory else UNSET,
            description=description if description is not None else UNSET,
        )
    out.show(created, output)


@accel_app.command("delete")
def accel_delete(
    accelerator_type: Annotated[str, typer.Argument(help="Name or id.")], output: OutputOpt = Output.table
) -> None:
    """Delete an accelerator type no node or spec uses."""
    with client() as api:
        api.delete_accelerator_type(accelerator_type_id(api, accelerator_type))
    out.done(f"Deleted accelerator type {accelerator_type!r}.", output)


# -- specs -----------------------------------------------------------------------------------------------------


@spec_app.command("list")
def spec_list(
    workspace: Annotated[
        str | None, typer.Option("--workspace", "-w", help="Only specs this workspace may use (name or id).")
    ] = None,
    output: OutputOpt = Output.table,
) -> None:
    """The specs you may use (every spec for platform admins)."""
    with client() as api:
        ws = workspace_id(api, workspace) if workspace else None
        specs = list(api.list_specs(workspace_id=ws))
        out.show(specs, output, _spec_columns(api) if output is Output.table and specs else None)


@spec_app.command("get")
def spec_get(spec: Annotated[str, typer.Argument(help="Spec name or id.")], output: OutputOpt = Output.table) -> None:
    """One spec."""
    with client() as api:
        found = api.get_spec(spec_id(api, spec))
        detail = [*_spec_columns(api), ("DESCRIPTION", lambda s: s.description)]
        out.show(found, output, detail if output is Output.table else None)


@spec_app.command("create")
def spec_create(
    name: Annotated[str, typer.Argument(help="e.g. gpu-a100-1.")],
    cpu: Annotated[str, typer.Option(help="Cores, e.g. 8 or 500m.")],
    memory: Annotated[str, typer.Option(help="e.g. 64Gi.")],
    price: Annotated[str, typer.Option("--price", help="Coins per machine-hour, e.g. 12.5.")],
    accelerators: Annotated[int | None, typer.Option(min=0, help="Whole devices.")] = None,
    accelerator_share: Annotated[
        int | None, typer.Option("--accelerator-share", min=1, max=999, help="Milli of one device (fractional).")
    ] = None,
    accelerator_type: Annotated[str | None, typer.Option("--accelerator-type", help="e.g. nvidia-a100.")] = None,
    billing_weight: Annotated[float | None, typer.Option("--billing-weight", min=0.0)] = None,
    pool: Annotated[str | None, typer.Option(help="Only usable in this pool (name or id). Default: any.")] = None,
    description: Annotated[str | None, typer.Option()] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a resource spec."""
    from decimal import Decimal, InvalidOperation

    from aicenter.client import UNSET

    try:
        if Decimal(price) < 0:
            raise InvalidOperation
    except InvalidOperation:
        raise invalid("--price", f"expected a non-negative decimal number, got {price!r}") from None
    with client() as api:
        created = api.create_spec(
            name,
            cpu=quantity(cpu),
            memory=quantity(memory),
            price_per_hour=price,
            accelerators=accelerators if accelerators is not None else UNSET,
            accelerator_share=accelerator_share if accelerator_share is not None else UNSET,
            accelerator_type=accelerator_type or UNSET,
            billing_weight=billing_weight if billing_weight is not None else UNSET,
            pool_id=pool_id(api, pool) if pool else UNSET,
            description=description if description is not None else UNSET,
        )
    out.show(created, output)


@spec_app.command("delete")
def spec_delete(
    spec: Annotated[str, typer.Argument(help="Spec name or id.")], yes: YesOpt = False, output: OutputOpt = Output.table
) -> None:
    """Delete a spec."""
    confirm(f"Delete spec {spec!r}?", yes)
    with client() as api:
        api.delete_spec(spec_id(api, spec))
    out.done(f"Deleted spec {spec!r}.", output)


# -- pools -----------------------------------------------------------------------------------------------------


@pool_app.command("list")
def pool_list(output: OutputOpt = Output.table) -> None:
    """The pools you may use (every pool for platform admins)."""
    with client() as api:
        out.show(list(api.list_pools()), output, _POOL_COLUMNS)


@pool_app.command("get")
def pool_get(pool: Annotated[str, typer.Argument(help="Pool name or id.")], output: OutputOpt = Output.table) -> None:
    """One pool."""
    with client() as api:
        out.show(api.get_pool(pool_id(api, pool)), output)


@pool_app.command("create")
def pool_create(
    name: Annotated[str, typer.Argument(help="The pool's name.")],
    selector: Annotated[
        list[str] | None, typer.Option("--selector", help="KEY=VALUE a node's labels must have; repeatable.")
    ] = None,
    description: Annotated[str | None, typer.Option()] = None,
    output: OutputOpt = Output.table,
) -> None:
    """Create a pool of the nodes matching the selector (no selector: every node)."""
    from aicenter.client import UNSET

    labels = pairs(selector or [], "--selector")
    with client() as api:
        created = api.create_pool(name, selector=labels, description=description if description is not None else UNSET)
    out.show(created, output)


@pool_app.command("delete")
def pool_delete(
    pool: Annotated[str, typer.Argument(help="Pool name or id.")], yes: YesOpt = False, output: OutputOpt = Output.table
) -> None:
    """Delete a pool that has no quotas or specs."""
    confirm(f"Delete pool {pool!r}?", yes)
    with client() as api:
        api.delete_pool(pool_id(api, pool))
    out.done(f"Deleted pool {pool!r}.", output)


@pool_app.command("workspaces")
def pool_workspaces(
    pool: Annotated[str, typer.Argument(help="Pool name or id.")], output: OutputOpt = Output.table
) -> None:
    """The workspaces that may use a pool."""
    with client() as api:
        out.show(
            api.list_pool_workspaces(pool_id(api, pool)), output, [("ID", lambda w: w.id), ("NAME", lambda w: w.name)]
        )


@pool_app.command("grant")
def pool_grant(
    pool: Annotated[str, typer.Argument(help="Pool name or id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    output: OutputOpt = Output.table,
) -> None:
    """Let a workspace use a pool."""
    with client() as api:
        api.grant_pool(pool_id(api, pool), workspace_id(api, workspace))
    out.done(f"Workspace {workspace!r} may now use pool {pool!r}.", output)


@pool_app.command("revoke")
def pool_revoke(
    pool: Annotated[str, typer.Argument(help="Pool name or id.")],
    workspace: Annotated[str, typer.Argument(help="Workspace name or id.")],
    output: OutputOpt = Output.table,
) -> None:
    """Stop a workspace from using a pool."""
    with client() as api:
        api.revoke_pool(pool_id(api, pool), workspace_id(api, workspace))
    out.done(f"Workspace {workspace!r} may no longer use pool {pool!r}.", output)
