from __future__ import annotations

import asyncio
import itertools
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aicenter.core.errors import HashMismatch, NotFound, UploadIncomplete, ValidationFailed
from aicenter.storage import BlobStore, Staging, bundle_header, hash_file
from tests.unit.storage.conftest import blob_names, sha, split, stream

PART = 64 * 1024


@pytest.fixture
def staging(store: BlobStore) -> Staging:
    s = Staging(store)
    s.create(1)
    return s


async def send_part(staging: Staging, data: bytes, index: int, part: int, *, chunk: int = 10_000) -> None:
    body = data[part * PART : (part + 1) * PART]
    await staging.write_part(
        1, index, part, part_size=PART, file_size=len(data), part_sha256=sha(body), chunks=stream(split(body, chunk))
    )


async def test_parts_in_parallel_and_out_of_order_assemble_the_file(staging: Staging, store: BlobStore) -> None:
    data = os.urandom(5 * PART + 123)
    await send_part(staging, data, 0, 5)
    await asyncio.gather(*(send_part(staging, data, 0, p) for p in (3, 0, 4, 1, 2)))
    assert staging.received(1) == {0: {0, 1, 2, 3, 4, 5}}
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}
    with store.open(sha(data)) as f:
        assert f.read() == data


async def test_single_part_file_needs_no_reread(staging: Staging, store: BlobStore) -> None:
    data = b"small file"
    await send_part(staging, data, 3, 0)
    assert staging.received(1) == {3: {0}}
    assert staging.finalize(1, [(3, len(data), None)], part_size=PART) == {3: sha(data)}
    assert store.exists(sha(data))


async def test_empty_file(staging: Staging, store: BlobStore) -> None:
    await staging.write_part(1, 0, 0, part_size=PART, file_size=0, part_sha256=sha(b""), chunks=stream([]))
    assert staging.finalize(1, [(0, 0, sha(b""))], part_size=PART) == {0: sha(b"")}
    assert store.path(sha(b"")).stat().st_size == 0


async def test_wrong_part_hash_leaves_no_marker(staging: Staging) -> None:
    data = os.urandom(2 * PART)
    with pytest.raises(HashMismatch) as info:
        await staging.write_part(
            1, 0, 1, part_size=PART, file_size=len(data), part_sha256=sha(b"x"), chunks=stream([data[PART:]])
        )
    assert info.value.details == {"index": 0, "part": 1, "expected": sha(b"x"), "actual": sha(data[PART:])}
    assert staging.received(1) == {}
    with pytest.raises(HashMismatch):  # a single-part file too: nothing kept
        await staging.write_part(1, 1, 0, part_size=PART, file_size=3, part_sha256=sha(b"abd"), chunks=stream([b"abc"]))
    assert staging.received(1) == {}
    assert [n for n in os.listdir(staging.store.staging_dir / "1") if n.endswith(".tmp")] == []


@pytest.mark.parametrize("body_len", [PART - 1, PART + 1, 0])
async def test_wrong_part_length_is_refused(staging: Staging, body_len: int) -> None:
    body = b"z" * body_len
    with pytest.raises(ValidationFailed, match=f"must be {PART} bytes"):
        await staging.write_part(
            1, 0, 0, part_size=PART, file_size=2 * PART, part_sha256=sha(body), chunks=stream([body])
        )
    assert staging.received(1) == {}


async def test_part_number_out_of_range(staging: Staging) -> None:
    with pytest.raises(ValidationFailed, match="no part 2"):
        await staging.write_part(1, 0, 2, part_size=PART, file_size=2 * PART, part_sha256=sha(b""), chunks=stream([]))


async def test_resending_a_received_part_is_accepted_and_changes_nothing(staging: Staging) -> None:
    data = os.urandom(2 * PART)
    await send_part(staging, data, 0, 0)
    data_file = staging.store.staging_dir / "1" / "0.data"
    before = data_file.read_bytes()[:PART]
    # The resend claims the same hash but carries other bytes: it is read past, the received copy stays.
    await staging.write_part(
        1, 0, 0, part_size=PART, file_size=2 * PART, part_sha256=sha(data[:PART]), chunks=stream([b"\0" * PART])
    )
    assert data_file.read_bytes()[:PART] == before
    await send_part(staging, data, 0, 1)
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}


