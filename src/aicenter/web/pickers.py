"""Choices that console forms offer (pools, users by name, resource names), read through the services."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind, Scope, VersionState
from aicenter.core.errors import ValidationFailed
from aicenter.db.models import AcceleratorType, Pool, User
from aicenter.services import catalog, inventory, tenancy
from aicenter.services.context import Actor
from aicenter.services.quotas import BUILTIN_RESOURCES
from aicenter.web.forms import FormState

# Selects list at most this many; a platform has tens of pools and accelerator types, not thousands.
_MAX_CHOICES = 500
_CHOICES = 100  # items per kind and scope offered in a run form's select: a form, not a catalog browser
_VERSIONS_PER_ITEM = 5


async def user_by_name(session: AsyncSession, actor: Actor, username: str, field: str = "admin_username") -> User:
    page = await tenancy.list_users(session, actor, username=username, limit=1)
    if not page.items:
        raise ValidationFailed(f'no user is named "{username}"', field=field)
    return page.items[0]


async def pools(session: AsyncSession, actor: Actor) -> list[Pool]:
    """The pools the actor may see, by name."""
    page = await inventory.list_pools(session, actor, limit=_MAX_CHOICES)
    return sorted((v.pool for v in page.items), key=lambda p: p.name)


async def accelerator_types(session: AsyncSession, actor: Actor) -> list[AcceleratorType]:
    page = await inventory.list_accelerator_types(session, actor, limit=_MAX_CHOICES)
    return sorted(page.items, key=lambda t: t.name)


async def quota_resources(session: AsyncSession, actor: Actor) -> list[str]:
    """Resource names a quota may limit: cpu, memory, accelerators, then each accelerator type."""
    return [*BUILTIN_RESOURCES, *(t.name for t in await accelerator_types(session, actor))]


@dataclass(frozen=True)
class RunChoices:
    """What the forms that run something (a job, a notebook) offer: (reference, label) pairs read from the
    catalog and inventory."""

    images: list[tuple[str, str]]
    algorithms: list[tuple[str, str]]
    datasets: list[tuple[str, str]]
    specs: list[tuple[str, str]]


async def _versions(
    session: AsyncSession, actor: Actor, kind: ItemKind, workspace_id: int | None
) -> list[tuple[str, str]]:
    """Ready versions whose content the actor may use, of items in their own, workspace, public and preset tabs."""
    seen: set[int] = set()
    out: list[tuple[str, str]] = []
    for scope in (Scope.MINE, Scope.WORKSPACE, Scope.PUBLIC, Scope.PRESET):
        page = await catalog.list_items(
            session,
            actor,
            kind,
            scope=scope,
            workspace_id=workspace_id if scope is Scope.WORKSPACE else None,
            sort="name",
            limit=_CHOICES,
        )
        for item in page.items:
            if item.id in seen or not item.version_count:
                continue
            seen.add(item.id)
            versions = await catalog.list_versions(session, actor, kind, item.id, limit=_VERSIONS_PER_ITEM)
            for v in versions.items:
                if v.state == VersionState.READY.value and v.can_read_content:
                    label = v.ref + (f" — {v.description}" if v.description else "")
                    out.append((v.ref, label))
    return out


def chosen_workspace_id(forms: Sequence[FormState] | None, fallback: int | None) -> int | None:
    """The workspace a submitted run form named (the last one that did), else ``fallback``: the form is shown
    again with the choices of the workspace the user picked."""
    chosen = None
    for state in forms or []:
        raw = state.values.get("workspace_id", "")
        chosen = int(raw) if raw.isdigit() else chosen
    return chosen or fallback


async def run_choices(session: AsyncSession, actor: Actor, workspace_id: int | None) -> RunChoices:
    """Images (``host`` first), algorithm and dataset versions the actor may use, and the resource specs
    usable in ``workspace_id``'s pools."""
    images = await _versions(session, actor, ItemKind.IMAGE, workspace_id)
    algorithms = await _versions(session, actor, ItemKind.ALGORITHM, workspace_id)
    datasets = await _versions(session, actor, ItemKind.DATASET, workspace_id)
    specs = await inventory.list_specs(session, actor, workspace_id=workspace_id, limit=_CHOICES)
    return RunChoices(
        images=[("host", "host — the server's own Python"), *images],
        algorithms=algorithms,
        datasets=datasets,
        specs=[(s.name, f"{s.name} — {s.description}" if s.description else s.name) for s in specs.items],
    )


@dataclass(frozen=True)
class DeployChoices:
    """What the deploy form offers: ready model versions the actor may serve, resource specs and pools."""

    models: list[tuple[str, str]]
    specs: list[tuple[str, str]]
    pools: list[tuple[str, str]]


async def deploy_choices(session: AsyncSession, actor: Actor, workspace_id: int | None) -> DeployChoices:
    models = await _versions(session, actor, ItemKind.MODEL, workspace_id)
    specs = await inventory.list_specs(session, actor, workspace_id=workspace_id, limit=_CHOICES)
    return DeployChoices(
        models=models,
        specs=[(s.name, f"{s.name} — {s.description}" if s.description else s.name) for s in specs.items],
        pools=[(p.name, p.name) for p in await pools(session, actor)],
    )
