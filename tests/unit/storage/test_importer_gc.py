from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.storage import BlobStore, FileEntry, collect_garbage, fsck, scan_directory
from tests.unit.storage.conftest import blob_names, sha


def test_scan_directory_stores_every_file_sorted(store: BlobStore, tmp_path: Path) -> None:
    root = tmp_path / "out"
    (root / "b" / "c").mkdir(parents=True)
    (root / "empty").mkdir()
    (root / "a.txt").write_bytes(b"a")
    (root / "b" / "c" / "model.pt").write_bytes(b"weights")
    (root / "b" / "run.sh").write_bytes(b"#!/bin/sh\n")
    os.chmod(root / "b" / "run.sh", 0o755)  # noqa: S103 - an executable script, as a job would write it
    (root / "b" / "dup.txt").write_bytes(b"a")
    assert scan_directory(root, store) == [
        FileEntry("a.txt", 1, sha(b"a"), 0o644),
        FileEntry("b/c/model.pt", 7, sha(b"weights"), 0o644),
        FileEntry("b/dup.txt", 1, sha(b"a"), 0o644),
        FileEntry("b/run.sh", 10, sha(b"#!/bin/sh\n"), 0o755),
    ]
    assert blob_names(store) == {sha(b"a"), sha(b"weights"), sha(b"#!/bin/sh\n")}
    assert (root / "a.txt").exists()  # copied, not moved


def test_scan_directory_refuses_a_symlink_before_storing_anything(store: BlobStore, tmp_path: Path) -> None:
    root = tmp_path / "out"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_bytes(b"a")
    (root / "sub" / "passwd").symlink_to("/etc/passwd")
    with pytest.raises(ValidationFailed, match="sub/passwd is a symbolic link"):
        scan_directory(root, store)
    assert blob_names(store) == set()


def test_scan_directory_refuses_sockets_and_fifos(store: BlobStore, tmp_path: Path) -> None:
    root = tmp_path / "out"
    root.mkdir()
    os.mkfifo(root / "pipe")
    with pytest.raises(ValidationFailed, match="pipe is not a regular file"):
        scan_directory(root, store)
    os.unlink(root / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(root / "s"))
        with pytest.raises(ValidationFailed, match="s is not a regular file"):
            scan_directory(root, store)
    finally:
        sock.close()
    with pytest.raises(ValidationFailed, match="is not a directory"):
        scan_directory(root / "missing", store)


def test_gc_keeps_referenced_and_young_blobs(store: BlobStore) -> None:
    now = time.time()
    ref, _ = store.put_bytes(b"referenced")
    young, _ = store.put_bytes(b"young")
    old, _ = store.put_bytes(b"old!")
    for h in (ref, old):
        os.utime(store.path(h), (now - 7200, now - 7200))
    stale_tmp = store.tmp_path()
    stale_tmp.write_bytes(b"crashed write")
    os.utime(stale_tmp, (now - 7200, now - 7200))
    fresh_tmp = store.tmp_path()
    fresh_tmp.write_bytes(b"in flight")
    report = collect_garbage(store, [ref], grace_s=3600, now=now)
    assert (report.scanned, report.deleted, report.freed_bytes, report.kept_young) == (3, 1, 4, 1)
    assert blob_names(store) == {ref, young}
    assert not stale_tmp.exists()
    assert fresh_tmp.exists()
    report = collect_garbage(store, {ref}, grace_s=3600, now=now + 7200)
    assert (report.deleted, blob_names(store)) == (1, {ref})


def test_gc_puts_back_a_blob_refreshed_while_it_was_taken(store: BlobStore, monkeypatch: pytest.MonkeyPatch) -> None:
    h, size = store.put_bytes(b"about to be reused")
    # The walk saw an old mtime; a commit deduplicated the blob (refreshing it) before the GC took it aside.
    monkeypatch.setattr(store, "iter_blobs", lambda: iter([(h, size, 1000.0)]))
    report = collect_garbage(store, set(), grace_s=3600, now=time.time())
    assert (report.deleted, report.kept_young) == (0, 1)
    assert store.exists(h)
    assert list(store.tmp_dir.iterdir()) == []


def test_fsck_finds_damaged_and_missing_blobs_and_quarantines(store: BlobStore) -> None:
    good, _ = store.put_bytes(b"good")
    bad, _ = store.put_bytes(b"will rot")
    short, _ = store.put_bytes(b"will shrink")
    for h, content in ((bad, b"will r0t"), (short, b"will")):
        os.chmod(store.path(h), 0o644)
        store.path(h).write_bytes(content)
    gone = sha(b"never stored")
    referenced = {good: 4, bad: 8, short: 11, gone: 12}
    report = fsck(store, referenced, repair=False)
    assert report.checked == 4
    assert report.missing == [gone]
    assert report.damaged == sorted([bad, short])
    assert report.quarantined == []
    report = fsck(store, referenced, repair=True)
    assert report.quarantined == sorted([bad, short])
    assert blob_names(store) == {good}
    assert len(list(store.quarantine_dir.iterdir())) == 2
    assert fsck(store, referenced, repair=False).missing == sorted([bad, short, gone])
