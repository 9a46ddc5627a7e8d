"""Store upkeep: which blobs are referenced, garbage collection that is safe while uploads run, the leased
GC controller, and fsck."""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path

import pytest

from aicenter.config import Settings
from aicenter.controllers.store_gc import StoreGcController
from aicenter.core.errors import Forbidden
from aicenter.db.engine import Database
from aicenter.services import catalog
from aicenter.storage import BlobStore
from tests.integration.services.catalog_helpers import (
    DS,
    audit_actions,
    entries,
    make_store,
    new_item,
    new_version,
    people,
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return make_store(tmp_path)


def age(store: BlobStore, data: bytes, seconds_ago: float) -> None:
    at = time.time() - seconds_ago
    os.utime(store.path(sha(data)), (at, at))


def stored(store: BlobStore) -> set[str]:
    return {blob for blob, _, _ in store.iter_blobs()}


async def test_referenced_blobs_are_version_files_and_hashes_open_uploads_declared(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    await new_version(db, p.alice, item.id, entries(store, {"a": b"aaa", "b/c": b"cc"}))
    async with db.write() as session:
        up = await catalog.start_upload(
            session,
            p.alice,
            store,
            settings,
            DS,
            item.id,
            files=[{"path": "x", "size": 4, "sha256": sha(b"xxxx")}, {"path": "y", "size": 1}],
        )
    async with db.read() as session:
        assert await catalog.referenced_blobs(session) == {sha(b"aaa"): 3, sha(b"cc"): 2, sha(b"xxxx"): 4}
    async with db.write() as session:
        await catalog.abort_upload(session, p.alice, store, up.id)
    async with db.read() as session:
        assert await catalog.referenced_blobs(session) == {sha(b"aaa"): 3, sha(b"cc"): 2}


async def test_gc_deletes_old_unreferenced_blobs_and_keeps_young_and_referenced_ones(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    await new_version(db, p.alice, item.id, entries(store, {"kept": b"referenced"}))
    store.put_bytes(b"old garbage")
    store.put_bytes(b"young garbage")
    grace = settings.gc_grace_s
    age(store, b"referenced", grace * 3)
    age(store, b"old garbage", grace + 60)
    age(store, b"young garbage", grace - 60)

    result = await catalog.run_gc(db, store, settings)
    assert (result.scanned, result.deleted, result.kept_young, result.expired_uploads) == (3, 1, 1, 0)
    assert result.freed_bytes == len(b"old garbage")
    assert stored(store) == {sha(b"referenced"), sha(b"young garbage")}

    result = await catalog.run_gc(db, store, settings, now=time.time() + 120)
    assert result.deleted == 1
    assert stored(store) == {sha(b"referenced")}


async def test_gc_keeps_an_old_unreferenced_blob_that_an_open_upload_counts_on(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    store.put_bytes(b"left over from a deleted version")
    data = b"left over from a deleted version"
    age(store, data, settings.gc_grace_s * 2)

    async with db.write() as session:
        up = await catalog.start_upload(
            session,
            p.alice,
            store,
            settings,
            DS,
            item.id,
            files=[{"path": "f", "size": len(data), "sha256": sha(data)}],
        )
    assert up.needed == [], "the store has it: the upload will not send it"
    # Starting the upload refreshed the blob; age it again so that only the session's reference protects it.
    age(store, data, settings.gc_grace_s * 2)
    result = await catalog.run_gc(db, store, settings)
    assert result.deleted == 0
    assert store.exists(sha(data))

    version = await catalog.commit_upload(db, p.alice, store, settings, up.id)
    assert version.file_count == 1
    with store.open(sha(data)) as f:
        assert f.read() == data


async def test_gc_expires_abandoned_uploads_first_and_then_their_blobs_go(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    data = b"declared by an upload nobody finishes"
    store.put_bytes(data)
    async with db.write() as session:
        up = await catalog.start_upload(
            session,
            p.alice,
            store,
            settings,
            DS,
            item.id,
            files=[{"path": "f", "size": len(data), "sha256": sha(data)}],
        )
    later = time.time() + settings.upload_ttl_s + settings.gc_grace_s + 60
    result = await catalog.run_gc(db, store, settings, now=later)
    assert (result.expired_uploads, result.deleted) == (1, 1)
    async with db.read() as session:
        assert (await catalog.get_upload(session, p.alice, store, up.id)).state == "aborted"
    assert stored(store) == set()


async def test_gc_from_the_api_is_for_platform_admins_and_audited(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    p = await people(db)
    with pytest.raises(Forbidden):
        await catalog.run_gc(db, store, settings, actor=p.alice)
    await catalog.run_gc(db, store, settings, actor=p.root)
    assert await audit_actions(db, "storage.") == ["storage.gc"]


async def test_the_gc_controller_collects_once_per_interval_across_replicas(
    db: Database, store: BlobStore, settings: Settings
) -> None:
    cfg = settings.model_copy(update={"gc_interval_s": 600.0})
    store.put_bytes(b"garbage")
    age(store, b"garbage", cfg.gc_grace_s + 60)
    first = StoreGcController(db, store, cfg, owner="replica-a")
    second = StoreGcController(db, store, cfg, owner="replica-b")
    await first.tick()
    assert first.last is not None
    assert first.last.deleted == 1
    store.put_bytes(b"more garbage")
    age(store, b"more garbage", cfg.gc_grace_s + 60)
    await second.tick()
    assert second.last is None, "the other replica skips: this interval's collection is done"
    await first.tick()
    assert store.exists(sha(b"more garbage")), "the lease holder itself waits for the next interval too"


async def test_fsck_finds_and_quarantines_damaged_blobs(db: Database, store: BlobStore) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    await new_version(db, p.alice, item.id, entries(store, {"good": b"good bytes", "bad": b"bad bytes", "gone": b"x"}))
    bad = store.path(sha(b"bad bytes"))
    os.chmod(bad, 0o644)
    bad.write_bytes(b"rotten bytes")
    store.delete(sha(b"x"))

    with pytest.raises(Forbidden):
        await catalog.run_fsck(db, p.alice, store, repair=False)
    report = await catalog.run_fsck(db, p.root, store, repair=False)
    assert (report.checked, report.missing, report.damaged, report.quarantined) == (
        3,
        [sha(b"x")],
        [sha(b"bad bytes")],
        [],
    )
    assert bad.exists(), "without repair nothing moves"
    report = await catalog.run_fsck(db, p.root, store, repair=True)
    assert report.quarantined == [sha(b"bad bytes")]
    assert not bad.exists()
    assert len(list(store.quarantine_dir.iterdir())) == 1
    assert await audit_actions(db, "storage.") == ["storage.fsck", "storage.fsck"]
