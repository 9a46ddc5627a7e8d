from __future__ import annotations

import io
import os
import shutil
import subprocess
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from aicenter.storage import BlobStore, FileEntry, iter_tar, tar_size
from tests.unit.storage.conftest import sha


def put(store: BlobStore, path: str, data: bytes, mode: int = 0o644) -> FileEntry:
    h, n = store.put_bytes(data)
    return FileEntry(path, n, h, mode)


@pytest.fixture
def entries(store: BlobStore) -> list[FileEntry]:
    return [
        put(store, "README.md", b"# hi\n"),
        put(store, "bin/run.sh", b"#!/bin/sh\necho ok\n", 0o755),
        put(store, "data/empty", b""),
        put(store, "data/big.bin", os.urandom(3 * (1 << 20) + 17)),
        put(store, "deep/" + "x" * 120 + "/名前.txt", b"long and unicode name"),
    ]


def test_round_trip_through_tarfile(store: BlobStore, entries: list[FileEntry]) -> None:
    raw = b"".join(iter_tar(store, entries, chunk=256 * 1024))
    assert len(raw) == tar_size(entries)
    assert len(raw) % tarfile.RECORDSIZE == 0
    assert raw == b"".join(iter_tar(store, entries))  # the chunk size does not change the bytes
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        members = tf.getmembers()
        assert [m.name for m in members] == [e.path for e in entries]
        for member, entry in zip(members, entries, strict=True):
            assert (member.size, member.mode, member.mtime, member.isreg()) == (entry.size, entry.mode, 0, True)
            extracted = tf.extractfile(member)
            assert extracted is not None
            assert sha(extracted.read()) == entry.sha256


@pytest.mark.skipif(shutil.which("tar") is None, reason="GNU tar not installed")
def test_gnu_tar_extracts_it(store: BlobStore, entries: list[FileEntry], tmp_path: Path) -> None:
    archive = tmp_path / "v.tar"
    with open(archive, "wb") as f:
        for piece in iter_tar(store, entries):
            f.write(piece)
    out = tmp_path / "out"
    out.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-C", str(out)], check=True, capture_output=True)
    for entry in entries:
        path = out / entry.path
        assert sha(path.read_bytes()) == entry.sha256
        assert path.stat().st_mode & 0o777 == entry.mode


def test_memory_stays_flat_for_a_large_file(store: BlobStore) -> None:
    size = 512 << 20
    fake_sha = "f" * 64  # iter_tar streams blobs as they are; a sparse file stands in for 512 MiB of content
    path = store.path(fake_sha)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        f.truncate(size)
    chunk = 1 << 20
    tracemalloc.start()
    try:
        total = 0
        largest = 0
        for piece in iter_tar(store, [FileEntry("huge.bin", size, fake_sha)], chunk=chunk):
            total += len(piece)
            largest = max(largest, len(piece))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert largest <= chunk
    assert total == tar_size([FileEntry("huge.bin", size, fake_sha)])
    assert peak < 4 * chunk


@pytest.mark.parametrize("declared", [2, 10])
def test_a_blob_of_the_wrong_length_breaks_the_stream_and_is_quarantined(store: BlobStore, declared: int) -> None:
    good = put(store, "a", b"good")
    entry = put(store, "b", b"abc")
    pieces = iter_tar(store, [good, FileEntry("b", declared, entry.sha256)], chunk=512)
    with pytest.raises(OSError, match="damaged and was quarantined"):
        b"".join(pieces)
    assert not store.exists(entry.sha256)
    assert [p.name.split(".")[0] for p in store.quarantine_dir.iterdir()] == [entry.sha256]
    assert store.exists(good.sha256)


@pytest.mark.parametrize("chunk", [512, 1024, 1536, 4096])
def test_a_header_that_exactly_fills_the_buffer(store: BlobStore, chunk: int) -> None:
    # Regression: an empty file leaves 512 bytes in the buffer, the next header fills a 1024-byte chunk exactly, and
    # the read after it asked for chunk - len(buf) == 0 bytes, which looked like a blob cut short.
    entries = [put(store, "a/empty", b""), put(store, "b/data", os.urandom(3000)), put(store, "c/empty", b"")]
    entries += [put(store, f"d/{n}", os.urandom(n)) for n in (1, 511, 512, 513, 1024)]
    pieces = list(iter_tar(store, entries, chunk=chunk))
    assert all(len(p) <= chunk for p in pieces)
    raw = b"".join(pieces)
    assert raw == b"".join(iter_tar(store, entries))
    assert len(raw) == tar_size(entries)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tf:
        for member, entry in zip(tf.getmembers(), entries, strict=True):
            extracted = tf.extractfile(member)
            assert extracted is not None
            assert sha(extracted.read()) == entry.sha256
