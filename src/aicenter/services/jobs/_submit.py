"""Submitting a job: parse, resolve every reference, reject what could never run, and create the rows.

Everything is checked before anything is written, and everything is written in the caller's one transaction:
a refused job leaves no row behind. What could never run is refused here rather than left queued forever: a
pool the workspace is not granted, a pool with no node, a replica larger than every node of the pool (pools
overlap: a node is in every pool whose selector matches it), a job larger than the workspace's quota maximum
there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core import jobs as core
from aicenter.core.catalog import ItemKind, VersionState
from aicenter.core.errors import Conflict, Forbidden, NotFound, QuotaExceeded, ValidationFailed
from aicenter.core.jobs import JobKind, JobSpec, JobStatus, ReplicaStatus, ResourceRequest
from aicenter.core.pools import DEFAULT_POOL
from aicenter.core.quantity import format_cpu, format_memory
from aicenter.db.models import (
    AcceleratorType,
    Job,
    Membership,
    Node,
    Pool,
    PoolGrant,
    Quota,
    Replica,
    ResourceSpec,
    User,
    Workspace,
)
from aicenter.events import notify_after_commit
from aicenter.services import audit, billing, catalog, inventory
from aicenter.services.context import Actor
from aicenter.services.jobs._lifecycle import record_created, transition
from aicenter.services.jobs._queries import load_job
from aicenter.services.jobs._views import JobView, job_views

MIB = 2**20


@dataclass(frozen=True)
class Amounts:
    """One replica's resources after a spec name is replaced by the spec's amounts."""

    cpu_milli: int
    memory_bytes: int
    gpu: int
    gpu_type: str | None
    gpu_share: float | None
    spec: ResourceSpec | None

    @property
    def devices(self) -> int:
        """Devices held against a quota. A share holds one device: conservative, since the quota counts whole
        devices and nothing guarantees which shares end up together on one device."""
        return 1 if self.gpu_share else self.gpu


def load_spec(spec_source: str | Mapping[str, Any], overrides: Sequence[str] = ()) -> JobSpec:
    """Parse a spec (YAML/JSON text or a mapping) after applying ``--set`` overrides, so that type errors name
    the real field."""
    if overrides:
        data = core.load_document(spec_source) if isinstance(spec_source, str) else spec_source
        if not isinstance(data, Mapping):
            raise ValidationFailed("a job spec is a mapping of fields (kind, name, tasks, ...)", field="spec")
        return core.parse_job_spec(core.apply_overrides(data, overrides))
    return core.parse_job_spec(spec_source)


async def resolve_workspace(
    session: AsyncSession, actor: Actor, spec_workspace: str | None, workspace_id: int | None
) -> Workspace:
    """The workspace a job (or template) goes to: ``workspace_id``, else the spec's ``workspace`` name, else the
    actor's default workspace. The actor must be a member, platform admins included: a job runs as its user,
    inside one of their workspaces."""
    workspace: Workspace | None = None
    if workspace_id is not None:
        workspace = await session.get(Workspace, workspace_id)
        if workspace is not None and spec_workspace is not None and spec_workspace != workspace.name:
            raise ValidationFailed(
                f'names workspace "{spec_workspace}" but the request says workspace {workspace.name}',
                field="workspace",
            )
        field = "workspace_id"
        missing = f"workspace {workspace_id} not found"
    elif spec_workspace is not None:
        workspace = await session.scalar(select(Workspace).where(Workspace.name == spec_workspace))
        field, missing = "workspace", f'workspace "{spec_workspace}" not found'
    else:
        default_id = await session.scalar(select(User.default_workspace_id).where(User.id == actor.user_id))
        if default_id is None:
            raise ValidationFailed("you have no default workspace: name one in the spec", field="workspace")
        workspace = await session.get(Workspace, default_id)
        field, missing = "workspace", "your default workspace no longer exists: name one in the spec"
    member = workspace is not None and await session.scalar(
        select(Membership.role).where(Membership.workspace_id == workspace.id, Membership.user_id == actor.user_id)
    )
    if workspace is None or not member:
        # Not a member reads as missing: no existence leak of other tenants' workspaces.
        raise NotFound(missing, details={"field": field})
    return workspace


async def _resolve_ref(
    session: AsyncSession, actor: Actor, kind: ItemKind, ref: str, field: str, workspace_id: int
) -> int:
    """The id of the ready version ``ref`` names, as the submitter sees it; errors name ``field``."""
    try:
        version = await catalog.resolve_version(session, actor, kind, ref, workspace_id=workspace_id)
    except NotFound:
        raise NotFound(f"{field}: {kind.value} {ref} not found", details={"field": field}) from None
    except ValidationFailed as exc:
        raise ValidationFailed(exc.message.removeprefix("ref: "), field=field) from None
    except Conflict as exc:
        raise Conflict(f"{field}: {exc.message}", details={**exc.details, "field": field}) from None
    if not version.can_read_content:
        # A platform admin sees every version's metadata, but a job reads the content.
        raise Forbidden(
            f"{field}: {kind.value} {ref} is not shared with you; platform admins see the metadata of user "
            f"items, not their content",
            details={"field": field},
        )
    if version.state != VersionState.READY.value:
        raise Conflict(f"{field}: {kind.value} {version.ref} is {version.state}, not ready", details={"field": field})
    return version.id


async def _usable_spec(
    session: AsyncSession, workspace: Workspace, name: str, field: str, granted: set[int]
) -> ResourceSpec:
    spec = await session.scalar(select(ResourceSpec).where(ResourceSpec.name == name))
    if spec is None or not spec.enabled:
        raise ValidationFailed(f'spec "{name}" not found', field=field)
    if spec.pool_id is not None and spec.pool_id not in granted:
        raise ValidationFailed(f'spec "{name}" is in a pool that workspace {workspace.name} may not use', field=field)
    return spec


def _amounts(request: ResourceRequest, spec: ResourceSpec | None) -> Amounts:
    if spec is None:
        assert request.cpu_milli is not None
        assert request.memory_bytes is not None
        return Amounts(request.cpu_milli, request.memory_bytes, request.gpu, request.gpu_type, request.gpu_share, None)
    if spec.accelerator_share:
        return Amounts(spec.cpu_milli, spec.memory_bytes, 1, spec.accelerator_type, spec.accelerator_share / 1000, spec)
    return Amounts(spec.cpu_milli, spec.memory_bytes, spec.accelerators, spec.accelerator_type, None, spec)


async def _granted_names(session: AsyncSession, granted: set[int]) -> str:
    names = sorted((await session.scalars(select(Pool.name).where(Pool.id.in_(granted)))).all()) if granted else []
    return ", ".join(names) if names else "none; ask a platform admin to grant one"


async def _choose_pool(
    session: AsyncSession,
    workspace: Workspace,
    named: str | None,
    specs: list[tuple[str, ResourceSpec | None]],
    granted: set[int],
) -> Pool:
    """The pool of the job: ``pool:`` of the spec, else the pool of its resource specs (they must agree), else the
    default pool. The workspace must be granted it; a resource spec bound to a pool must be of the job's pool."""
    bound: tuple[str, ResourceSpec] | None = None
    for field, spec in specs:
        if spec is None or spec.pool_id is None:
            continue
        if bound is not None and bound[1].pool_id != spec.pool_id:
            raise ValidationFailed(
                f'spec "{spec.name}" is in another pool than the spec of {bound[0]}; a job runs in one pool',
                field=field,
            )
        bound = bound or (field, spec)
    pool: Pool | None
    if named is not None:
        pool = await session.scalar(select(Pool).where(Pool.name == named))
        field = "pool"
    elif bound is not None:
        pool = await session.get(Pool, bound[1].pool_id)
        assert pool is not None  # resource_specs.pool_id is a RESTRICT foreign key
        field = bound[0]
    else:
        pool = await session.scalar(select(Pool).where(Pool.is_default.is_(True)))
        field = "pool"
    if pool is None or pool.id not in granted:
        # A pool that does not exist and one not granted read alike: pools of others are not listed to members.
        shown = named if named is not None else (pool.name if pool is not None else DEFAULT_POOL)
        raise ValidationFailed(
            f'workspace {workspace.name} may not use pool "{shown}"; pools it may use: '
            f"{await _granted_names(session, granted)}",
            field=field,
            details={"pool": shown},
        )
    if bound is not None and bound[1].pool_id != pool.id:
        other = await session.get(Pool, bound[1].pool_id)
        raise ValidationFailed(
            f'spec "{bound[1].name}" is only usable in pool {other.name if other else bound[1].pool_id}, but the job '
            f"runs in pool {pool.name}",
            field=bound[0],
        )
    return pool


