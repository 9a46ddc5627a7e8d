"""The catalog SDK and its push/pull engine against the real app served by uvicorn (SQLite, 64 KiB parts).

Byte counts come from a counting transport wrapped around httpx's real one: what the client put on the wire.
"""

from __future__ import annotations

import hashlib
import io
import itertools
import json
import os
import random
import tarfile
from collections.abc import Iterable, Iterator
from pathlib import Path

import httpx
import pytest

from aicenter.client import ApiError, Client
from aicenter.client.transfer import TransferError
from aicenter.client.transfer import _pull as pull_mod
from aicenter.client.transfer import _push as push_mod
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD

PART = 64 * 1024
_n = itertools.count(1)


def uniq(prefix: str) -> str:
    return f"{prefix}-{next(_n)}"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with live_server(tmp_path_factory.mktemp("catalog-home"), upload_part_size=PART) as url:
        yield url


@pytest.fixture(autouse=True)
def client_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Push resume files go under $AICENTER_HOME/uploads: one fresh home per test."""
    home = tmp_path / "client-home"
    monkeypatch.setenv("AICENTER_HOME", str(home))
    return home


class Counter:
    """Request body bytes sent to upload endpoints and response bytes read from file endpoints."""

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0


class _CountingStream(httpx.SyncByteStream):
    def __init__(self, inner: Iterable[bytes], counter: Counter, attr: str) -> None:
        self.inner, self.counter, self.attr = inner, counter, attr

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            setattr(self.counter, self.attr, getattr(self.counter, self.attr) + len(chunk))
            yield chunk

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


class CountingTransport(httpx.HTTPTransport):
    def __init__(self, counter: Counter) -> None:
        super().__init__()
        self.counter = counter

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if "/parts/" in path or path.endswith("/bundle"):
            request.stream = _CountingStream(request.stream, self.counter, "sent")  # type: ignore[arg-type]
        response = super().handle_request(request)
        if "/files/" in path and request.method == "GET":
            response.stream = _CountingStream(response.stream, self.counter, "received")  # type: ignore[arg-type]
        return response


def login(url: str, username: str, password: str, **kwargs: object) -> Client:
    api = Client(url, **kwargs)  # type: ignore[arg-type]
    api.login(username, password)
    return api


@pytest.fixture
def admin(server_url: str) -> Iterator[Client]:
    with login(server_url, "admin", ADMIN_PASSWORD) as api:
        yield api


def new_user(admin: Client) -> tuple[str, Client]:
    name = uniq("user")
    admin.create_user(name, "user-password-1")
    return name, login(admin.base_url, name, "user-password-1")


@pytest.fixture
def alice(admin: Client) -> Iterator[Client]:
    _, api = new_user(admin)
    with api:
        yield api


def write(path: Path, data: bytes, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def tree_digest(root: Path) -> dict[str, tuple[str, int]]:
    """Relative path -> (sha256, permission bits) of every file under root."""
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file():
            out[p.relative_to(root).as_posix()] = (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mode & 0o777)
    return out


def sample_tree(root: Path, rng: random.Random) -> None:
    write(root / "README.md", b"# a dataset\n")
    write(root / "empty.txt", b"")
    write(root / "exact.bin", rng.randbytes(PART))
    write(root / "plus-one.bin", rng.randbytes(PART + 1))
    write(root / "big" / "weights.bin", rng.randbytes(3 * PART + 123))
    write(root / "bin" / "run.sh", b"#!/bin/sh\necho hi\n", mode=0o755)
    for i in range(30):
        write(root / "train" / f"class{i % 3}" / f"{i:03d}.txt", rng.randbytes(rng.randint(1, 4000)))


# -- items and versions ----------------------------------------------------------------------------------------


def test_item_round_trip(alice: Client) -> None:
    name = uniq("cifar")
    item = alice.create_item(
        "dataset", name, description="tiny images", tags=["vision"], metadata={"data_type": "image"}
    )
    assert (item.kind, item.name, item.tags, item.metadata["data_type"]) == ("dataset", name, ["vision"], "image")
    assert alice.get_item("dataset", item.id).name == name
    assert [i.name for i in alice.list_items("dataset", q=name)] == [name]
    assert name in [i.name for i in alice.list_items("dataset", tag="vision")]
    assert alice.list_items_page("dataset", limit=1).items
    updated = alice.update_item("dataset", item.id, description="still tiny", tags=["vision", "small"])
    assert (updated.description, updated.tags) == ("still tiny", ["vision", "small"])

    version = alice.create_version("dataset", item.id, description="empty")
    assert (version.number, version.file_count, version.ref) == (1, 0, f"{name}:1")
    assert alice.get_version("dataset", item.id, 1).description == "empty"
    assert alice.update_version("dataset", item.id, 1, description="nothing yet").description == "nothing yet"
    assert [v.number for v in alice.list_versions("dataset", item.id)] == [1]
    assert alice.resolve("dataset", name).id == version.id
    assert alice.resolve("datasets", f"{name}:1").id == version.id
    assert alice.resolve("dataset", f"#{version.id}").number == 1

    alice.delete_version("dataset", item.id, 1)
    with pytest.raises(ApiError) as info:
        alice.get_version("dataset", item.id, 1)
    assert info.value.code == "not_found"
    alice.delete_item("dataset", item.id)
    with pytest.raises(ApiError) as info:
        alice.get_item("dataset", item.id)
    assert info.value.status == 404


def test_unknown_kind_is_refused_before_any_request(alice: Client) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        alice.list_items("notebook")


def test_bad_name_names_the_field(alice: Client) -> None:
    with pytest.raises(ApiError) as info:
        alice.create_item("model", "no spaces please")
    assert (info.value.code, info.value.field) == ("validation_failed", "name")


# -- push and pull ---------------------------------------------------------------------------------------------


def test_push_pull_round_trip_and_skip_present(alice: Client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    sample_tree(src, random.Random(1))
    seen: list[tuple[int, int, int, int]] = []
    version = alice.push("dataset", src, name="mnist", description="first", progress=lambda *a: seen.append(a))

    expected = tree_digest(src)
    total = sum((src / p).stat().st_size for p in expected)
    assert (version.number, version.file_count, version.size_bytes, version.description) == (
        1,
        len(expected),
        total,
        "first",
    )
    assert seen[-1] == (total, total, len(expected), len(expected))
    assert [a[0] for a in seen] == sorted(a[0] for a in seen)  # reported from one thread, so never backwards
    files = {f.path: f for f in alice.list_files("dataset", version.item_id, 1)}
    assert set(files) == set(expected)
    assert files["bin/run.sh"].mode & 0o777 == 0o755
    assert files["exact.bin"].sha256 == expected["exact.bin"][0]

    dest = tmp_path / "dest"
    report = alice.pull("dataset", "mnist:1", dest)
    assert tree_digest(dest) == expected  # bytes and modes
    assert (report.downloaded_files, report.downloaded_bytes, report.skipped_files) == (len(expected), total, 0)
    assert not list(dest.rglob("*.aicenter-part"))

    # Pulled again: everything present is kept; a changed file is fetched again.
    (dest / "README.md").write_bytes(b"local edit\n")
    again = alice.pull("dataset", "mnist", dest)
    assert (again.downloaded_files, again.skipped_files) == (1, len(expected) - 1)
    assert tree_digest(dest) == expected

    # A second push of the same tree: the same item, version 2, no bytes sent (every blob is stored).
    counter = Counter()
    with Client(alice.base_url, alice.token, transport=CountingTransport(counter)) as resend:
        v2 = resend.push("dataset", src, name="mnist")
    assert (v2.item_id, v2.number) == (version.item_id, 2)
    assert counter.sent == 0


def test_push_single_file(alice: Client, tmp_path: Path) -> None:
    weights = tmp_path / "model.pt"
    weights.write_bytes(os.urandom(PART * 2 + 7))
    version = alice.push("model", weights, name="resnet")
    assert [f.path for f in alice.list_files("model", version.item_id, version.number)] == ["model.pt"]
    dest = tmp_path / "out"
    alice.pull("model", version.ref, dest)
    assert (dest / "model.pt").read_bytes() == weights.read_bytes()


def test_push_sends_every_bundle_when_the_last_file_fills_one(
    alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(push_mod, "BUNDLE_BYTES", 100)  # 60 + 50 bytes: the second file closes the bundle
    src = tmp_path / "src"
    write(src / "a.txt", b"a" * 60)
    write(src / "b.txt", b"b" * 50)
    version = alice.push("dataset", src, name=uniq("full-bundle"))
    assert sorted(f.path for f in alice.list_files("dataset", version.item_id, version.number)) == ["a.txt", "b.txt"]


def test_symlink_in_source_is_refused_by_name(alice: Client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src / "data" / "a.txt", b"a")
    (src / "data" / "link").symlink_to(src / "data" / "a.txt")
    name = uniq("linked")
    with pytest.raises(TransferError) as info:
        alice.push("dataset", src, name=name)
    assert info.value.code == "validation_failed"
    assert str(src / "data" / "link") in info.value.message
    assert "symbolic link" in info.value.message
    assert not list(alice.list_items("dataset", q=name))  # nothing was created


class Interrupted(Exception):
    pass


def test_interrupted_push_resumes_sending_only_missing_bytes(alice: Client, tmp_path: Path, client_home: Path) -> None:
    src = tmp_path / "src"
    rng = random.Random(2)
    for i in range(3):
        write(src / f"shard-{i}.bin", rng.randbytes(4 * PART + 100))  # 5 parts each
    total = 3 * (4 * PART + 100)

    def stop_after_five_parts(done: int, _total: int, _files: int, _total_files: int) -> None:
        if done >= 5 * PART:
            raise Interrupted

    with pytest.raises(Interrupted):
        alice.push("dataset", src, name="shards", progress=stop_after_five_parts)

    states = list((client_home / "uploads").glob("*.json"))
    assert len(states) == 1
    upload_id = json.loads(states[0].read_text())["upload_id"]
    upload = alice.get_upload(upload_id)
    assert upload.state == "open"
    sizes = {f"shard-{i}.bin": 4 * PART + 100 for i in range(3)}
    missing_bytes = sum(min(PART, sizes[m["path"]] - p * PART) for m in upload.missing for p in m["parts"])
    assert 0 < missing_bytes < total - 4 * PART  # some parts arrived, some did not

    counter = Counter()
    with Client(alice.base_url, alice.token, transport=CountingTransport(counter)) as resumed:
        version = resumed.push("dataset", src, name="shards")
    assert counter.sent == missing_bytes
    assert (version.file_count, version.size_bytes) == (3, total)
    assert not states[0].exists()
    dest = tmp_path / "dest"
    alice.pull("dataset", version.ref, dest)
    assert tree_digest(dest) == tree_digest(src)


def test_changed_files_abort_the_old_upload(alice: Client, tmp_path: Path, client_home: Path) -> None:
    src = tmp_path / "src"
    write(src / "a.bin", os.urandom(3 * PART))

    def stop(done: int, *_: int) -> None:
        if done >= PART:
            raise Interrupted

    with pytest.raises(Interrupted):
        alice.push("dataset", src, name="changing", progress=stop)
    old_id = json.loads(next((client_home / "uploads").glob("*.json")).read_text())["upload_id"]
    write(src / "b.txt", b"a new file")
    version = alice.push("dataset", src, name="changing")
    assert version.file_count == 2
    assert alice.get_upload(old_id).state == "aborted"


def test_pull_resumes_a_large_file_from_its_part(
    alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pull_mod, "LARGE_DOWNLOAD", 100_000)  # "large" without megabytes of test data
    src = tmp_path / "src"
    data = os.urandom(300_000)
    write(src / "big.bin", data)
    write(src / "small.txt", b"small")
    version = alice.push("dataset", src, name="resume-pull")

    dest = tmp_path / "dest"
    write(dest / "big.bin.aicenter-part", data[:120_000])
    counter = Counter()
    with Client(alice.base_url, alice.token, transport=CountingTransport(counter)) as api:
        report = api.pull("dataset", version.ref, dest)
    assert counter.received == 300_000 - 120_000  # only the rest of the big file came over GET
    assert (dest / "big.bin").read_bytes() == data
    assert (dest / "small.txt").read_bytes() == b"small"
    assert report.downloaded_files == 2
    assert not (dest / "big.bin.aicenter-part").exists()


def test_pull_refuses_a_damaged_partial_download(
    alice: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pull_mod, "LARGE_DOWNLOAD", 100_000)
    src = tmp_path / "src"
    data = os.urandom(200_000)
    write(src / "big.bin", data)
    version = alice.push("dataset", src, name="damaged-part")
    dest = tmp_path / "dest"
    write(dest / "big.bin.aicenter-part", b"x" * 1000)  # not a prefix of the file
    with pytest.raises(TransferError) as info:
        alice.pull("dataset", version.ref, dest)
    assert info.value.code == "hash_mismatch"
    assert not (dest / "big.bin").exists()
    assert not (dest / "big.bin.aicenter-part").exists()
    alice.pull("dataset", version.ref, dest)  # the next pull starts over and succeeds
    assert (dest / "big.bin").read_bytes() == data


@pytest.mark.parametrize("path", ["../x", "/etc/passwd", "a/../../x", "a//b", "a\\b", ""])
def test_pull_never_writes_outside_dest(tmp_path: Path, path: str) -> None:
    with pytest.raises(TransferError) as info:
        pull_mod.safe_target(tmp_path.resolve(), path)
    assert info.value.code == "unsafe_archive"


def test_download_file_and_archive(alice: Client, tmp_path: Path) -> None:
    src = tmp_path / "src"
    write(src / "a.txt", b"0123456789")
    write(src / "d" / "b.txt", b"bee")
    v = alice.push("algorithm", src, name="train-code")
    out = tmp_path / "a.txt"
    assert alice.download_file("algorithm", v.item_id, v.number, "a.txt", out) == 10
    assert alice.download_file("algorithm", v.item_id, v.number, "a.txt", out, offset=4) == 6
    assert out.read_bytes() == b"0123456789456789"
    whole = b"".join(alice.stream_archive("algorithm", v.item_id, v.number))
    with tarfile.open(fileobj=io.BytesIO(whole)) as tar:
        assert sorted(m.name for m in tar.getmembers() if m.isfile()) == ["a.txt", "d/b.txt"]
    some = b"".join(alice.stream_archive("algorithm", v.item_id, v.number, paths=["d/b.txt"]))
    with tarfile.open(fileobj=io.BytesIO(some)) as tar:
        assert [m.name for m in tar.getmembers() if m.isfile()] == ["d/b.txt"]


# -- sharing ---------------------------------------------------------------------------------------------------


def test_share_to_workspace_copy_and_pull(admin: Client, tmp_path: Path) -> None:
    alice_name, alice = new_user(admin)
    bob_name, bob = new_user(admin)
    ws = admin.create_workspace(uniq("team"))
    admin.add_member(ws.id, username=alice_name)
    admin.add_member(ws.id, username=bob_name)
    src = tmp_path / "src"
    sample_tree(src, random.Random(3))
    with alice, bob:
        v = alice.push("dataset", src, name="shared-set")
        with pytest.raises(ApiError) as info:
            bob.resolve("dataset", f"{alice_name}/shared-set:1")
        assert info.value.status == 404  # private: no existence leak

        shared = alice.share_version("dataset", v.item_id, v.number, visibility="workspace", workspace_id=ws.id)
        assert (shared.visibility, shared.shared_workspace_id) == ("workspace", ws.id)
        seen = bob.resolve("dataset", f"{alice_name}/shared-set:1")
        assert seen.id == v.id
        assert "shared-set" in [i.name for i in bob.list_items("dataset", scope="workspace")]

        copy = bob.copy_version("dataset", v.item_id, v.number, name="my-copy")
        assert (copy.item_name, copy.number, copy.visibility, copy.copied_from_id) == ("my-copy", 1, "private", v.id)
        dest = tmp_path / "bob"
        bob.pull("dataset", "my-copy:1", dest)
        assert tree_digest(dest) == tree_digest(src)

        assert alice.unshare_version("dataset", v.item_id, v.number).visibility == "private"
        public = alice.share_version("dataset", v.item_id, v.number, visibility="public")
        assert public.visibility == "public"
        assert "shared-set" in [i.name for i in bob.list_items("dataset", scope="public")]


# -- images, storage admin ---------------------------------------------------------------------------------------


def test_image_versions_and_builds(alice: Client) -> None:
    venv = alice.create_item("image", uniq("py"), metadata={"image_type": "venv"})
    v = alice.create_version("image", venv.id, metadata={"python": "3.11", "requirements": ["numpy"]})
    assert v.metadata["requirements"] == ["numpy"]
    build = alice.get_build(venv.id, v.number)
    assert build.version_id == v.id
    assert build.state in ("pending", "building", "ready", "failed")

    container = alice.create_item("image", uniq("ctr"), metadata={"image_type": "container"})
    cv = alice.create_version("image", container.id, metadata={"reference": "docker.io/library/python:3.11"})
    assert cv.state == "ready"
    with pytest.raises(ApiError) as info:
        alice.create_version("image", container.id, metadata={"python": "3.11"})
    assert info.value.code == "validation_failed"


def test_storage_usage_quota_gc_fsck(admin: Client, tmp_path: Path) -> None:
    _, user = new_user(admin)
    with user:
        ws = user.me().default_workspace_id
        assert ws is not None
        write(tmp_path / "f.bin", os.urandom(5000))
        user.push("dataset", tmp_path / "f.bin", name="sized")
        assert user.storage_usage(ws).used_bytes == 5000
        limited = admin.set_storage_quota(ws, "6Ki")
        assert limited.limit_bytes == 6 * 1024
        write(tmp_path / "g.bin", os.urandom(5000))
        with pytest.raises(ApiError) as info:
            user.push("dataset", tmp_path / "g.bin", name="too-much")
        assert info.value.code == "quota_exceeded"
        assert admin.set_storage_quota(ws, None).limit_bytes is None
        with pytest.raises(ApiError) as info:
            user.set_storage_quota(ws, 1)
        assert info.value.status == 403
    gc = admin.storage_gc()
    assert gc.scanned >= 1
    fsck = admin.storage_fsck()
    assert fsck.checked >= 1
    assert (fsck.missing, fsck.damaged) == ([], [])
