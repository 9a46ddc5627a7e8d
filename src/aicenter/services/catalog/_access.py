"""Who may see, read and change catalog items and versions (docs/dev/catalog-contract.md, "Rules").

Visibility is decided in SQL (``version_visible``) so that lists use the indexes on ``visibility`` and
``shared_workspace_id`` instead of filtering rows in Python. What an actor may not see reads as missing
(NotFound); platform admins see every item's metadata but content only through a visibility that includes
them (Forbidden otherwise).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Sequence
from typing import Any

from sqlalchemy import ColumnElement, Select, and_, exists, false, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind, Visibility
from aicenter.core.errors import Forbidden, InUse, NotFound
from aicenter.db.models import CatalogItem, CatalogVersion, Membership
from aicenter.services.catalog._quota import check_storage_quota
from aicenter.services.catalog._refs import reference
from aicenter.services.context import Actor

__all__ = [
    "ADMIN_CONTENT_MESSAGE",
    "VERSION_USERS",
    "can_read_content",
    "check_not_in_use",
    "check_storage_quota",
    "item_visible",
    "load_item",
    "load_item_for_write",
    "load_version",
    "my_workspace_ids",
    "version_users",
    "version_visible",
]

ADMIN_CONTENT_MESSAGE = "platform admins see the metadata of user items, not their content"

VersionUsers = Callable[[AsyncSession, list[int]], Awaitable[dict[int, list[str]]]]
# Hooks of the areas that use versions (jobs, serving): each returns version id -> users, e.g. ["job 42 (running)"].
# Appended at import time of those areas; deleting a version any of them reports raises InUse.
VERSION_USERS: list[VersionUsers] = []

_OPEN_VISIBILITIES = (Visibility.PUBLIC.value, Visibility.PRESET.value)


def _me(actor: Actor) -> int | None:
    """The actor's user id as stored in owner columns (the system actor, id 0, owns nothing)."""
    return actor.user_id or None


def my_workspaces_subquery(actor: Actor) -> Select[int]:
    return select(Membership.workspace_id).where(Membership.user_id == actor.user_id)


async def my_workspace_ids(session: AsyncSession, actor: Actor) -> set[int]:
    return set((await session.scalars(my_workspaces_subquery(actor))).all())


def version_visible(actor: Actor, *, owner_sees_all: bool = True) -> ColumnElement[bool]:
    """SQL: the version (joined with its item) is visible to the actor through ownership or visibility.

    Platform admins' metadata access is not included: callers add it where metadata is what is read.
    """
    conditions: list[ColumnElement[bool]] = [
        CatalogVersion.visibility.in_(_OPEN_VISIBILITIES),
        and_(
            CatalogVersion.visibility == Visibility.WORKSPACE.value,
            CatalogVersion.shared_workspace_id.in_(my_workspaces_subquery(actor)),
        ),
    ]
    me = _me(actor)
    if owner_sees_all and me is not None:
        conditions.append(CatalogItem.owner_id == me)
    return or_(*conditions)


def item_visible(actor: Actor) -> ColumnElement[bool]:
    """SQL over CatalogItem: owner, preset, or at least one version visible (platform admins: everything)."""
    if actor.is_platform_admin:
        return CatalogItem.id.is_not(None)
    me = _me(actor)
    shared = exists(
        select(CatalogVersion.id).where(
            CatalogVersion.item_id == CatalogItem.id,
            or_(
                CatalogVersion.visibility.in_(_OPEN_VISIBILITIES),
                and_(
                    CatalogVersion.visibility == Visibility.WORKSPACE.value,
                    CatalogVersion.shared_workspace_id.in_(my_workspaces_subquery(actor)),
                ),
            ),
        )
    )
    return or_(CatalogItem.owner_id == me if me is not None else false(), CatalogItem.is_preset.is_(True), shared)


def can_read_content(actor: Actor, item: CatalogItem, version: CatalogVersion, workspace_ids: Collection[int]) -> bool:
    """Whether the actor may read the version's files: owner, preset/public, or shared to one of their
    workspaces (``workspace_ids``: the actor's memberships). Being a platform admin is not enough."""
    if _me(actor) is not None and item.owner_id == _me(actor):
        return True
    if version.visibility in _OPEN_VISIBILITIES:
        return True
    return version.visibility == Visibility.WORKSPACE.value and version.shared_workspace_id in workspace_ids