async def test_unknown_upload_is_not_found(store: BlobStore) -> None:
    staging = Staging(store)
    with pytest.raises(NotFound):
        await staging.write_part(9, 0, 0, part_size=PART, file_size=1, part_sha256=sha(b"a"), chunks=stream([b"a"]))
    with pytest.raises(NotFound):
        await staging.write_bundle(9, {0: (1, None)}, stream([bundle_header(0, 1) + b"a"]))


def bundle(files: dict[int, bytes]) -> bytes:
    return b"".join(bundle_header(i, len(d)) + d for i, d in files.items())


async def test_bundle_writes_whole_files(staging: Staging, store: BlobStore) -> None:
    files = {i: os.urandom(i * 1000) for i in range(6)}
    declared = {i: (len(d), sha(d) if i % 2 else None) for i, d in files.items()}
    got = await staging.write_bundle(1, declared, stream(split(bundle(files), 7777)))
    assert got == list(range(6))
    assert staging.received(1) == {i: {0} for i in range(6)}
    result = staging.finalize(1, [(i, len(d), None) for i, d in files.items()], part_size=PART)
    assert result == {i: sha(d) for i, d in files.items()}
    assert blob_names(store) == {sha(d) for d in files.values()}


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(min_value=0, max_value=2 * 48 + 10), second_cut=st.integers(min_value=0, max_value=120))
def test_bundle_chunk_boundaries_anywhere(tmp_path_factory: pytest.TempPathFactory, cut: int, second_cut: int) -> None:
    store = BlobStore(tmp_path_factory.mktemp("s"), fsync=False)
    staging = Staging(store)
    staging.create(1)
    files = {0: b"first", 1: b"", 2: b"third file"}
    raw = bundle(files)
    cuts = sorted({0, min(cut, len(raw)), min(cut + second_cut, len(raw)), len(raw)})
    chunks = [raw[a:b] for a, b in itertools.pairwise(cuts)]
    declared = {i: (len(d), sha(d)) for i, d in files.items()}
    assert asyncio.run(staging.write_bundle(1, declared, stream(chunks))) == [0, 1, 2]
    assert staging.finalize(1, [(i, len(d), sha(d)) for i, d in files.items()], part_size=PART) == {
        i: sha(d) for i, d in files.items()
    }


async def test_bundle_split_at_every_offset_of_a_header(staging: Staging) -> None:
    raw = bundle({0: b"abc", 1: b"defg"})
    for cut in range(len(raw) + 1):
        staging.remove(1)
        staging.create(1)
        got = await staging.write_bundle(1, {0: (3, sha(b"abc")), 1: (4, None)}, stream([raw[:cut], raw[cut:]]))
        assert got == [0, 1], cut


async def test_truncated_bundle_keeps_earlier_files_and_no_partial(staging: Staging) -> None:
    raw = bundle({0: b"abc", 1: b"defghij"})
    with pytest.raises(ValidationFailed, match="ends inside file 1: 2 of 7 bytes"):
        await staging.write_bundle(1, {0: (3, None), 1: (7, None)}, stream([raw[:-5]]))
    assert staging.received(1) == {0: {0}}
    assert [n for n in os.listdir(staging.store.staging_dir / "1") if n.startswith("1.")] == []
    with pytest.raises(ValidationFailed, match="inside a file header"):
        await staging.write_bundle(1, {0: (3, None), 1: (7, None)}, stream([raw[:60]]))


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (bundle_header(5, 1) + b"x", "file 5 is not expected"),
        (bundle_header(0, 4) + b"abcd", "has 4 bytes in the bundle, but the upload declares 3"),
        (b"Z" * 48, "malformed bundle header at byte 0"),
        (bundle_header(0, 3) + b"abc" + b"0" * 32 + b"1" * 16, "malformed bundle header at byte 51"),
    ],
)
async def test_bad_bundle_headers(staging: Staging, raw: bytes, message: str) -> None:
    with pytest.raises(ValidationFailed, match=message):
        await staging.write_bundle(1, {0: (3, None)}, stream([raw]))


