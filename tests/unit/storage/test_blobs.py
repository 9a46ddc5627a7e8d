from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from aicenter.core.errors import HashMismatch
from aicenter.storage import BlobStore, blobs, hash_file
from tests.unit.storage.conftest import blob_names, sha


def test_layout_and_directories(store: BlobStore) -> None:
    for d in (store.blobs_dir, store.staging_dir, store.quarantine_dir, store.envs_dir, store.logs_dir):
        assert d.is_dir()
    h = sha(b"x")
    assert store.path(h) == store.blobs_dir / h[:2] / h[2:4] / h


@pytest.mark.parametrize("bad", ["", "../../etc/passwd", "A" * 64, "a" * 65, "g" * 64])
def test_path_refuses_non_hashes(store: BlobStore, bad: str) -> None:
    with pytest.raises(ValueError, match="not a sha256"):
        store.path(bad)


def test_put_bytes_exists_missing_open(store: BlobStore) -> None:
    h, n = store.put_bytes(b"hello")
    assert (h, n) == (sha(b"hello"), 5)
    assert store.exists(h)
    assert store.missing([h, sha(b"other"), h]) == {sha(b"other")}
    with store.open(h) as f:
        assert f.read() == b"hello"
    assert stat.S_IMODE(store.path(h).stat().st_mode) == 0o444
    assert next(iter(store.iter_blobs()))[:2] == (h, 5)
    assert os.listdir(store.tmp_dir) == []


def test_put_file_copies_and_deduplicates(store: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "a.bin"
    src.write_bytes(b"data" * 1000)
    assert store.put_file(src) == (sha(b"data" * 1000), 4000)
    assert src.exists()
    other = tmp_path / "b.bin"
    other.write_bytes(b"data" * 1000)
    assert store.put_file(other, move=True) == (sha(b"data" * 1000), 4000)
    assert not other.exists()  # already stored: the source is dropped
    assert len(blob_names(store)) == 1
    assert os.listdir(store.tmp_dir) == []


def test_put_file_move_renames_without_copy(store: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(3 << 20))
    inode = src.stat().st_ino
    h, n = store.put_file(src, move=True)
    assert n == 3 << 20
    assert h == hash_file(store.path(h))[0]
    assert store.path(h).stat().st_ino == inode
    assert not src.exists()
    assert stat.S_IMODE(store.path(h).stat().st_mode) == 0o444


def test_put_file_with_wrong_hash_stores_nothing(store: BlobStore, tmp_path: Path) -> None:
    src = tmp_path / "a"
    src.write_bytes(b"abc")
    with pytest.raises(HashMismatch) as info:
        store.put_file(src, sha256=sha(b"abd"), move=True)
    assert info.value.details["actual"] == sha(b"abc")
    assert src.exists()
    assert blob_names(store) == set()


def test_put_file_with_known_hash_of_stored_blob_checks_size_only(store: BlobStore, tmp_path: Path) -> None:
    h, _ = store.put_bytes(b"abc")
    src = tmp_path / "a"
    src.write_bytes(b"abcd")
    with pytest.raises(HashMismatch, match="4 bytes"):
        store.put_file(src, sha256=h)
    src.write_bytes(b"abc")
    assert store.put_file(src, sha256=h) == (h, 3)


def test_deduplication_refreshes_an_old_blob(store: BlobStore) -> None:
    h, _ = store.put_bytes(b"old")
    os.utime(store.path(h), (1000, 1000))
    store.put_bytes(b"old")
    assert store.path(h).stat().st_mtime > 1000


def test_delete_and_quarantine(store: BlobStore) -> None:
    h, _ = store.put_bytes(b"a")
    moved = store.quarantine(h)
    assert moved.parent == store.quarantine_dir
    assert moved.name.startswith(h + ".")
    assert not store.exists(h)
    h2, _ = store.put_bytes(b"b")
    store.delete(h2)
    store.delete(h2)  # idempotent
    assert blob_names(store) == set()


def test_iter_blobs_ignores_foreign_files(store: BlobStore) -> None:
    h, _ = store.put_bytes(b"a")
    (store.path(h).parent / "junk").write_text("x")
    (store.blobs_dir / "README").write_text("x")
    assert blob_names(store) == {h}


def test_sync_flushes_the_store_filesystem_once_and_is_a_noop_without_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One syncfs(2) on a descriptor of the store's root per sync; sync(2) only where syncfs fails; neither
    when the store was opened with fsync=False. The libc call is replaced by a recorder: what it flushes cannot
    be observed from a test."""
    synced: list[tuple[int, int]] = []  # (st_dev, st_ino) of the descriptor each syncfs got
    full_syncs: list[None] = []
    result = 0

    def syncfs(fd: int) -> int:
        st = os.fstat(fd)
        synced.append((st.st_dev, st.st_ino))
        return result

    monkeypatch.setattr(blobs, "_syncfs", syncfs)
    monkeypatch.setattr(os, "sync", lambda: full_syncs.append(None))

    durable = BlobStore(tmp_path / "durable", fsync=True)
    for data in (b"x", b"y", b"z"):
        durable.put_bytes(data)
    assert synced == [], "put_bytes must not flush one blob at a time"
    durable.sync()
    root = durable.root.stat()
    assert synced == [(root.st_dev, root.st_ino)]
    assert full_syncs == []

    result = -1  # syncfs missing or failed: fall back to sync(2), once
    durable.sync()
    assert len(synced) == 2
    assert len(full_syncs) == 1

    scratch = BlobStore(tmp_path / "scratch", fsync=False)
    scratch.put_bytes(b"x")
    scratch.sync()
    assert (len(synced), len(full_syncs)) == (2, 1)
