"""Uploads: parts in any order and in parallel, bundles, commit (idempotent, crash-safe), dedup, abort, expiry,
hash mismatches, incomplete commits, isolation between users, validation, quota, archives."""

from __future__ import annotations

import asyncio
import hashlib
import io
import os
import tarfile
import time
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from aicenter.config import Settings
from aicenter.core.clock import utcnow
from aicenter.core.errors import (
    Conflict,
    HashMismatch,
    NotFound,
    QuotaExceeded,
    UnsafeArchive,
    UploadIncomplete,
    ValidationFailed,
)
from aicenter.db.engine import Database
from aicenter.db.models import CatalogVersion, UploadSession, VersionFile
from aicenter.services import catalog
from aicenter.services.catalog import _uploads
from aicenter.services.context import Actor
from aicenter.storage import BlobStore
from tests.integration.services.catalog_helpers import DS, audit_actions, make_store, new_item, people

PART = 64 * 1024  # the smallest part size settings allow: a 200 KiB file has 4 parts


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def chunks(data: bytes, size: int = 16 * 1024) -> AsyncIterator[bytes]:
    for start in range(0, len(data), size):
        yield data[start : start + size]


def bundle(files: Mapping[int, bytes]) -> bytes:
    return b"".join(f"{i:016x}{len(data):016x}{0:016x}".encode() + data for i, data in files.items())


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return make_store(tmp_path)


@pytest.fixture
def cfg(settings: Settings) -> Settings:
    return settings.model_copy(update={"upload_part_size": PART})


def declare(files: Mapping[str, bytes], *, hashes: bool = True) -> list[dict[str, Any]]:
    return [{"path": p, "size": len(d), **({"sha256": sha(d)} if hashes else {})} for p, d in files.items()]


async def start(
    db: Database, actor: Actor, store: BlobStore, cfg: Settings, item_id: int, files: list[dict[str, Any]], **kw: Any
) -> catalog.UploadView:
    async with db.write() as session:
        return await catalog.start_upload(session, actor, store, cfg, DS, item_id, files=files, **kw)


async def get(db: Database, actor: Actor, store: BlobStore, upload_id: int) -> catalog.UploadView:
    async with db.read() as session:
        return await catalog.get_upload(session, actor, store, upload_id)


async def send_part(
    db: Database, actor: Actor, store: BlobStore, upload_id: int, index: int, part: int, data: bytes
) -> None:
    async with db.read() as session:
        target = await catalog.part_target(session, actor, upload_id, index, part)
    piece = data[part * PART : (part + 1) * PART]
    await catalog.receive_part(store, target, sha(piece), chunks(piece))


async def send_bundle(
    db: Database, actor: Actor, store: BlobStore, upload_id: int, files: Mapping[int, bytes]
) -> list[int]:
    async with db.read() as session:
        target = await catalog.bundle_target(session, actor, upload_id)
    return await catalog.receive_bundle(store, target, chunks(bundle(files), 1000))


async def commit(db: Database, actor: Actor, store: BlobStore, cfg: Settings, upload_id: int) -> catalog.VersionView:
    return await catalog.commit_upload(db, actor, store, cfg, upload_id)


async def read_back(db: Database, store: BlobStore, version_id: int) -> dict[str, bytes]:
    async with db.read() as session:
        rows = (await session.scalars(select(VersionFile).where(VersionFile.version_id == version_id))).all()
    out = {}
    for row in rows:
        with store.open(row.sha256) as f:
            out[row.path] = f.read()
    return out


def blob_count(store: BlobStore) -> int:
    return sum(1 for _ in store.iter_blobs())


async def count(db: Database, model: Any) -> int:
    async with db.read() as session:
        return int(await session.scalar(select(func.count()).select_from(model)) or 0)


FILES = {
    "big.bin": os.urandom(3 * PART + 1000),  # 4 parts, the last short
    "a.txt": b"alpha\n",
    "dir/b.txt": b"beta\n" * 100,
    "empty.txt": b"",
    "dir/copy-of-a.txt": b"alpha\n",  # same content as a.txt: sent once
}


