"""References as people write them (``linreg-model:1``), for messages and events; never a version's row id.

A user never sees a version's database id in the CLI or console, so "version 17" in a message cannot be acted
on, while ``linreg-model:1`` can be typed straight into ``aicenter model pull`` or a job spec.
"""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.db.models import CatalogItem, CatalogVersion


def reference(name: str, number: int, *, owner: str | None = None, preset: bool = False) -> str:
    """``name:number``; ``owner/name:number`` for another user's item, ``preset/name:number`` for a preset."""
    prefix = "preset/" if preset else f"{owner}/" if owner else ""
    return f"{prefix}{name}:{number}"


async def version_reference(session: AsyncSession, version_id: int) -> str:
    """The reference of a version given its id, as its owner writes it (``linreg-model:1``, presets
    ``preset/name:1``), e.g. for the event ``saved model linreg-model:1``.

    Returns:
        The reference, or ``#<id>`` (also a valid reference) when the version no longer exists.
    """
    row = (
        await session.execute(
            select(CatalogItem.name, CatalogVersion.number, CatalogItem.is_preset)
            .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
            .where(CatalogVersion.id == version_id)
        )
    ).first()
    if row is None:
        return f"#{version_id}"
    return reference(row.name, row.number, preset=row.is_preset)