async def test_bundle_hash_mismatch_names_the_index_and_keeps_earlier_files(staging: Staging) -> None:
    raw = bundle({0: b"abc", 1: b"xyz", 2: b"end"})
    with pytest.raises(HashMismatch) as info:
        await staging.write_bundle(1, {0: (3, None), 1: (3, sha(b"xyw")), 2: (3, None)}, stream([raw]))
    assert info.value.details["index"] == 1
    assert staging.received(1) == {0: {0}}


async def test_bundle_resend_is_read_past(staging: Staging) -> None:
    files = {0: b"abc", 1: b"de"}
    declared = {0: (3, None), 1: (2, None)}
    await staging.write_bundle(1, declared, stream([bundle(files)]))
    names = sorted(os.listdir(staging.store.staging_dir / "1"))
    assert await staging.write_bundle(1, declared, stream([bundle(files)])) == [0, 1]
    assert sorted(os.listdir(staging.store.staging_dir / "1")) == names


async def test_incomplete_finalize_lists_missing_parts_and_stores_nothing(staging: Staging, store: BlobStore) -> None:
    data = os.urandom(3 * PART)
    await send_part(staging, data, 0, 1)
    await send_part(staging, b"whole", 1, 0)
    with pytest.raises(UploadIncomplete) as info:
        staging.finalize(1, [(0, len(data), None), (1, 5, None), (2, 10, None)], part_size=PART)
    assert info.value.details["missing"] == [{"index": 0, "parts": [0, 2]}, {"index": 2, "parts": [0]}]
    assert blob_names(store) == set()