async def test_parts_out_of_order_in_parallel_and_bundles_commit_a_version_that_reads_back(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES), description="first", metadata=None)
    paths = list(FILES)
    assert up.state == "open"
    assert up.needed == [0, 1, 2, 3], "the second file with a.txt's content is not sent"
    assert (up.file_count, up.total_bytes, up.part_size) == (5, sum(map(len, FILES.values())), PART)
    assert [m["parts"] for m in up.missing] == [[0, 1, 2, 3], [0], [0], [0]]
    assert up.expires_at > utcnow()

    big = FILES["big.bin"]
    # Parts last to first, all at once.
    await asyncio.gather(*(send_part(db, p.alice, store, up.id, 0, part, big) for part in (3, 2, 1, 0)))
    await send_part(db, p.alice, store, up.id, 0, 2, big)  # a resent part is accepted
    after_parts = await get(db, p.alice, store, up.id)
    assert [m["index"] for m in after_parts.missing] == [1, 2, 3]
    received = await send_bundle(db, p.alice, store, up.id, {i: FILES[paths[i]] for i in (1, 2, 3)})
    assert sorted(received) == [1, 2, 3]
    assert (await get(db, p.alice, store, up.id)).missing == []

    version = await commit(db, p.alice, store, cfg, up.id)
    assert (version.number, version.file_count, version.size_bytes) == (1, 5, up.total_bytes)
    assert version.description == "first"
    assert await read_back(db, store, version.id) == FILES
    assert not (store.staging_dir / str(up.id)).exists(), "staging is removed after the commit"

    again = await commit(db, p.alice, store, cfg, up.id)
    assert again.id == version.id, "a retried commit answers with the same version"
    assert await count(db, CatalogVersion) == 1
    done = await get(db, p.alice, store, up.id)
    assert (done.state, done.version_id, done.missing) == ("committed", version.id, [])
    assert await audit_actions(db, "dataset.") == ["dataset.create", "dataset.upload.start", "dataset.version.create"]