def _may_see_version(actor: Actor, item: CatalogItem, version: CatalogVersion, workspace_ids: Collection[int]) -> bool:
    return actor.is_platform_admin or can_read_content(actor, item, version, workspace_ids)


def _may_write(actor: Actor, item: CatalogItem) -> bool:
    if item.is_preset:
        return actor.is_platform_admin
    return _me(actor) is not None and item.owner_id == _me(actor)


async def load_item(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int) -> CatalogItem:
    """The item if the actor may see it (metadata); otherwise NotFound."""
    item = await session.scalar(
        select(CatalogItem).where(CatalogItem.id == item_id, CatalogItem.kind == kind.value, item_visible(actor))
    )
    if item is None:
        raise NotFound(f"{kind.value} {item_id} not found")
    return item


async def load_item_for_write(session: AsyncSession, actor: Actor, kind: ItemKind, item_id: int) -> CatalogItem:
    """The item if the actor may change it: its owner, or a platform admin for preset items.

    Raises:
        NotFound: the actor cannot see the item.
        Forbidden: the actor sees it but may not change it.
    """
    item = await load_item(session, actor, kind, item_id)
    if not _may_write(actor, item):
        if item.is_preset:
            raise Forbidden(f"only platform admins can change preset {kind.value} {item.name}")
        raise Forbidden(f"only the owner can change {kind.value} {item.name}")
    return item


async def load_version(
    session: AsyncSession,
    actor: Actor,
    kind: ItemKind,
    item_id: int,
    number: int,
    *,
    content: bool = False,
    write: bool = False,
) -> tuple[CatalogItem, CatalogVersion]:
    """The item and its version ``number`` if the actor may see the version.

    Args:
        content: The caller reads the version's content (files, archive, preview, copy, build log): platform
            admins without a visibility that includes them get Forbidden.
        write: The caller changes the version: owner (platform admins for presets) only.

    Raises:
        NotFound: the item or version does not exist or the actor cannot see it.
        Forbidden: see ``content`` and ``write``.
    """
    item = await (load_item_for_write if write else load_item)(session, actor, kind, item_id)
    version = await session.scalar(
        select(CatalogVersion).where(CatalogVersion.item_id == item.id, CatalogVersion.number == number)
    )
    if version is None:
        raise NotFound(f"{kind.value} {reference(item.name, number, preset=item.is_preset)} not found")
    workspace_ids: set[int] = set()
    if version.visibility == Visibility.WORKSPACE.value:
        workspace_ids = await my_workspace_ids(session, actor)
    if not _may_see_version(actor, item, version, workspace_ids):
        raise NotFound(f"{kind.value} {reference(item.name, number, preset=item.is_preset)} not found")
    if content and not can_read_content(actor, item, version, workspace_ids):
        raise Forbidden(ADMIN_CONTENT_MESSAGE)
    return item, version


async def version_users(session: AsyncSession, version_ids: Sequence[int]) -> dict[int, list[str]]:
    """Who uses each version, merged from every ``VERSION_USERS`` hook (only versions with users appear)."""
    ids = list(version_ids)
    merged: dict[int, list[str]] = {}
    if not ids:
        return merged
    for hook in VERSION_USERS:
        for version_id, users in (await hook(session, ids)).items():
            if users:
                merged.setdefault(version_id, []).extend(users)
    return merged


async def check_not_in_use(session: AsyncSession, item: CatalogItem, versions: Sequence[CatalogVersion]) -> None:
    """Raise InUse naming the users (``version resnet:3 is used by job 42 (running)``) if any version is used."""
    users = await version_users(session, [v.id for v in versions])
    if not users:
        return
    numbers = {v.id: v.number for v in versions}
    parts = [
        f"version {reference(item.name, numbers[vid], preset=item.is_preset) if vid in numbers else '?'} is used by "
        f"{', '.join(names)}"
        for vid, names in sorted(users.items(), key=lambda kv: numbers.get(kv[0], 0))
    ]
    details: dict[str, Any] = {
        "users": [name for vid in sorted(users) for name in users[vid]],
        "versions": {str(numbers.get(vid, vid)): names for vid, names in users.items()},
    }
    raise InUse("; ".join(parts), details=details)
