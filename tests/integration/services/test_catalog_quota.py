"""Storage quota per workspace: usage, setting the limit, enforcement at commit, presets exempt."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import func, select

from aicenter.core.errors import Forbidden, NotFound, QuotaExceeded, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent, CatalogItem, CatalogVersion, VersionFile
from aicenter.services import catalog
from aicenter.storage import FileEntry
from tests.integration.services.catalog_helpers import DS, entries, make_store, new_item, new_version, people

GIB = 2**30


def _big(path: str, size: int, n: int) -> FileEntry:
    return FileEntry(path, size, f"{n:064x}")


async def test_usage_and_setting_the_limit(db: Database) -> None:
    p = await people(db)
    async with db.read() as session:
        usage = await catalog.storage_usage(session, p.bob, p.ws)  # a member
        assert (usage.workspace_id, usage.limit_bytes, usage.used_bytes) == (p.ws, None, 0)
        assert (await catalog.storage_usage(session, p.root, p.ws)).used_bytes == 0
        with pytest.raises(NotFound):
            await catalog.storage_usage(session, p.carol, p.ws)
    with pytest.raises(Forbidden):
        async with db.write() as session:
            await catalog.set_storage_quota(session, p.alice, p.ws, GIB)
    for bad in (-1, 2**61, True, 1.5):
        with pytest.raises(ValidationFailed) as exc:
            async with db.write() as session:
                await catalog.set_storage_quota(session, p.root, p.ws, bad)  # type: ignore[arg-type]
        assert exc.value.details["field"] == "limit"
    with pytest.raises(NotFound):
        async with db.write() as session:
            await catalog.set_storage_quota(session, p.root, 999_999, GIB)
    async with db.write() as session:
        usage = await catalog.set_storage_quota(session, p.root, p.ws, 10 * GIB)
    assert usage.limit_bytes == 10 * GIB
    async with db.write() as session:
        assert (await catalog.set_storage_quota(session, p.root, p.ws, None)).limit_bytes is None
    async with db.read() as session:
        details = (
            await session.scalars(
                select(AuditEvent.details).where(AuditEvent.action == "workspace.storage_quota").order_by(AuditEvent.id)
            )
        ).all()
    assert [d["limit_bytes"] for d in details] == [10 * GIB, None]


async def test_commit_over_quota_is_refused_and_writes_nothing(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "vision-data")
    await new_version(db, p.alice, item.id, [_big("a.bin", 8 * GIB + GIB // 2, 1)])
    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.ws, 10 * GIB)
    files = [_big("b.bin", 3 * GIB, 2)]
    with pytest.raises(QuotaExceeded) as exc:
        await new_version(db, p.alice, item.id, files)
    assert exc.value.details == {
        "limit": 10 * GIB,
        "used": 8 * GIB + GIB // 2,
        "requested": 3 * GIB,
        "over": 3 * GIB // 2,
    }
    assert exc.value.message.endswith("exceeds the storage quota of workspace alice (10.0 GiB) by 1.5 GiB")
    async with db.read() as session:
        assert await session.scalar(select(func.count()).select_from(CatalogVersion)) == 1
        assert await session.scalar(select(func.count()).select_from(VersionFile)) == 1
        row = await session.get(CatalogItem, item.id)
        assert row is not None
        assert row.next_version == 2
    # Exactly at the limit fits.
    fits = await new_version(db, p.alice, item.id, [_big("c.bin", GIB + GIB // 2, 3)])
    assert fits.number == 2
    async with db.read() as session:
        usage = await catalog.storage_usage(session, p.alice, p.ws)
    assert (usage.used_bytes, usage.limit_bytes) == (10 * GIB, 10 * GIB)
    # Deleting a version frees its share.
    async with db.write() as session:
        await catalog.delete_version(session, p.alice, DS, item.id, 1)
    async with db.read() as session:
        assert (await catalog.storage_usage(session, p.alice, p.ws)).used_bytes == GIB + GIB // 2


async def test_quota_counts_items_of_the_workspace_only(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    data = entries(store, {"x.txt": b"x" * 100})
    mine = await new_item(db, p.alice, "a")
    in_bobs = await new_item(db, p.bob, "b")  # bob's own workspace
    in_alices = await new_item(db, p.bob, "c", workspace_id=p.ws)  # bob's item in alice's workspace
    for actor, item in ((p.alice, mine), (p.bob, in_bobs), (p.bob, in_alices)):
        await new_version(db, actor, item.id, data)
    async with db.read() as session:
        assert (await catalog.storage_usage(session, p.alice, p.ws)).used_bytes == 200
        assert (await catalog.storage_usage(session, p.bob, p.bob_ws)).used_bytes == 100
    # Presets have no workspace and no quota.
    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.ws, 0)
    preset = await new_item(db, p.root, "coco", preset=True)
    await new_version(db, p.root, preset.id, [_big("huge.bin", 100 * GIB, 9)])
    with pytest.raises(QuotaExceeded):
        await new_version(db, p.alice, mine.id, data)
    # An empty version fits even a full workspace.
    assert (await new_version(db, p.alice, mine.id)).size_bytes == 0