async def test_dedup_a_second_upload_of_the_same_files_sends_nothing(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    await asyncio.gather(*(send_part(db, p.alice, store, up.id, 0, part, FILES["big.bin"]) for part in range(4)))
    await send_bundle(db, p.alice, store, up.id, {1: FILES["a.txt"], 2: FILES["dir/b.txt"], 3: b""})
    await commit(db, p.alice, store, cfg, up.id)
    blobs = blob_count(store)
    assert blobs == 4

    # Bob uploads the same bytes into his own item: nothing to send, nothing new stored.
    other = await new_item(db, p.bob, "mirror")
    up2 = await start(db, p.bob, store, cfg, other.id, declare(FILES))
    assert (up2.needed, up2.missing) == ([], [])
    version = await commit(db, p.bob, store, cfg, up2.id)
    assert await read_back(db, store, version.id) == FILES
    assert blob_count(store) == blobs


async def test_files_without_declared_hashes_are_all_sent(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    files = {"x.txt": b"x" * 10, "y.txt": b"x" * 10}
    up = await start(db, p.alice, store, cfg, item.id, declare(files, hashes=False))
    assert up.needed == [0, 1]
    await send_bundle(db, p.alice, store, up.id, {0: files["x.txt"], 1: files["y.txt"]})
    version = await commit(db, p.alice, store, cfg, up.id)
    assert await read_back(db, store, version.id) == files
    assert blob_count(store) == 1


async def test_abort_leaves_nothing(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    await send_part(db, p.alice, store, up.id, 0, 1, FILES["big.bin"])
    await send_bundle(db, p.alice, store, up.id, {1: FILES["a.txt"]})
    assert (store.staging_dir / str(up.id)).exists()

    async with db.write() as session:
        await catalog.abort_upload(session, p.alice, store, up.id)
    assert not (store.staging_dir / str(up.id)).exists()
    assert blob_count(store) == 0
    assert await count(db, CatalogVersion) == 0
    assert (await get(db, p.alice, store, up.id)).state == "aborted"
    async with db.write() as session:
        await catalog.abort_upload(session, p.alice, store, up.id)  # idempotent
    with pytest.raises(Conflict, match="aborted"):
        await commit(db, p.alice, store, cfg, up.id)
    with pytest.raises(Conflict, match="aborted"):
        await send_part(db, p.alice, store, up.id, 0, 0, FILES["big.bin"])
    assert await audit_actions(db, "dataset.upload") == ["dataset.upload.start", "dataset.upload.abort"]


async def test_committed_upload_cannot_be_aborted(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare({"a": b"a"}))
    await send_bundle(db, p.alice, store, up.id, {0: b"a"})
    await commit(db, p.alice, store, cfg, up.id)
    async with db.write() as session:
        with pytest.raises(Conflict, match="committed"):
            await catalog.abort_upload(session, p.alice, store, up.id)


async def test_expired_sessions_and_orphan_staging_are_swept(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    await send_part(db, p.alice, store, up.id, 0, 0, FILES["big.bin"])
    keep = await start(db, p.alice, store, cfg, item.id, declare({"k": b"k"}))
    # Staging directories without an open session: an old one is swept, a young one may belong to an upload
    # whose row is not committed yet and stays.
    staging = store.staging_dir
    (staging / "999001").mkdir()
    (staging / "999002").mkdir()
    old = time.time() - _uploads.ORPHAN_STAGING_AGE_S - 60
    os.utime(staging / "999001", (old, old))

    assert await catalog.expire_uploads(db, store) == 0, "nothing has expired yet"
    assert not (staging / "999001").exists()
    assert (staging / "999002").exists()

    async with db.write() as session:
        row = await session.get(UploadSession, up.id)
        assert row is not None
        row.expires_at = utcnow() - timedelta(seconds=1)
    with pytest.raises(Conflict, match="expired"):
        await send_part(db, p.alice, store, up.id, 0, 1, FILES["big.bin"])
    with pytest.raises(Conflict, match="expired"):
        await commit(db, p.alice, store, cfg, up.id)

    assert await catalog.expire_uploads(db, store) == 1
    assert (await get(db, p.alice, store, up.id)).state == "aborted"
    assert not (staging / str(up.id)).exists()
    assert (staging / str(keep.id)).exists(), "an open session keeps its staging"
    assert await catalog.expire_uploads(db, store, now=utcnow()) == 0, "idempotent"
    assert await catalog.expire_uploads(db, store, now=utcnow() + timedelta(seconds=cfg.upload_ttl_s + 1)) == 1


async def test_part_hash_mismatch_is_refused_and_the_part_stays_missing(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    big = FILES["big.bin"]
    async with db.read() as session:
        target = await catalog.part_target(session, p.alice, up.id, 0, 1)
    piece = big[PART : 2 * PART]
    with pytest.raises(HashMismatch):
        await catalog.receive_part(store, target, sha(b"something else"), chunks(piece))
    for part in (0, 2, 3):
        await send_part(db, p.alice, store, up.id, 0, part, big)
    await send_bundle(db, p.alice, store, up.id, {1: FILES["a.txt"], 2: FILES["dir/b.txt"]})
    view = await get(db, p.alice, store, up.id)
    assert view.missing == [
        {"index": 0, "path": "big.bin", "parts": [1]},
        {"index": 3, "path": "empty.txt", "parts": [0]},
    ]

    with pytest.raises(UploadIncomplete) as exc:
        await commit(db, p.alice, store, cfg, up.id)
    assert exc.value.details["missing"] == view.missing
    assert "big.bin" in exc.value.message
    assert "empty.txt" in exc.value.message
    assert await count(db, CatalogVersion) == 0

    await send_part(db, p.alice, store, up.id, 0, 1, big)
    await send_bundle(db, p.alice, store, up.id, {3: b""})
    version = await commit(db, p.alice, store, cfg, up.id)
    assert await read_back(db, store, version.id) == FILES


async def test_a_file_whose_bytes_do_not_match_its_declared_hash_fails_the_commit(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    big = FILES["big.bin"]
    lying = [{"path": "big.bin", "size": len(big), "sha256": sha(b"not these bytes")}]
    up = await start(db, p.alice, store, cfg, item.id, lying)
    # Every part matches its own hash; only the whole file does not match the declaration.
    await asyncio.gather(*(send_part(db, p.alice, store, up.id, 0, part, big) for part in range(4)))
    with pytest.raises(HashMismatch):
        await commit(db, p.alice, store, cfg, up.id)
    assert await count(db, CatalogVersion) == 0
    assert not store.exists(sha(big))


async def test_parts_are_authorized(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    async with db.read() as session:
        with pytest.raises(ValidationFailed) as exc:
            await catalog.part_target(session, p.alice, up.id, 4, 0)  # the copy of a.txt is not needed
        assert exc.value.details["field"] == "index"
        with pytest.raises(ValidationFailed):
            await catalog.part_target(session, p.alice, up.id, 9, 0)
        with pytest.raises(ValidationFailed) as exc:
            await catalog.part_target(session, p.alice, up.id, 0, 4)
        assert exc.value.details["field"] == "part"
        bundle_target = await catalog.bundle_target(session, p.alice, up.id)
    assert bundle_target.files == {
        0: (len(FILES["big.bin"]), sha(FILES["big.bin"])),
        1: (6, sha(b"alpha\n")),
        2: (500, sha(b"beta\n" * 100)),
        3: (0, sha(b"")),
    }


async def test_another_users_upload_is_not_found(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare({"a": b"a"}))
    for actor in (p.bob, p.root):
        with pytest.raises(NotFound):
            await get(db, actor, store, up.id)
        with pytest.raises(NotFound):
            await send_part(db, actor, store, up.id, 0, 0, b"a")
        async with db.read() as session:
            with pytest.raises(NotFound):
                await catalog.bundle_target(session, actor, up.id)
        with pytest.raises(NotFound):
            await commit(db, actor, store, cfg, up.id)
        async with db.write() as session:
            with pytest.raises(NotFound):
                await catalog.abort_upload(session, actor, store, up.id)
    # Only the owner may start uploads into an item (bob cannot even see it: it has no shared version).
    with pytest.raises(NotFound):
        await start(db, p.bob, store, cfg, item.id, declare({"a": b"a"}))
    assert (await get(db, p.alice, store, up.id)).state == "open"


@pytest.mark.parametrize(
    ("files", "field", "message"),
    [
        ([{"path": "ok", "size": 1}, {"path": "../etc/passwd", "size": 1}], "files[1].path", ""),
        ([{"path": "/abs", "size": 1}], "files[0].path", ""),
        ([{"path": "a", "size": 1}, {"path": "b", "size": 1}, {"path": "a", "size": 2}], "files[2].path", "duplicate"),
        ([{"path": "a", "size": 1}, {"path": "a/b", "size": 1}], "files[1].path", ""),
        ([{"path": "a", "size": -1}], "files[0].size", ""),
        ([{"path": "a", "size": 1, "sha256": "xyz"}], "files[0].sha256", ""),
        ([{"path": "a", "size": 1, "mode": 0o17777}], "files[0].mode", ""),
        ([{"path": "a", "size": 1, "owner": "root"}], "files[0].owner", ""),
        ([], "files", ""),
    ],
)
async def test_bad_files_are_refused_at_start_and_nothing_is_created(
    db: Database, store: BlobStore, cfg: Settings, files: list[dict[str, Any]], field: str, message: str
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    with pytest.raises(ValidationFailed) as exc:
        await start(db, p.alice, store, cfg, item.id, files)
    assert exc.value.details["field"] == field
    assert message in exc.value.message
    assert await count(db, UploadSession) == 0
    assert list(store.staging_dir.iterdir()) == []


async def test_archive_options_are_checked(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    with pytest.raises(ValidationFailed) as exc:
        await start(db, p.alice, store, cfg, item.id, declare({"a.rar": b"x"}), archive="rar")
    assert exc.value.details["field"] == "archive"
    with pytest.raises(ValidationFailed) as exc:
        await start(db, p.alice, store, cfg, item.id, declare({"a.tar": b"x", "b.tar": b"y"}), archive="tar")
    assert exc.value.details["field"] == "files"
    assert await count(db, UploadSession) == 0


async def test_storage_quota_is_checked_at_start_and_at_commit(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.ws, 1000)
    item = await new_item(db, p.alice, "corpus")
    with pytest.raises(QuotaExceeded) as exc:
        await start(db, p.alice, store, cfg, item.id, declare({"big": b"x" * 1500}))
    assert "by 500 B" in exc.value.message
    assert exc.value.details == {"limit": 1000, "used": 0, "requested": 1500, "over": 500}
    assert await count(db, UploadSession) == 0

    # Two uploads that each fit pass the start; the second to commit no longer fits.
    first = await start(db, p.alice, store, cfg, item.id, declare({"a": b"a" * 600}))
    second = await start(db, p.alice, store, cfg, item.id, declare({"b": b"b" * 600}))
    await send_bundle(db, p.alice, store, first.id, {0: b"a" * 600})
    await send_bundle(db, p.alice, store, second.id, {0: b"b" * 600})
    await commit(db, p.alice, store, cfg, first.id)
    with pytest.raises(QuotaExceeded) as exc:
        await commit(db, p.alice, store, cfg, second.id)
    assert "by 200 B" in exc.value.message
    assert (await get(db, p.alice, store, second.id)).state == "open", "a refused commit can be retried"

    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.ws, 2000)
    version = await commit(db, p.alice, store, cfg, second.id)
    assert await read_back(db, store, version.id) == {"b": b"b" * 600}


def _tar_gz(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """(name, data, symlink target): a regular file when data is given, a symlink when a target is."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type = tarfile.SYMTYPE
                info.linkname = target
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                info.mode = 0o755 if name.endswith(".sh") else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


async def _upload_archive(
    db: Database, actor: Actor, store: BlobStore, cfg: Settings, item_id: int, archive: bytes
) -> catalog.UploadView:
    up = await start(db, actor, store, cfg, item_id, declare({"data.tar.gz": archive}), archive="tar.gz")
    assert up.needed == [0]
    parts = -(-len(archive) // PART)
    await asyncio.gather(*(send_part(db, actor, store, up.id, 0, i, archive) for i in range(parts)))
    return up


async def test_a_tar_gz_archive_upload_is_expanded_into_the_version(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    contents = {"train/x.csv": b"a,b\n1,2\n", "train/big.bin": os.urandom(2 * PART), "run.sh": b"#!/bin/sh\necho\n"}
    archive = _tar_gz([(name, data, None) for name, data in contents.items()])
    up = await _upload_archive(db, p.alice, store, cfg, item.id, archive)
    version = await commit(db, p.alice, store, cfg, up.id)
    assert version.file_count == 3
    assert version.size_bytes == sum(map(len, contents.values()))
    assert await read_back(db, store, version.id) == contents
    async with db.read() as session:
        modes = {row.path: row.mode for row in await session.execute(select(VersionFile.path, VersionFile.mode))}
    assert modes["run.sh"] == 0o755


async def test_an_archive_with_a_symlink_is_refused_and_nothing_is_stored(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    archive = _tar_gz([("ok.txt", b"fine", None), ("link", None, "/etc/passwd")])
    up = await _upload_archive(db, p.alice, store, cfg, item.id, archive)
    with pytest.raises(UnsafeArchive, match="link"):
        await commit(db, p.alice, store, cfg, up.id)
    assert await count(db, CatalogVersion) == 0
    assert (await get(db, p.alice, store, up.id)).state == "open"
    # Headers are checked before any entry is stored, and the archive's own blob, which the commit linked into
    # the store, is deleted with the refusal (its staged copy stays for a retry), not left to garbage collection.
    assert blob_count(store) == 0
    async with db.write() as session:
        await catalog.abort_upload(session, p.alice, store, up.id)
    await catalog.run_gc(db, store, cfg, now=time.time() + cfg.gc_grace_s + 60)
    assert blob_count(store) == 0


async def test_a_crash_between_finalize_and_the_commit_transaction_leaves_nothing_half_written(
    db: Database, store: BlobStore, cfg: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "corpus")
    up = await start(db, p.alice, store, cfg, item.id, declare(FILES))
    await asyncio.gather(*(send_part(db, p.alice, store, up.id, 0, part, FILES["big.bin"]) for part in range(4)))
    await send_bundle(db, p.alice, store, up.id, {1: FILES["a.txt"], 2: FILES["dir/b.txt"], 3: b""})

    real = _uploads.add_version
    calls = 0

    async def fails_once(*args: Any, **kwargs: Any) -> CatalogVersion:
        nonlocal calls
        calls += 1
        if calls == 1:
            await real(*args, **kwargs)  # rows written inside the transaction, then the "crash"
            raise RuntimeError("the server died")
        return await real(*args, **kwargs)

    monkeypatch.setattr(_uploads, "add_version", fails_once)
    with pytest.raises(RuntimeError):
        await commit(db, p.alice, store, cfg, up.id)
    assert await count(db, CatalogVersion) == 0
    assert await count(db, VersionFile) == 0
    assert (await get(db, p.alice, store, up.id)).state == "open"
    assert await audit_actions(db, "dataset.version") == []
    assert store.exists(sha(FILES["big.bin"])), "the finalized blobs wait for the retry (or for GC)"

    version = await commit(db, p.alice, store, cfg, up.id)
    assert version.number == 1, "the failed attempt took no version number"
    assert await read_back(db, store, version.id) == FILES