def _devices_of(node: Node, gpu_type: str | None) -> int:
    return sum(1 for acc in node.accelerators or [] if gpu_type is None or acc.get("type") == gpu_type)


def _fits_memory(request: int, node: int) -> bool:
    # In the scheduler's unit: it rounds a request up and a node down to whole MiB, so a request a few bytes under
    # a node's odd size (meminfo counts KiB) would otherwise be admitted and then never placed.
    return -(-request // MIB) <= node // MIB


def _check_fits(field: str, a: Amounts, nodes: Sequence[Node], pool: Pool) -> None:
    """Refuse a replica that no node of the pool could ever hold, naming the pool and the first resource short.

    Every member counts, cordoned and down ones too: they come back, and the job waits for them with a reason
    that says so. What no member can hold, though, would wait forever.
    """
    if not nodes:
        raise ValidationFailed(
            f"pool {pool.name} has no node; no replica can run there",
            field=field,
            details={"pool": pool.name, "resource": "nodes", "requested": 1, "largest": 0},
        )
    if any(
        a.cpu_milli <= n.cpu_milli
        and _fits_memory(a.memory_bytes, n.memory_bytes)
        and a.gpu <= _devices_of(n, a.gpu_type)
        for n in nodes
    ):
        return
    largest_cpu = max(n.cpu_milli for n in nodes)
    largest_memory = max(n.memory_bytes for n in nodes)
    largest_devices = max(_devices_of(n, a.gpu_type) for n in nodes)
    device_name = a.gpu_type or "accelerator"
    shortfall: tuple[str, int, int] | None = None
    if a.cpu_milli > largest_cpu:
        text = (
            f"needs {format_cpu(a.cpu_milli)} CPU; the largest node of pool {pool.name} has {format_cpu(largest_cpu)}"
        )
        shortfall = ("cpu", a.cpu_milli, largest_cpu)
    elif not _fits_memory(a.memory_bytes, largest_memory):
        text = (
            f"needs {format_memory(a.memory_bytes)} memory; the largest node of pool {pool.name} has "
            f"{format_memory(largest_memory)}"
        )
        shortfall = ("memory", a.memory_bytes, largest_memory)
    elif a.gpu > largest_devices:
        text = f"needs {a.gpu} {device_name} device(s); the most any node of pool {pool.name} has is {largest_devices}"
        shortfall = (a.gpu_type or "accelerators", a.gpu, largest_devices)
    else:
        text = (
            f"needs {format_cpu(a.cpu_milli)} CPU, {format_memory(a.memory_bytes)} memory and {a.gpu} "
            f"{device_name} device(s) on one node; no node of pool {pool.name} has all of them"
        )
    details: dict[str, Any] = {"pool": pool.name}
    if shortfall is not None:
        details.update(resource=shortfall[0], requested=shortfall[1], largest=shortfall[2])
    raise ValidationFailed(text, field=field, details=details)


async def _check_quota(session: AsyncSession, workspace: Workspace, pool: Pool, replicas: Sequence[Amounts]) -> None:
    """Refuse a job whose total is above the workspace's quota maximum in the pool: it could never be admitted."""
    maximum = await session.scalar(
        select(Quota.maximum).where(Quota.workspace_id == workspace.id, Quota.pool_id == pool.id)
    )
    if not maximum:
        return
    total: dict[str, int] = {"cpu": 0, "memory": 0, "accelerators": 0}
    for a in replicas:
        total["cpu"] += a.cpu_milli
        total["memory"] += a.memory_bytes
        total["accelerators"] += a.devices
        if a.gpu_type and a.devices:
            total[a.gpu_type] = total.get(a.gpu_type, 0) + a.devices
    for name, amount in total.items():
        limit = maximum.get(name)
        if limit is None or amount <= limit:
            continue
        shown = {
            "cpu": (format_cpu(amount) + " CPU", format_cpu(limit)),
            "memory": (format_memory(amount) + " memory", format_memory(limit)),
        }.get(name, (f"{amount} {name} device(s)", str(limit)))
        raise QuotaExceeded(
            f"the job needs {shown[0]} in total; the maximum of workspace {workspace.name} in pool {pool.name} is "
            f"{shown[1]}",
            details={"field": "tasks", "resource": name, "requested": amount, "maximum": limit},
        )


async def _check_gpu_types(session: AsyncSession, fields_types: Sequence[tuple[str, str]]) -> None:
    if not fields_types:
        return
    wanted = {t for _, t in fields_types}
    known = set((await session.scalars(select(AcceleratorType.name).where(AcceleratorType.name.in_(wanted)))).all())
    for field, name in fields_types:
        if name not in known:
            raise ValidationFailed(f'accelerator type "{name}" does not exist', field=field)


async def submit_job(
    session: AsyncSession,
    actor: Actor,
    spec_source: str | Mapping[str, Any],
    *,
    overrides: Sequence[str] = (),
    workspace_id: int | None = None,
    template_id: int | None = None,
    notebook: bool = False,
    service: bool = False,
) -> JobView:
    """Submit a job: it is created ``pending``, then ``queued`` once every reference is resolved.

    Args:
        spec_source: The job spec as YAML/JSON text or a mapping.
        overrides: ``PATH=VALUE`` changes applied before parsing (``tasks[0].replicas=4``).
        workspace_id: The workspace; else the spec's ``workspace``; else the actor's default workspace.
        template_id: The template it came from (recorded in the audit log).
        notebook: The notebooks service creating a notebook: only then is kind ``notebook`` accepted (a notebook
            needs its own row and files, which ``services.notebooks.create_notebook`` makes).
        service: The serving service starting a service replica: only then is kind ``service`` accepted.

    Raises:
        ValidationFailed: A malformed spec or override, an unknown or unusable spec name or accelerator type, a
            replica larger than every node of the pool; ``details['field']`` names the field.
        NotFound: The workspace, or a catalog version the submitter cannot see (field ``image``,
            ``algorithm``, ``datasets[1]``).
        Forbidden: A platform admin naming a user's version that is not shared with them.
        Conflict: An ambiguous reference, or a version that is not ready.
        QuotaExceeded: The job is larger than the workspace's quota maximum in its pool.
        InsufficientBalance: The workspace has a billing policy and is in arrears (``spending_limit_reached``:
            its monthly limit is reached); nothing is written.
    """
    spec = load_spec(spec_source, overrides)
    if (spec.kind is JobKind.NOTEBOOK) != notebook:
        if notebook:
            raise ValidationFailed("a notebook's spec has kind notebook", field="kind")
        raise ValidationFailed(
            "notebooks are created with POST /api/v1/notebooks (aicenter notebook create), not as jobs", field="kind"
        )
    if (spec.kind is JobKind.SERVICE) != service:
        if service:
            raise ValidationFailed("a service replica's spec has kind service", field="kind")
        raise ValidationFailed(
            "services are deployed with POST /api/v1/services (aicenter service deploy), not as jobs", field="kind"
        )
    workspace = await resolve_workspace(session, actor, spec.workspace, workspace_id)
    if not service:  # a service's replicas are admitted at its deploy, start and scale-up, not one by one
        await billing.admit(session, workspace.id)

    image_id = None
    if spec.image != "host":  # "host": the server's own Python, no catalog image
        image_id = await _resolve_ref(session, actor, ItemKind.IMAGE, spec.image, "image", workspace.id)
    algorithm_id = None
    if spec.algorithm is not None:
        algorithm_id = await _resolve_ref(session, actor, ItemKind.ALGORITHM, spec.algorithm, "algorithm", workspace.id)
    model_id = None
    if spec.model is not None:
        model_id = await _resolve_ref(session, actor, ItemKind.MODEL, spec.model, "model", workspace.id)
    dataset_ids = [
        await _resolve_ref(session, actor, ItemKind.DATASET, ref, f"datasets[{i}]", workspace.id)
        for i, ref in enumerate(spec.datasets)
    ]

    granted = set(
        (await session.scalars(select(PoolGrant.pool_id).where(PoolGrant.workspace_id == workspace.id))).all()
    )
    specs: list[tuple[str, ResourceSpec | None]] = []
    for i, task in enumerate(spec.tasks):
        field = f"tasks[{i}].resources.spec"
        name = task.resources.spec
        specs.append((field, await _usable_spec(session, workspace, name, field, granted) if name else None))
    await _check_gpu_types(
        session,
        [
            (f"tasks[{i}].resources.gpu_type", t.resources.gpu_type)
            for i, t in enumerate(spec.tasks)
            if t.resources.gpu_type
        ],
    )
    pool = await _choose_pool(session, workspace, spec.pool, specs, granted)
    amounts = [_amounts(task.resources, s) for task, (_, s) in zip(spec.tasks, specs, strict=True)]
    nodes = await inventory.pool_nodes(session, pool)
    for i, a in enumerate(amounts):
        _check_fits(f"tasks[{i}].resources", a, nodes, pool)
    per_task = dict(zip((t.name for t in spec.tasks), amounts, strict=True))
    await _check_quota(session, workspace, pool, [per_task[task.name] for task, _ in spec.ranks()])

    job = Job(
        workspace_id=workspace.id,
        user_id=actor.user_id or None,
        kind=spec.kind.value,
        name=spec.name,
        spec=spec.normalized(),
        status=JobStatus.PENDING.value,
        priority=spec.priority_value,
        pool_id=pool.id,
        image_version_id=image_id,
        algorithm_version_id=algorithm_id,
        dataset_version_ids=dataset_ids,
        model_version_id=model_id,
    )
    session.add(job)
    await session.flush()
    for task, index in spec.ranks():
        a = per_task[task.name]
        session.add(
            Replica(
                job_id=job.id,
                task=task.name,
                index=index,
                attempt=0,
                status=ReplicaStatus.PENDING.value,
                cpu_milli=a.cpu_milli,
                memory_bytes=a.memory_bytes,
                gpu=a.gpu,
                gpu_type=a.gpu_type,
                gpu_share=a.gpu_share,
                spec_id=a.spec.id if a.spec is not None else None,
                billing_weight=a.spec.billing_weight if a.spec is not None else 1.0,
                price_per_hour=a.spec.price_per_hour if a.spec is not None else Decimal(0),
            )
        )
    await record_created(session, job, actor=actor)
    # Every reference is resolved above; an image still building would keep the job pending (refused for now).
    await transition(session, job, JobStatus.QUEUED, actor=actor, reason="resolved", message=f"pool {pool.name}")
    details: dict[str, Any] = {"name": job.name, "pool": pool.name, "replicas": spec.replica_count}
    if template_id is not None:
        details["template_id"] = template_id
    if not service:  # the service's own deploy/scale is audited, not each replica it starts
        action = "notebook.create" if notebook else "job.submit"
        audit.record(session, actor, action, "job", job.id, workspace_id=workspace.id, details=details)
    notify_after_commit(session)  # the scheduler of this process looks at once, not at its next tick
    return (await job_views(session, [job]))[0]


async def resubmit_job(session: AsyncSession, actor: Actor, job_id: int, overrides: Sequence[str] = ()) -> JobView:
    """Submit a new job from a job's stored spec, with ``overrides``, in the same workspace (members of it).

    References are resolved again, as the resubmitting user sees them now.
    """
    job = await load_job(session, actor, job_id)
    return await submit_job(session, actor, job.spec, overrides=overrides, workspace_id=job.workspace_id)
