"""Storage quota of a workspace: the logical size of the versions of its items (copies count in full)."""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import NotFound, QuotaExceeded, ValidationFailed
from aicenter.db.models import CatalogItem, CatalogVersion, Workspace
from aicenter.services import audit
from aicenter.services.access import get_visible_workspace, require_platform_admin
from aicenter.services.context import Actor

# BIGINT holds 2**63 - 1; an exbibyte is far beyond any store and catches unit typos.
MAX_QUOTA_BYTES = 2**60


@dataclass(frozen=True)
class StorageUsage:
    workspace_id: int
    limit_bytes: int | None
    used_bytes: int


def human_bytes(n: int) -> str:
    """``1610612736`` -> ``1.5 GiB``: one decimal, in the largest binary unit reached (quota messages)."""
    for unit, shift in (("PiB", 50), ("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"


async def used_bytes(session: AsyncSession, workspace_id: int) -> int:
    """Sum of ``size_bytes`` of the versions of the workspace's items (index on catalog_items.workspace_id)."""
    used = await session.scalar(
        select(func.coalesce(func.sum(CatalogVersion.size_bytes), 0))
        .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
        .where(CatalogItem.workspace_id == workspace_id)
    )
    return int(used or 0)


@dataclass(frozen=True)
class StorageRoom:
    """A workspace's storage quota and use, read before bytes are written (an archive's declared size)."""

    workspace: str
    limit_bytes: int
    used_bytes: int

    def check_archive(self, declared: int) -> None:
        """Raise QuotaExceeded when an archive whose headers so far declare ``declared`` bytes cannot fit.

        Sync (called from the thread that reads the archive's headers). The commit's own check inside the write
        transaction still runs: this one only stops a bomb before it expands.
        """
        over = self.used_bytes + declared - self.limit_bytes
        if over > 0:
            raise QuotaExceeded(
                f"the archive declares at least {human_bytes(declared)} of files ({declared} bytes); storing them "
                f"({human_bytes(self.used_bytes)} used) exceeds the storage quota of workspace {self.workspace} "
                f"({human_bytes(self.limit_bytes)}) by {human_bytes(over)}. Nothing was expanded",
                details={
                    "limit": self.limit_bytes,
                    "used": self.used_bytes,
                    "requested": declared,
                    "declared": declared,
                    "over": over,
                },
            )


async def storage_room(session: AsyncSession, workspace_id: int | None) -> StorageRoom | None:
    """The workspace's quota and current use; None when it has no quota (or for presets)."""
    if workspace_id is None:
        return None
    workspace = await session.get(Workspace, workspace_id)
    if workspace is None or workspace.storage_quota_bytes is None:
        return None
    return StorageRoom(workspace.name, workspace.storage_quota_bytes, await used_bytes(session, workspace_id))


async def check_storage_quota(session: AsyncSession, workspace_id: int | None, extra_bytes: int) -> None:
    """Raise QuotaExceeded if adding ``extra_bytes`` to the workspace passes its storage quota.

    Call it inside the write transaction that adds the version. Where a limit is set, the workspace row is
    locked first (FOR UPDATE on PostgreSQL; SQLite serializes writers already), so two concurrent commits
    cannot both pass a check that only one of them fits. Presets (``workspace_id`` None) have no quota.
    """
    if workspace_id is None or extra_bytes <= 0:  # presets; an empty version adds nothing
        return
    limit = await session.scalar(select(Workspace.storage_quota_bytes).where(Workspace.id == workspace_id))
    if limit is None:
        return
    workspace = await session.get(Workspace, workspace_id, with_for_update=True, populate_existing=True)
    if workspace is None or workspace.storage_quota_bytes is None:
        return
    limit = workspace.storage_quota_bytes
    used = await used_bytes(session, workspace_id)
    over = used + extra_bytes - limit
    if over > 0:
        raise QuotaExceeded(
            f"storing {human_bytes(extra_bytes)} more ({human_bytes(used)} used) exceeds the storage quota of "
            f"workspace {workspace.name} ({human_bytes(limit)}) by {human_bytes(over)}",
            details={"limit": limit, "used": used, "requested": extra_bytes, "over": over},
        )


async def storage_usage(session: AsyncSession, actor: Actor, workspace_id: int) -> StorageUsage:
    """The workspace's storage limit and use. Members and platform admins; others get NotFound."""
    workspace = await get_visible_workspace(session, actor, workspace_id)
    return StorageUsage(workspace.id, workspace.storage_quota_bytes, await used_bytes(session, workspace.id))


async def set_storage_quota(
    session: AsyncSession, actor: Actor, workspace_id: int, limit_bytes: int | None
) -> StorageUsage:
    """Set (or with None remove) the workspace's storage limit. Platform admins only; audited.

    A limit below the current use is accepted: it stops new versions, it deletes nothing.

    Raises:
        Forbidden: the actor is not a platform admin.
        NotFound: no such workspace.
        ValidationFailed: a negative or absurd limit (field ``limit``).
    """
    require_platform_admin(actor, "setting storage quotas")
    if limit_bytes is not None and (
        isinstance(limit_bytes, bool) or not isinstance(limit_bytes, int) or not 0 <= limit_bytes <= MAX_QUOTA_BYTES
    ):
        raise ValidationFailed("must be a number of bytes between 0 and 1 EiB, or null for no limit", field="limit")
    workspace = await session.get(Workspace, workspace_id, with_for_update=True)
    if workspace is None:
        raise NotFound(f"workspace {workspace_id} not found")
    previous = workspace.storage_quota_bytes
    workspace.storage_quota_bytes = limit_bytes
    audit.record(
        session,
        actor,
        "workspace.storage_quota",
        "workspace",
        workspace.id,
        workspace_id=workspace.id,
        details={"limit_bytes": limit_bytes, "previous": previous},
    )
    await session.flush()
    return StorageUsage(workspace.id, limit_bytes, await used_bytes(session, workspace.id))
