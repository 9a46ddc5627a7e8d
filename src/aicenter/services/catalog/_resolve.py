"""Resolve a version reference as people type it: ``name:3``, ``name``, ``owner/name:3``, ``preset/name``,
``#<version id>``."""

from __future__ import annotations

from sqlalchemy import and_, func, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind, VersionState, Visibility
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.core.ids import MAX_ID
from aicenter.db.models import CatalogItem, CatalogVersion, User
from aicenter.services.catalog._access import load_item, load_version, my_workspaces_subquery, version_visible
from aicenter.services.catalog._items import PRESET_NAMESPACE, user_namespace
from aicenter.services.catalog._views import VersionView, version_view
from aicenter.services.context import Actor


def parse_ref(ref: str) -> tuple[str | None, str, int | None]:
    """``owner/name:3`` -> ("owner", "name", 3); ``name`` -> (None, "name", None)."""
    text = ref.strip()
    head, colon, tail = text.rpartition(":")
    number: int | None = None
    if colon:
        if not tail.isdigit() or not head:
            raise ValidationFailed(f'"{ref}": the version after ":" must be a number, as in name:3', field="ref")
        number, text = int(tail), head
    owner, slash, name = text.rpartition("/")
    if not name or (slash and not owner) or "/" in owner:
        raise ValidationFailed(f'"{ref}" is not a reference: use name, name:3, owner/name:3 or #id', field="ref")
    return (owner if slash else None), name, number


async def _pick(
    session: AsyncSession, actor: Actor, kind: ItemKind, item: CatalogItem, number: int | None
) -> VersionView | None:
    """Version ``number`` of ``item``, or its newest ready version the actor can see; None if there is none."""
    if number is not None:
        try:
            _, chosen = await load_version(session, actor, kind, item.id, number)
        except NotFound:
            return None
        return await version_view(session, actor, item, chosen)
    stmt = (
        select(CatalogVersion)
        .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
        .where(CatalogVersion.item_id == item.id, CatalogVersion.state == VersionState.READY.value)
        .order_by(CatalogVersion.number.desc())
        .limit(1)
    )
    if not actor.is_platform_admin:
        stmt = stmt.where(version_visible(actor))
    version = await session.scalar(stmt)
    return None if version is None else await version_view(session, actor, item, version)


async def _item_in(session: AsyncSession, kind: ItemKind, namespace: str, name: str) -> CatalogItem | None:
    return await session.scalar(
        select(CatalogItem).where(
            CatalogItem.kind == kind.value, CatalogItem.namespace == namespace, CatalogItem.name == name
        )
    )


async def _shared_items(
    session: AsyncSession, actor: Actor, kind: ItemKind, name: str, number: int | None, workspace_id: int | None
) -> list[tuple[CatalogItem, str]]:
    """Other users' items ``name`` with a matching version shared with the actor (workspace or public)."""
    mine = my_workspaces_subquery(actor)
    shared_to_me = and_(
        CatalogVersion.visibility == Visibility.WORKSPACE.value,
        CatalogVersion.shared_workspace_id.in_(mine),
        *([CatalogVersion.shared_workspace_id == workspace_id] if workspace_id is not None else []),
    )
    version_filter = [
        CatalogVersion.item_id == CatalogItem.id,
        or_(CatalogVersion.visibility == Visibility.PUBLIC.value, shared_to_me),
        CatalogVersion.number == number if number is not None else CatalogVersion.state == VersionState.READY.value,
    ]
    stmt = (
        select(CatalogItem, func.coalesce(User.username, ""))
        .outerjoin(User, User.id == CatalogItem.owner_id)
        .where(
            CatalogItem.kind == kind.value,
            CatalogItem.name == name,
            CatalogItem.is_preset.is_(False),
            CatalogItem.namespace != user_namespace(actor.user_id),
            select(CatalogVersion.id).where(*version_filter).exists(),
        )
        .order_by(User.username)
        .limit(20)
    )
    return [(item, owner) for item, owner in (await session.execute(stmt)).all()]


async def resolve_version(
    session: AsyncSession, actor: Actor, kind: ItemKind, ref: str, *, workspace_id: int | None = None
) -> VersionView:
    """The version a reference names, for this actor.

    ``#<id>``: that version, if visible. ``owner/name[:n]`` and ``preset/name[:n]``: that item. A bare
    ``name[:n]`` looks in order at: the actor's own items, the presets, then other users' versions shared
    with the actor (to ``workspace_id`` if given, else to any of their workspaces, or public). Without a
    number, the newest *ready* version visible to the actor.

    Raises:
        ValidationFailed: a malformed reference (field ``ref``).
        NotFound: nothing visible matches.
        Conflict: several users share a matching ``name`` (the message lists them as ``owner/name``).
    """
    text = ref.strip()
    if text.startswith("#"):
        if not text[1:].isdigit():
            raise ValidationFailed(f'"{ref}": a version id is # and digits, as in #123', field="ref")
        # One answer for a version that does not exist, one the actor may not see, and an id no column can
        # hold: anything else would tell a guesser which ids exist (and load_version's message names the item).
        missing = NotFound(f"{kind.value} version {text} not found")
        version_id = int(text[1:])
        if version_id > MAX_ID:
            raise missing
        row = (
            await session.execute(
                select(CatalogVersion.item_id, CatalogVersion.number)
                .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
                .where(CatalogVersion.id == version_id, CatalogItem.kind == kind.value)
            )
        ).first()
        if row is None:
            raise missing
        try:
            item, version = await load_version(session, actor, kind, row[0], row[1])
        except NotFound:
            raise missing from None
        return await version_view(session, actor, item, version)

    owner, name, number = parse_ref(text)
    missing = NotFound(f'no {kind.value} "{text}" that you can see')
    if owner is not None:
        if owner == PRESET_NAMESPACE:
            namespace = PRESET_NAMESPACE
        else:
            user_id = await session.scalar(select(User.id).where(User.username == owner))
            if user_id is None:
                raise missing
            namespace = user_namespace(user_id)
        named = await _item_in(session, kind, namespace, name)
        if named is None:
            raise missing
        try:
            await load_item(session, actor, kind, named.id)  # visibility of the item itself
        except NotFound:
            raise missing from None
        found = await _pick(session, actor, kind, named, number)
        if found is None:
            raise missing
        return found

    for namespace in ((user_namespace(actor.user_id),) if actor.user_id else ()) + (PRESET_NAMESPACE,):
        own_or_preset = await _item_in(session, kind, namespace, name)
        if own_or_preset is not None and (found := await _pick(session, actor, kind, own_or_preset, number)):
            return found
    candidates = await _shared_items(session, actor, kind, name, number, workspace_id)
    if len(candidates) > 1:
        names = [f"{owner_name}/{item.name}" for item, owner_name in candidates]
        raise Conflict(
            f'"{text}" is ambiguous: {", ".join(names)}; name one as owner/name',
            details={"candidates": names},
        )
    if candidates:
        found = await _pick(session, actor, kind, candidates[0][0], number)
        if found is not None:
            return found
    raise missing
