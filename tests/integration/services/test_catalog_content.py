"""Content of versions: file lists, files, archive entries, previews, the content rule, and copy."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from aicenter.core.catalog import ItemKind, Visibility
from aicenter.core.errors import Conflict, Forbidden, NotFound, QuotaExceeded, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion, VersionFile
from aicenter.services import catalog
from aicenter.storage import BlobStore
from tests.integration.services.catalog_helpers import (
    DS,
    People,
    audit_actions,
    entries,
    make_store,
    new_item,
    new_version,
    people,
)

FILES = {
    "README.md": b"# Cats\nSome cats.\n",
    "data/train.csv": b"name,label\n" + b"".join(b"cat%d,%d\n" % (i, i % 2) for i in range(100)),
    "data/test.tsv": b"a\tb\n1\t2\n",
    "images/cat.PNG": b"\x89PNG\r\n\x1a\n" + b"\x00" * 32,
    "images/dog.jpg": b"\xff\xd8\xff" + b"\x01" * 16,
    "model.bin": b"\x00\x01\x02\x03" * 10,
    "under_score/a.txt": b"a",
    "underXscore/b.txt": b"b",
}


async def _dataset(db: Database, p: People, store: BlobStore) -> int:
    item = await new_item(db, p.alice, "cats")
    await new_version(db, p.alice, item.id, entries(store, FILES))
    return item.id


async def test_list_files_pages_and_prefix(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    item_id = await _dataset(db, p, store)
    seen: list[str] = []
    cursor: str | None = None
    async with db.read() as session:
        while True:
            page = await catalog.list_files(session, p.alice, DS, item_id, 1, limit=3, cursor=cursor)
            seen.extend(f.path for f in page.items)
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == sorted(FILES)
        images = await catalog.list_files(session, p.alice, DS, item_id, 1, prefix="images/")
        assert [f.path for f in images.items] == ["images/cat.PNG", "images/dog.jpg"]
        # The prefix is literal: "_" is not a wildcard.
        literal = await catalog.list_files(session, p.alice, DS, item_id, 1, prefix="under_")
        assert [f.path for f in literal.items] == ["under_score/a.txt"]
        readme = (await catalog.list_files(session, p.alice, DS, item_id, 1, prefix="README")).items[0]
        assert (readme.size, readme.mode) == (len(FILES["README.md"]), 0o644)
        with pytest.raises(ValidationFailed):
            await catalog.list_files(session, p.alice, DS, item_id, 1, limit=1001)


async def test_get_file_and_archive_entries(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    item_id = await _dataset(db, p, store)
    async with db.read() as session:
        view, blob, st = await catalog.get_file(session, p.alice, store, DS, item_id, 1, "data/test.tsv")
        assert blob.read_bytes() == FILES["data/test.tsv"]
        assert blob == store.path(view.sha256)
        assert st.st_size == len(FILES["data/test.tsv"])
        for bad in ("nope.txt", "../etc/passwd", "/README.md", "data"):
            with pytest.raises(NotFound):
                await catalog.get_file(session, p.alice, store, DS, item_id, 1, bad)
        everything = await catalog.archive_entries(session, p.alice, DS, item_id, 1)
        assert [e.path for e in everything] == sorted(FILES)
        some = await catalog.archive_entries(session, p.alice, DS, item_id, 1, paths=["model.bin", "README.md"])
        assert [e.path for e in some] == ["README.md", "model.bin"]
        with pytest.raises(NotFound) as exc:
            await catalog.archive_entries(session, p.alice, DS, item_id, 1, paths=["README.md", "ghost.txt"])
        assert "ghost.txt" in exc.value.message


async def test_previews(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    big_text = ("é" * 40_000).encode()  # 80,000 bytes: cut at 64 KiB, inside no character (2-byte chars)
    odd_cut = b"a" + ("é" * 40_000).encode()  # the 64 KiB limit cuts a character in two
    files = {**FILES, "big.txt": big_text, "odd.txt": odd_cut, "latin1.txt": b"caf\xe9 " * 10}
    item = await new_item(db, p.alice, "previews")
    await new_version(db, p.alice, item.id, entries(store, files))

    async def show(path: str) -> Any:
        async with db.read() as session:
            return await catalog.preview(session, p.alice, store, DS, item.id, 1, path)

    readme = await show("README.md")
    assert (readme.kind, readme.text, readme.rows) == ("text", "# Cats\nSome cats.\n", None)
    csv_preview = await show("data/train.csv")
    assert csv_preview.kind == "csv"
    assert csv_preview.rows is not None
    assert len(csv_preview.rows) == 20
    assert csv_preview.rows[:2] == [["name", "label"], ["cat0", "0"]]
    tsv = await show("data/test.tsv")
    assert tsv.rows == [["a", "b"], ["1", "2"]]
    png = await show("images/cat.PNG")
    assert (png.kind, png.media_type, png.text) == ("image", "image/png", None)
    assert (await show("images/dog.jpg")).media_type == "image/jpeg"
    assert (await show("model.bin")).kind == "binary"
    assert (await show("latin1.txt")).kind == "binary"
    big = await show("big.txt")
    assert big.kind == "text"
    assert len(big.text.encode()) == 64 * 1024
    odd = await show("odd.txt")
    assert odd.kind == "text"
    assert odd.text.endswith("\ufffd")
    with pytest.raises(NotFound):
        await show("missing.txt")


async def test_content_rule(db: Database, tmp_path: Path) -> None:
    """Admins see the metadata of a private version but not its content; strangers see nothing."""
    p = await people(db)
    store = make_store(tmp_path)
    item_id = await _dataset(db, p, store)

    async def every_content_call(actor: Any) -> list[type[Exception]]:
        errors: list[type[Exception]] = []
        calls = [
            lambda s: catalog.list_files(s, actor, DS, item_id, 1),
            lambda s: catalog.get_file(s, actor, store, DS, item_id, 1, "README.md"),
            lambda s: catalog.archive_entries(s, actor, DS, item_id, 1),
            lambda s: catalog.preview(s, actor, store, DS, item_id, 1, "README.md"),
            lambda s: catalog.copy_version(s, actor, DS, item_id, 1, name="stolen"),
        ]
        for call in calls:
            try:
                async with db.write() as session:
                    await call(session)
            except (Forbidden, NotFound) as exc:
                errors.append(type(exc))
            else:
                errors.append(type(None))
        return errors

    async with db.read() as session:
        meta = await catalog.get_version(session, p.root, DS, item_id, 1)
    assert (meta.file_count, meta.can_read_content) == (len(FILES), False)
    assert await every_content_call(p.root) == [Forbidden] * 5
    assert await every_content_call(p.carol) == [NotFound] * 5
    assert await every_content_call(p.bob) == [NotFound] * 5
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item_id, 1, visibility=Visibility.WORKSPACE)
    assert await every_content_call(p.bob) == [type(None)] * 5
    assert await every_content_call(p.root) == [Forbidden] * 5  # not a member of alice's workspace
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item_id, 1, visibility=Visibility.PUBLIC)
    assert await every_content_call(p.root) == [type(None)] * 5
    async with db.read() as session:
        assert (await catalog.get_version(session, p.root, DS, item_id, 1)).can_read_content


async def _count(db: Database, model: Any) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


def _blob_count(store: BlobStore) -> int:
    return sum(1 for path in store.blobs_dir.rglob("*") if path.is_file())


async def test_copy_shares_blobs(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    item_id = await _dataset(db, p, store)
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item_id, 1, visibility=Visibility.WORKSPACE)
        await catalog.update_item(session, p.alice, DS, item_id, tags=["pets"], metadata={"data_type": "image"})
    blobs_before = _blob_count(store)
    async with db.write() as session:
        copy = await catalog.copy_version(session, p.bob, DS, item_id, 1, description="mine")
    assert (copy.item_name, copy.number, copy.visibility, copy.owner_name) == ("cats", 1, "private", "bob")
    assert copy.description == "mine"
    async with db.read() as session:
        source = await session.scalar(select(CatalogVersion).where(CatalogVersion.item_id == item_id))
        target_item = await session.get(CatalogItem, copy.item_id)
        assert source is not None
        assert target_item is not None
        assert copy.copied_from_id == source.id
        assert (copy.file_count, copy.size_bytes, copy.manifest_sha256) == (
            source.file_count,
            source.size_bytes,
            source.manifest_sha256,
        )
        assert (target_item.workspace_id, target_item.tags, target_item.meta) == (
            p.bob_ws,
            ["pets"],
            {"data_type": "image"},
        )

        def files_of(version_id: int) -> Any:
            return select(VersionFile.path, VersionFile.size, VersionFile.sha256, VersionFile.mode).where(
                VersionFile.version_id == version_id
            )

        original = sorted((await session.execute(files_of(source.id))).all())
        copied = sorted((await session.execute(files_of(copy.id))).all())
        assert copied == original
    assert _blob_count(store) == blobs_before  # no bytes copied

    # A second copy lands in the same item as version 2; a new name makes another item in a chosen workspace.
    async with db.write() as session:
        again = await catalog.copy_version(session, p.bob, DS, item_id, 1)
        other = await catalog.copy_version(session, p.bob, DS, item_id, 1, name="cats-for-alice", workspace_id=p.ws)
    assert (again.item_id, again.number) == (copy.item_id, 2)
    async with db.read() as session:
        assert (await catalog.get_item(session, p.bob, DS, other.item_id)).workspace_id == p.ws
    with pytest.raises(Conflict):  # bob's "cats" lives in his own workspace
        async with db.write() as session:
            await catalog.copy_version(session, p.bob, DS, item_id, 1, workspace_id=p.ws)
    with pytest.raises(NotFound):  # not a member of carol's workspace
        async with db.write() as session:
            await catalog.copy_version(session, p.bob, DS, item_id, 1, name="x", workspace_id=p.carol_ws)
    with pytest.raises(ValidationFailed):
        async with db.write() as session:
            await catalog.copy_version(session, p.bob, DS, item_id, 1, name="Bad Name")
    assert await audit_actions(db, "dataset.version.copy") == ["dataset.version.copy"] * 3
    # The copy survives the deletion of its source.
    async with db.write() as session:
        await catalog.delete_item(session, p.alice, DS, item_id)
    async with db.read() as session:
        page = await catalog.list_files(session, p.bob, DS, copy.item_id, 1)
    assert [f.path for f in page.items] == sorted(FILES)


async def test_copy_checks_quota_and_changes_nothing_when_refused(db: Database, tmp_path: Path) -> None:
    p = await people(db)
    store = make_store(tmp_path)
    item_id = await _dataset(db, p, store)
    size = sum(len(b) for b in FILES.values())
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item_id, 1, visibility=Visibility.PUBLIC)
        await catalog.set_storage_quota(session, p.root, p.carol_ws, size - 1)
    items, versions, files = (
        await _count(db, CatalogItem),
        await _count(db, CatalogVersion),
        await _count(db, VersionFile),
    )
    with pytest.raises(QuotaExceeded) as exc:
        async with db.write() as session:
            await catalog.copy_version(session, p.carol, DS, item_id, 1)
    assert exc.value.details == {"limit": size - 1, "used": 0, "requested": size, "over": 1}
    assert (await _count(db, CatalogItem), await _count(db, CatalogVersion), await _count(db, VersionFile)) == (
        items,
        versions,
        files,
    )
    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.carol_ws, size)
    async with db.write() as session:
        await catalog.copy_version(session, p.carol, DS, item_id, 1)
    async with db.read() as session:
        usage = await catalog.storage_usage(session, p.carol, p.carol_ws)
    assert usage.used_bytes == size  # copies count in full


async def test_copy_of_an_image_version_queues_its_own_build(db: Database) -> None:
    p = await people(db)
    img = await new_item(db, p.alice, "env", kind=ItemKind.IMAGE)
    async with db.write() as session:
        await catalog.create_version(session, p.alice, ItemKind.IMAGE, img.id, metadata={"python": "3.11"})
        await catalog.share_version(session, p.alice, ItemKind.IMAGE, img.id, 1, visibility=Visibility.PUBLIC)
    async with db.write() as session:
        copy = await catalog.copy_version(session, p.carol, ItemKind.IMAGE, img.id, 1)
    assert (copy.state, copy.metadata["python"]) == ("pending", "3.11")
    other = await new_item(db, p.carol, "ctr", kind=ItemKind.IMAGE, metadata={"image_type": "container"})
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.copy_version(session, p.carol, ItemKind.IMAGE, img.id, 1, name=other.name)