async def test_finalize_is_idempotent_and_survives_a_crash_halfway(
    staging: Staging, store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = os.urandom(2 * PART + 5)
    files = [(0, len(big), sha(big)), (1, 5, None), (2, 4, None)]
    for p in range(3):
        await send_part(staging, big, 0, p)
    await staging.write_bundle(1, {1: (5, None), 2: (4, None)}, stream([bundle({1: b"11111", 2: b"2222"})]))
    calls = 0
    real = store.link_in

    def crash_on_second(src: Path, sha256: str) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError("power cut")
        real(src, sha256)

    monkeypatch.setattr(store, "link_in", crash_on_second)
    with pytest.raises(OSError, match="power cut"):
        staging.finalize(1, files, part_size=PART)
    monkeypatch.setattr(store, "link_in", real)
    expected = {0: sha(big), 1: sha(b"11111"), 2: sha(b"2222")}
    assert staging.finalize(1, files, part_size=PART) == expected
    assert staging.finalize(1, files, part_size=PART) == expected
    assert blob_names(store) == set(expected.values())
    assert staging.data_path(1, 0).read_bytes() == big


async def test_whole_file_hash_mismatch_drops_the_file_so_it_can_be_resent(staging: Staging) -> None:
    data = os.urandom(2 * PART)
    for p in range(2):
        await send_part(staging, data, 0, p)
    with pytest.raises(HashMismatch) as info:
        staging.finalize(1, [(0, len(data), sha(b"other"))], part_size=PART)
    assert info.value.details["index"] == 0
    assert staging.received(1) == {}


async def test_a_part_arriving_after_finalize_writes_nothing_into_the_blob(staging: Staging, store: BlobStore) -> None:
    data = os.urandom(2 * PART)
    for p in range(2):
        await send_part(staging, data, 0, p)
    staging.finalize(1, [(0, len(data), None)], part_size=PART)
    for name in os.listdir(store.staging_dir / "1"):
        if name.endswith(".ok"):
            os.unlink(store.staging_dir / "1" / name)  # even without markers: the sealed file is not written
    await staging.write_part(
        1, 0, 0, part_size=PART, file_size=len(data), part_sha256=sha(b"\0" * PART), chunks=stream([b"\0" * PART])
    )
    with store.open(sha(data)) as f:
        assert f.read() == data


def test_remove_and_upload_ids(store: BlobStore) -> None:
    staging = Staging(store)
    for i in (3, 1, 2):
        staging.create(i)
    (store.staging_dir / "1" / "x").write_text("x")
    assert staging.upload_ids() == [1, 2, 3]
    staging.remove(1)
    staging.remove(1)
    assert staging.upload_ids() == [2, 3]
    assert staging.received(1) == {}


class _ReadSpy:
    """Counts whole-file re-reads by finalize (``staging.hash_file``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from aicenter.storage import staging as module

        self.calls = 0
        real = hash_file

        def spy(path: Path | str) -> tuple[str, int]:
            self.calls += 1
            return real(path)

        monkeypatch.setattr(module, "hash_file", spy)


@pytest.mark.parametrize("order", [(0, 1, 2, 3), (3, 1, 0, 2)])
async def test_finalize_uses_the_running_hash_instead_of_reading_the_file_again(
    staging: Staging, store: BlobStore, monkeypatch: pytest.MonkeyPatch, order: tuple[int, ...]
) -> None:
    spy = _ReadSpy(monkeypatch)
    data = os.urandom(3 * PART + 999)
    for p in order:
        await send_part(staging, data, 0, p)
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}
    assert spy.calls == 0
    with store.open(sha(data)) as f:
        assert f.read() == data


async def test_a_failed_part_taints_the_running_hash_and_finalize_reads_the_file(
    staging: Staging, store: BlobStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _ReadSpy(monkeypatch)
    data = os.urandom(2 * PART)
    await send_part(staging, data, 0, 0)
    with pytest.raises(HashMismatch):  # wrote its bytes, then failed: they may differ from what was hashed
        await staging.write_part(
            1, 0, 1, part_size=PART, file_size=len(data), part_sha256=sha(b"x"), chunks=stream([b"\1" * PART])
        )
    await send_part(staging, data, 0, 1)
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}
    assert spy.calls == 1


async def test_a_part_marked_by_another_writer_meanwhile_taints_the_running_hash(
    staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    spy = _ReadSpy(monkeypatch)
    data = os.urandom(2 * PART)
    await send_part(staging, data, 0, 0)
    marker = staging.store.staging_dir / "1" / "0.1.ok"

    async def racing() -> AsyncIterator[bytes]:
        yield data[PART : PART + 100]
        marker.touch()  # another replica received part 1 while this request was writing it
        yield data[PART + 100 :]

    await staging.write_part(
        1, 0, 1, part_size=PART, file_size=len(data), part_sha256=sha(data[PART:]), chunks=racing()
    )
    assert (staging.store.staging_dir / "1" / "0.taint").exists()
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}
    assert spy.calls == 1


async def test_after_a_restart_finalize_reads_what_this_process_did_not_hash(
    staging: Staging, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aicenter.storage import runhash

    data = os.urandom(2 * PART + 1)
    for p in range(3):
        await send_part(staging, data, 0, p)
    monkeypatch.setattr(runhash.RUNNING, "_entries", type(runhash.RUNNING._entries)())  # a fresh process
    spy = _ReadSpy(monkeypatch)
    assert staging.finalize(1, [(0, len(data), sha(data))], part_size=PART) == {0: sha(data)}
    assert spy.calls == 1


async def test_a_running_hash_over_other_bytes_than_declared_is_refused(staging: Staging) -> None:
    data = os.urandom(2 * PART)
    for p in range(2):
        await send_part(staging, data, 0, p)
    with pytest.raises(HashMismatch):
        staging.finalize(1, [(0, len(data), sha(b"not it"))], part_size=PART)
    assert staging.received(1) == {}
    assert not (staging.store.staging_dir / "1" / "0.taint").exists()


async def test_many_bundled_files_are_linked_in_parallel(staging: Staging, store: BlobStore) -> None:
    files = {i: os.urandom(i % 50) + i.to_bytes(4, "big") for i in range(200)}  # above LINK_PARALLEL_MIN
    declared = {i: (len(d), sha(d)) for i, d in files.items()}
    assert await staging.write_bundle(1, declared, stream(split(bundle(files), 4096))) == list(range(200))
    result = staging.finalize(1, [(i, len(d), sha(d)) for i, d in files.items()], part_size=PART)
    assert result == {i: sha(d) for i, d in files.items()}
    assert blob_names(store) == {sha(d) for d in files.values()}
