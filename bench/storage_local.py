"""Artifact store on the local disk: big-file put throughput and small-file upload rate. Prints JSON.

- put_file of one file (hash in 1 MiB reads + copy_file_range into the store) against a bare shutil.copyfile of
  the same file, and put_file(move=True) (hash + rename);
- a bundle of many small files (1-64 KiB, streamed in 64 KiB chunks as an HTTP body arrives) written to staging,
  then finalized into the store, then one BlobStore.sync() (syncfs) as a commit does; next to it the disk's
  floor: the same files written with bare create + write + close.

    python bench/storage_local.py [--big-mib 512] [--files 10000] [--dir /path/on/the/disk/to/measure]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path

from aicenter.storage import BlobStore, Staging, bundle_header


def _write_random(path: Path, size: int) -> None:
    block = os.urandom(1 << 20)
    with open(path, "wb") as f:
        for i in range(size >> 20):
            f.write(i.to_bytes(8, "little") + block[8:])  # distinct blocks, no cheap dedup by the disk


def bench_big(root: Path, mib: int) -> dict[str, float]:
    src = root / "big.bin"
    _write_random(src, mib << 20)
    size = mib << 20
    out: dict[str, float] = {"size_mib": mib}

    t = time.perf_counter()
    shutil.copyfile(src, root / "copy.bin")
    out["copyfile_mib_s"] = round(mib / (time.perf_counter() - t), 1)
    os.unlink(root / "copy.bin")

    store = BlobStore(root / "store-big", fsync=False)
    t = time.perf_counter()
    store.put_file(src)
    out["put_file_copy_mib_s"] = round(mib / (time.perf_counter() - t), 1)

    store2 = BlobStore(root / "store-big-move", fsync=False)
    t = time.perf_counter()
    store2.put_file(src, move=True)
    out["put_file_move_mib_s"] = round(mib / (time.perf_counter() - t), 1)
    assert size == sum(s for _, s, _ in store2.iter_blobs())
    return out


async def _chunks(data: bytes, size: int) -> AsyncIterator[bytes]:
    for i in range(0, len(data), size):
        yield data[i : i + size]


def bench_small(root: Path, count: int) -> dict[str, float]:
    rng = random.Random(4)
    pool = os.urandom(64 * 1024)
    files: dict[int, bytes] = {}
    for i in range(count):
        n = rng.randint(1024, 64 * 1024)
        files[i] = i.to_bytes(8, "little") + pool[: n - 8]
    body = b"".join(bundle_header(i, len(d)) + d for i, d in files.items())
    declared = {i: (len(d), None) for i, d in files.items()}
    # The disk's floor: the same files written with plain create + write + close, no hashing, renames or links.
    plain = root / "plain"
    plain.mkdir()
    t = time.perf_counter()
    for i, d in files.items():
        fd = os.open(plain / str(i), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        os.write(fd, d)
        os.close(fd)
    baseline = count / (time.perf_counter() - t)
    shutil.rmtree(plain)

    store = BlobStore(root / "store-small", fsync=True)
    staging = Staging(store)
    staging.create(1)

    t0 = time.perf_counter()
    received = asyncio.run(staging.write_bundle(1, declared, _chunks(body, 64 * 1024)))
    t1 = time.perf_counter()
    result = staging.finalize(1, [(i, len(d), None) for i, d in files.items()], part_size=16 << 20)
    t2 = time.perf_counter()
    store.sync()
    t3 = time.perf_counter()
    staging.remove(1)
    assert len(received) == count == len(result)
    return {
        "files": count,
        "baseline_plain_write_files_s": round(baseline),
        "mib": round(len(body) / (1 << 20), 1),
        "bundle_files_s": round(count / (t1 - t0)),
        "finalize_files_s": round(count / (t2 - t1)),
        "sync_s": round(t3 - t2, 3),
        "total_files_s": round(count / (t3 - t0)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--big-mib", type=int, default=512)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--dir", type=Path, default=None, help="a directory on the disk to measure (default: /tmp)")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="aicenter-bench-", dir=args.dir))
    try:
        report: dict[str, dict[str, float]] = {}
        if args.big_mib:
            report["big_file"] = bench_big(root, args.big_mib)
        if args.files:
            report["small_files"] = bench_small(root, args.files)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
