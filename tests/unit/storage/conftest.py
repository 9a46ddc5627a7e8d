"""Store tests: a fresh BlobStore per test under tmp_path (fsync off: durability is tested once, explicitly)."""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterator, Iterable
from pathlib import Path

import pytest

from aicenter.storage import BlobStore


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "store", fsync=False)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


async def stream(chunks: Iterable[bytes]) -> AsyncIterator[bytes]:
    for chunk in chunks:
        yield chunk


def split(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)] or [b""]


def blob_names(store: BlobStore) -> set[str]:
    return {name for name, _, _ in store.iter_blobs()}
