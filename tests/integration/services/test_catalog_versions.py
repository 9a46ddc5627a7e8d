"""Catalog versions: numbering (also under concurrent commits), image build specs, list/get visibility,
share/unshare, update, delete and InUse."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from aicenter.core.catalog import ItemKind, Visibility
from aicenter.core.errors import Conflict, Forbidden, InUse, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion, ImageBuild, VersionFile
from aicenter.services import catalog
from aicenter.storage import FileEntry, manifest_sha256
from tests.integration.services.catalog_helpers import (
    DS,
    audit_actions,
    entries,
    make_store,
    new_item,
    new_version,
    people,
)

IMG = ItemKind.IMAGE


async def test_add_version_writes_rows_and_numbers(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    item = await new_item(db, p.alice, "data")
    files = entries(store, {"b/2.txt": b"two", "a.txt": b"one", "c.bin": b"\x00" * 1000})
    v1 = await new_version(db, p.alice, item.id, files, description="first")
    assert (v1.number, v1.file_count, v1.size_bytes) == (1, 3, 1006)
    assert v1.manifest_sha256 == manifest_sha256(files)
    assert (v1.visibility, v1.state, v1.ref, v1.created_by_name) == ("private", "ready", "data:1", "alice")
    assert v1.can_read_content
    async with db.read() as session:
        rows = (await session.scalars(select(VersionFile).where(VersionFile.version_id == v1.id))).all()
    assert sorted((r.path, r.size, r.sha256) for r in rows) == sorted((e.path, e.size, e.sha256) for e in files)
    async with db.write() as session:
        empty = await catalog.create_version(session, p.alice, DS, item.id, description="empty")
    assert (empty.number, empty.file_count, empty.size_bytes) == (2, 0, 0)
    assert await audit_actions(db, "dataset.version.") == ["dataset.version.create"] * 2
    async with db.read() as session:
        view = await catalog.get_item(session, p.alice, DS, item.id)
    assert (view.version_count, view.latest_version) == (2, 2)


async def test_many_files_in_one_bulk_insert(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "big")
    files = [catalog_entry(i) for i in range(10_000)]
    version = await new_version(db, p.alice, item.id, files)
    assert (version.file_count, version.size_bytes) == (10_000, sum(range(10_000)))
    async with db.read() as session:
        page = await catalog.list_files(session, p.alice, DS, item.id, 1, limit=1000)
    assert len(page.items) == 1000
    assert page.next_cursor is not None


def catalog_entry(i: int) -> FileEntry:
    return FileEntry(f"shard-{i:05d}.bin", i, f"{i:064x}")


async def test_concurrent_commits_get_consecutive_numbers(db: Database) -> None:
    """Two write transactions add a version to the same item while both are open: the numbers differ."""
    p = await people(db)
    item = await new_item(db, p.alice, "busy")
    first_allocated = asyncio.Event()
    second_started = asyncio.Event()

    async def first() -> int:
        async with db.write() as session:
            row = await catalog.load_item_for_write(session, p.alice, DS, item.id)
            version = await catalog.add_version(session, p.alice, row, entries=[])
            first_allocated.set()
            await second_started.wait()  # commit only once the other transaction is under way
            return version.number

    async def second() -> int:
        await first_allocated.wait()
        async with db.write() as session:
            if db.is_sqlite:
                # SQLite: the first statement waits on BEGIN IMMEDIATE until the first transaction commits.
                second_started.set()
            row = await catalog.load_item_for_write(session, p.alice, DS, item.id)
            # PostgreSQL: both transactions are open here; the number UPDATE waits for the first one's row lock.
            second_started.set()
            version = await catalog.add_version(session, p.alice, row, entries=[])
            return version.number

    numbers = await asyncio.wait_for(asyncio.gather(first(), second()), timeout=60)
    assert sorted(numbers) == [1, 2]

    # And a burst of commits: all numbers distinct and consecutive.
    async def commit() -> int:
        return (await new_version(db, p.alice, item.id)).number

    burst = await asyncio.wait_for(asyncio.gather(*(commit() for _ in range(8))), timeout=120)
    assert sorted(burst) == list(range(3, 11))
    async with db.read() as session:
        row = await session.get(CatalogItem, item.id)
        assert row is not None
        assert row.next_version == 11


async def test_image_versions(db: Database) -> None:
    p = await people(db)
    venv = await new_item(db, p.alice, "torch-env", kind=IMG)  # image_type venv by default
    container = await new_item(db, p.alice, "cuda", kind=IMG, metadata={"image_type": "container"})
    spec = {"python": "3.11", "requirements": ["torch==2.3", "numpy"]}
    async with db.write() as session:
        v = await catalog.create_version(session, p.alice, IMG, venv.id, metadata=spec)
        same = await catalog.create_version(
            session, p.alice, IMG, venv.id, metadata={"python": "3.11", "requirements": ["numpy", "torch==2.3"]}
        )
        other = await catalog.create_version(session, p.alice, IMG, venv.id, metadata={"python": "3.12"})
        c = await catalog.create_version(session, p.alice, IMG, container.id, metadata={"reference": "nvcr.io/x:1"})
    assert (v.state, c.state) == ("pending", "ready")
    assert v.metadata == {**spec, "image_type": "venv", "system_site_packages": False}
    async with db.read() as session:
        builds = {b.version_id: b for b in (await session.scalars(select(ImageBuild))).all()}
    assert set(builds) == {v.id, same.id, other.id}
    assert builds[v.id].state == "pending"
    assert builds[v.id].env_hash == builds[same.id].env_hash == catalog.env_hash(v.metadata)
    assert builds[other.id].env_hash != builds[v.id].env_hash

    for bad, field in (
        ({"python": "2.7"}, "metadata.python"),
        ({"reference": "x"}, "metadata.reference"),
    ):
        with pytest.raises(ValidationFailed) as exc:
            async with db.write() as session:
                await catalog.create_version(session, p.alice, IMG, venv.id, metadata=bad)
        assert exc.value.details["field"] == field
    with pytest.raises(ValidationFailed) as exc:
        async with db.write() as session:
            await catalog.create_version(session, p.alice, IMG, container.id, metadata={})
    assert exc.value.details["field"] == "metadata.reference"
    # Build specs are immutable; descriptions are not.
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.update_version(session, p.alice, IMG, venv.id, 1, metadata={"python": "3.12"})
    async with db.write() as session:
        updated = await catalog.update_version(session, p.alice, IMG, venv.id, 1, description="CUDA 12")
        assert updated.description == "CUDA 12"
        same_spec = await catalog.update_version(session, p.alice, IMG, venv.id, 1, metadata=spec)
        assert same_spec.metadata == v.metadata


async def test_version_visibility(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "data")
    for _ in range(3):
        await new_version(db, p.alice, item.id)
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item.id, 2, visibility=Visibility.WORKSPACE)

    async def numbers(actor: Any) -> list[int]:
        async with db.read() as session:
            return [v.number for v in (await catalog.list_versions(session, actor, DS, item.id)).items]

    assert await numbers(p.alice) == [3, 2, 1]
    assert await numbers(p.bob) == [2]
    assert await numbers(p.root) == [3, 2, 1]  # metadata of everything
    with pytest.raises(NotFound):
        await numbers(p.carol)
    async with db.read() as session:
        shared = await catalog.get_version(session, p.bob, DS, item.id, 2)
        assert (shared.ref, shared.can_read_content, shared.shared_workspace_name) == ("alice/data:2", True, "alice")
        with pytest.raises(NotFound):
            await catalog.get_version(session, p.bob, DS, item.id, 1)
        with pytest.raises(NotFound):
            await catalog.get_version(session, p.alice, DS, item.id, 9)
        admin_view = await catalog.get_version(session, p.root, DS, item.id, 1)
        assert admin_view.can_read_content is False
        page = await catalog.list_versions(session, p.alice, DS, item.id, limit=2)
        assert [v.number for v in page.items] == [3, 2]
        rest = await catalog.list_versions(session, p.alice, DS, item.id, limit=2, cursor=page.next_cursor)
        assert ([v.number for v in rest.items], rest.next_cursor) == ([1], None)


async def test_share_and_unshare(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "data")
    await new_version(db, p.alice, item.id)

    async def bob_sees() -> bool:
        async with db.read() as session:
            try:
                await catalog.get_version(session, p.bob, DS, item.id, 1)
            except NotFound:
                return False
            return True

    assert not await bob_sees()
    async with db.write() as session:
        view = await catalog.share_version(session, p.alice, DS, item.id, 1, visibility="workspace")
    assert (view.visibility, view.shared_workspace_id) == ("workspace", p.ws)
    assert await bob_sees()
    # alice is not a member of carol's workspace: she cannot share there.
    with pytest.raises(NotFound):
        async with db.write() as session:
            await catalog.share_version(
                session, p.alice, DS, item.id, 1, visibility=Visibility.WORKSPACE, workspace_id=p.carol_ws
            )
    for bad in ("private", "preset", "everyone"):
        with pytest.raises(ValidationFailed):
            async with db.write() as session:
                await catalog.share_version(session, p.alice, DS, item.id, 1, visibility=bad)
    with pytest.raises(Forbidden):  # bob sees it but does not own it
        async with db.write() as session:
            await catalog.share_version(session, p.bob, DS, item.id, 1, visibility=Visibility.PUBLIC)
    async with db.write() as session:
        public = await catalog.share_version(session, p.alice, DS, item.id, 1, visibility=Visibility.PUBLIC)
    assert (public.visibility, public.shared_workspace_id) == ("public", None)
    async with db.read() as session:
        assert (await catalog.get_version(session, p.carol, DS, item.id, 1)).can_read_content
    async with db.write() as session:
        private = await catalog.unshare_version(session, p.alice, DS, item.id, 1)
    assert (private.visibility, private.shared_workspace_id) == ("private", None)
    assert not await bob_sees()
    assert await audit_actions(db, "dataset.version.") == [
        "dataset.version.create",
        "dataset.version.share",
        "dataset.version.share",
        "dataset.version.unshare",
    ]


async def test_presets(db: Database) -> None:
    p = await people(db)
    preset = await new_item(db, p.root, "coco", preset=True)
    version = await new_version(db, p.root, preset.id)
    assert (version.visibility, version.ref) == ("preset", "preset/coco:1")
    async with db.read() as session:
        seen = await catalog.get_version(session, p.carol, DS, preset.id, 1)
        assert seen.can_read_content
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.share_version(session, p.root, DS, preset.id, 1, visibility=Visibility.PUBLIC)
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.unshare_version(session, p.root, DS, preset.id, 1)
    with pytest.raises(Forbidden):
        async with db.write() as session:
            await catalog.create_version(session, p.alice, DS, preset.id)
    with pytest.raises(Forbidden):
        async with db.write() as session:
            await catalog.delete_version(session, p.alice, DS, preset.id, 1)


async def test_delete_version_in_use(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "resnet", kind=ItemKind.MODEL)
    v1 = await new_version(db, p.alice, item.id, kind=ItemKind.MODEL)
    await new_version(db, p.alice, item.id, kind=ItemKind.MODEL)
    seen: list[list[int]] = []

    async def serving(_session: Any, version_ids: list[int]) -> dict[int, list[str]]:
        seen.append(version_ids)
        return {v1.id: ["job 42 (running)", "service web (2 replicas)"]}

    catalog.VERSION_USERS.append(serving)
    try:
        with pytest.raises(InUse) as exc:
            async with db.write() as session:
                await catalog.delete_version(session, p.alice, ItemKind.MODEL, item.id, 1)
        assert exc.value.message == "version resnet:1 is used by job 42 (running), service web (2 replicas)"
        assert seen == [[v1.id]]
    finally:
        catalog.VERSION_USERS.remove(serving)
    with pytest.raises(NotFound):
        async with db.write() as session:
            await catalog.delete_version(session, p.bob, ItemKind.MODEL, item.id, 1)
    async with db.write() as session:
        await catalog.delete_version(session, p.alice, ItemKind.MODEL, item.id, 1)
    async with db.read() as session:
        left = (await session.scalars(select(CatalogVersion.number))).all()
    assert left == [2]
    # Numbers are never reused.
    assert (await new_version(db, p.alice, item.id, kind=ItemKind.MODEL)).number == 3
    assert "model.version.delete" in await audit_actions(db, "model.version.")


async def test_update_version(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "resnet", kind=ItemKind.MODEL)
    await new_version(db, p.alice, item.id, kind=ItemKind.MODEL)
    async with db.write() as session:
        view = await catalog.update_version(
            session, p.alice, ItemKind.MODEL, item.id, 1, description="best", metadata={"metrics": {"acc": 0.9}}
        )
    assert view.description == "best"
    assert view.metadata["metrics"] == {"acc": 0.9}
    with pytest.raises(ValidationFailed) as exc:
        async with db.write() as session:
            await catalog.update_version(
                session, p.alice, ItemKind.MODEL, item.id, 1, metadata={"metrics": {"acc": "high"}}
            )
    assert exc.value.details["field"].startswith("metadata.metrics")
    with pytest.raises(Forbidden):
        async with db.write() as session:
            await catalog.update_version(session, p.root, ItemKind.MODEL, item.id, 1, description="admin")
    assert await audit_actions(db, "model.version.update") == ["model.version.update"]
