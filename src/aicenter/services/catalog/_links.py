"""Links to versions named by id (a model's lineage), for the versions the reader may see."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.db.models import CatalogItem, CatalogVersion
from aicenter.services.catalog._access import version_visible
from aicenter.services.catalog._views import version_views
from aicenter.services.context import Actor


@dataclass(frozen=True)
class VersionLink:
    """Where a version is, and the reference the reader writes for it (``resnet:3``, ``alice/resnet:3``)."""

    id: int
    kind: ItemKind
    item_id: int
    number: int
    ref: str


async def version_links(session: AsyncSession, actor: Actor, version_ids: Iterable[int]) -> dict[int, VersionLink]:
    """The versions among ``version_ids`` that the actor may see, by id; the others are left out, so a model
    shared with someone does not show them the names of the owner's private datasets (platform admins see all).
    """
    ids = sorted({int(v) for v in version_ids})
    if not ids:
        return {}
    stmt = (
        select(CatalogItem, CatalogVersion)
        .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
        .where(CatalogVersion.id.in_(ids))
    )
    if not actor.is_platform_admin:
        stmt = stmt.where(version_visible(actor))
    pairs = [(item, version) for item, version in (await session.execute(stmt)).all()]
    views = await version_views(session, actor, pairs)
    return {
        version.id: VersionLink(version.id, ItemKind(item.kind), item.id, version.number, view.ref)
        for (item, version), view in zip(pairs, views, strict=True)
    }
