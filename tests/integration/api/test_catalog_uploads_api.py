"""Uploads over HTTP on SQLite and PostgreSQL: parts in any order, bundles, resuming from the status, commit,
reading every file back; and bad input (paths, hashes, missing parts, other users, unsafe archives, quota),
which is refused with a named error and changes nothing."""

from __future__ import annotations

import io
import os
import tarfile
import zipfile
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from aicenter.db.engine import Database
from tests.factories import Login, admin_login, make_user
from tests.integration.api._catalog import (
    API,
    bundle,
    create_item,
    post_bundle,
    put_part,
    send_all,
    sha,
    start_upload,
    upload_version,
    workspace_of,
)

PART = 64 * 1024  # the smallest part size the settings accept: a few parts per file without big test data


@pytest.fixture
def small_parts(app: FastAPI, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(app.state.ctx.settings, "upload_part_size", PART)
    return PART


async def _versions(client: httpx.AsyncClient, user: Login, item_id: int) -> list[int]:
    r = await client.get(f"{API}/datasets/{item_id}/versions", headers=user.headers)
    return [v["number"] for v in r.json()["items"]]


async def test_parts_out_of_order_bundle_resume_and_commit(
    client: httpx.AsyncClient, db: Database, small_parts: int
) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "mixed")
    big = os.urandom(3 * PART + 123)  # four parts, the last short
    files = {"big.bin": big, "small/a.txt": b"alpha\n", "small/b.txt": b"beta\n", "empty": b""}
    upload = await start_upload(client, alice, "datasets", item["id"], files)
    assert (upload["state"], upload["part_size"], upload["file_count"]) == ("open", PART, 4)
    assert upload["total_bytes"] == sum(len(d) for d in files.values())
    # The empty file is not needed once any earlier test stored the empty blob (the store outlives tests).
    assert sorted(upload["needed"]) in ([0, 1, 2, 3], [0, 1, 2])
    big_missing = next(m for m in upload["missing"] if m["index"] == 0)
    assert (big_missing["path"], big_missing["parts"]) == ("big.bin", [0, 1, 2, 3])

    for part in (3, 1):
        r = await put_part(client, alice, upload["id"], 0, part, big[part * PART : (part + 1) * PART])
        assert r.status_code == 204, r.text
    r = await post_bundle(client, alice, upload["id"], bundle({1: files["small/a.txt"]}))
    assert (r.status_code, r.json()) == (200, {"received": [1]})

    # What a resumed client reads: the parts and files still to send.
    status = (await client.get(f"{API}/uploads/{upload['id']}", headers=alice.headers)).json()
    missing = {m["index"]: m["parts"] for m in status["missing"]}
    assert missing[0] == [0, 2]
    assert 1 not in missing
    assert 2 in missing

    early = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)
    assert (early.status_code, early.json()["error"]["code"]) == (409, "upload_incomplete")
    assert {m["index"] for m in early.json()["error"]["details"]["missing"]} >= {0, 2}
    assert await _versions(client, alice, item["id"]) == []

    for part in (0, 2, 2):  # a part sent twice is harmless
        r = await put_part(client, alice, upload["id"], 0, part, big[part * PART : (part + 1) * PART])
        assert r.status_code == 204, r.text
    rest = {i: list(files.values())[i] for i in status["needed"] if i in missing and i != 0}
    assert (await post_bundle(client, alice, upload["id"], bundle(rest))).status_code == 200

    commit = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)
    assert commit.status_code == 201, commit.text
    version = commit.json()
    assert (version["number"], version["file_count"], version["size_bytes"]) == (1, 4, upload["total_bytes"])
    again = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)
    assert (again.status_code, again.json()["id"]) == (201, version["id"])  # a retried commit: same version
    assert await _versions(client, alice, item["id"]) == [1]

    base = f"{API}/datasets/{item['id']}/versions/1/files"
    for path, data in files.items():
        r = await client.get(f"{base}/{path}", headers=alice.headers)
        assert r.status_code == 200, (path, r.text)
        assert r.content == data, path

    # A second upload of the same files needs no bytes at all: the store has them.
    second = await start_upload(client, alice, "datasets", item["id"], files)
    assert second["needed"] == []
    assert (await client.post(f"{API}/uploads/{second['id']}/commit", headers=alice.headers)).status_code == 201


async def test_bad_paths_are_named(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "d")
    ok = {"path": "fine.txt", "size": 1}
    cases: list[tuple[list[dict[str, Any]], str]] = [
        ([ok, {"path": "../etc/passwd", "size": 1}], "files[1].path"),
        ([{"path": "/abs", "size": 1}], "files[0].path"),
        ([ok, {"path": "a\\b", "size": 1}], "files[1].path"),
        ([{"path": "a\x00b", "size": 1}], "files[0].path"),
        ([ok, {"path": "x", "size": 1}, {"path": "fine.txt", "size": 2}], "files[2].path"),
        ([{"path": "ok", "size": -1}], "files[0].size"),
        ([{"path": "ok", "size": 1, "sha256": "abc"}], "files[0].sha256"),
    ]
    for files, field in cases:
        r = await client.post(f"{API}/datasets/{item['id']}/uploads", json={"files": files}, headers=alice.headers)
        assert r.status_code == 422, (files, r.text)
        assert r.json()["error"]["code"] == "validation_failed"
        assert r.json()["error"]["details"]["field"] == field, r.text
    dup = await client.post(
        f"{API}/datasets/{item['id']}/uploads",
        json={"files": [{"path": "a/b", "size": 1}, {"path": "a/b", "size": 1}]},
        headers=alice.headers,
    )
    assert "duplicate path a/b" in dup.json()["error"]["message"]


async def test_bad_parts_and_bundles(client: httpx.AsyncClient, db: Database, small_parts: int) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "d")
    data = os.urandom(PART + 10)
    upload = await start_upload(client, alice, "datasets", item["id"], {"f.bin": data, "g.txt": b"gee"})
    url = f"{API}/uploads/{upload['id']}/files/0/parts/0"

    no_header = await client.put(url, content=data[:PART], headers=alice.headers)
    assert (no_header.status_code, no_header.json()["error"]["details"]["field"]) == (422, "X-Part-Sha256")
    not_hex = await client.put(url, content=data[:PART], headers={**alice.headers, "X-Part-Sha256": "xyz"})
    assert (not_hex.status_code, not_hex.json()["error"]["details"]["field"]) == (422, "X-Part-Sha256")
    wrong = await client.put(url, content=data[:PART], headers={**alice.headers, "X-Part-Sha256": sha(b"other")})
    assert (wrong.status_code, wrong.json()["error"]["code"]) == (422, "hash_mismatch")
    short = await put_part(client, alice, upload["id"], 0, 0, data[:100])
    assert (short.status_code, short.json()["error"]["code"]) == (422, "validation_failed")
    beyond = await put_part(client, alice, upload["id"], 0, 2, b"x")
    assert beyond.status_code in (404, 422), beyond.text
    status = (await client.get(f"{API}/uploads/{upload['id']}", headers=alice.headers)).json()
    assert next(m for m in status["missing"] if m["index"] == 0)["parts"] == [0, 1]  # nothing kept

    lying = await post_bundle(client, alice, upload["id"], bundle({1: b"GEE"}))  # declared hash is of b"gee"
    assert (lying.status_code, lying.json()["error"]["code"]) == (422, "hash_mismatch")
    as_json = await client.post(f"{API}/uploads/{upload['id']}/bundle", json={"x": 1}, headers=alice.headers)
    assert (as_json.status_code, as_json.json()["error"]["details"]["field"]) == (422, "Content-Type")

    commit = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)
    assert (commit.status_code, commit.json()["error"]["code"]) == (409, "upload_incomplete")
    assert await _versions(client, alice, item["id"]) == []


async def test_uploads_of_others_are_not_found(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    item = await create_item(client, alice, "datasets", "d")
    upload = await start_upload(client, alice, "datasets", item["id"], {"a": b"a"})
    uid = upload["id"]
    assert (await client.get(f"{API}/uploads/{uid}", headers=bob.headers)).status_code == 404
    assert (await put_part(client, bob, uid, 0, 0, b"a")).status_code == 404
    assert (await post_bundle(client, bob, uid, bundle({0: b"a"}))).status_code == 404
    assert (await client.post(f"{API}/uploads/{uid}/commit", headers=bob.headers)).status_code == 404
    assert (await client.delete(f"{API}/uploads/{uid}", headers=bob.headers)).status_code == 404
    # Nor may bob start an upload into alice's item.
    r = await client.post(f"{API}/datasets/{item['id']}/uploads", json={"files": []}, headers=bob.headers)
    assert r.status_code == 404

    assert (await client.delete(f"{API}/uploads/{uid}", headers=alice.headers)).status_code == 204
    after = await client.get(f"{API}/uploads/{uid}", headers=alice.headers)
    assert after.status_code == 404 or after.json()["state"] == "aborted"
    assert (await put_part(client, alice, uid, 0, 0, b"a")).status_code in (404, 409)


def _tar(members: list[tuple[str, bytes | None, str | None]]) -> bytes:
    """A tar of regular files (bytes) and symlinks (target)."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w") as tar:
        for name, data, target in members:
            info = tarfile.TarInfo(name)
            if target is not None:
                info.type, info.linkname = tarfile.SYMTYPE, target
                tar.addfile(info)
            else:
                assert data is not None
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


async def _archive_commit(client: httpx.AsyncClient, user: Login, item_id: int, archive: bytes) -> httpx.Response:
    upload = await start_upload(client, user, "datasets", item_id, {"data.tar": archive}, archive="tar")
    await send_all(client, user, upload, [archive])
    return await client.post(f"{API}/uploads/{upload['id']}/commit", headers=user.headers)


async def test_archive_uploads(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "tarred")
    good = await _archive_commit(client, alice, item["id"], _tar([("x/one.txt", b"one", None), ("two", b"2", None)]))
    assert good.status_code == 201, good.text
    assert good.json()["file_count"] == 2
    r = await client.get(f"{API}/datasets/{item['id']}/versions/1/files/x/one.txt", headers=alice.headers)
    assert r.content == b"one"

    evil = _tar([("ok.txt", b"ok", None), ("link", None, "/etc/passwd")])
    bad = await _archive_commit(client, alice, item["id"], evil)
    assert (bad.status_code, bad.json()["error"]["code"]) == (422, "unsafe_archive")
    assert "link" in bad.json()["error"]["message"]
    assert await _versions(client, alice, item["id"]) == [1]


async def test_quota_exceeded_says_by_how_much(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    workspace = await workspace_of(client, alice)
    r = await client.put(f"{API}/workspaces/{workspace}/storage", json={"limit": 1000}, headers=admin.headers)
    assert r.status_code == 200, r.text
    item = await create_item(client, alice, "datasets", "d")
    await upload_version(client, alice, "datasets", item["id"], {"a": b"x" * 600})
    r = await client.post(
        f"{API}/datasets/{item['id']}/uploads", json={"files": [{"path": "b", "size": 500}]}, headers=alice.headers
    )
    assert (r.status_code, r.json()["error"]["code"]) == (409, "quota_exceeded")
    error = r.json()["error"]
    assert "by 100" in error["message"], error["message"]
    assert (error["details"]["limit"], error["details"]["over"]) == (1000, 100)
    assert await _versions(client, alice, item["id"]) == [1]


def _bomb(fmt: str, size: int) -> bytes:
    """An archive of one file of ``size`` zero bytes: a few KiB that expand to ``size``."""
    out = io.BytesIO()
    if fmt == "zip":
        with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.writestr("zeros.bin", bytes(size))
    else:
        with tarfile.open(fileobj=out, mode="w:gz") as tar:
            info = tarfile.TarInfo("zeros.bin")
            info.size = size
            tar.addfile(info, io.BytesIO(bytes(size)))
    return out.getvalue()


def _blob_count(app: FastAPI) -> int:
    return sum(1 for _ in app.state.ctx.store.iter_blobs())


async def _quota(client: httpx.AsyncClient, user: Login, limit: int) -> None:
    admin = await admin_login(client)
    workspace = await workspace_of(client, user)
    r = await client.put(f"{API}/workspaces/{workspace}/storage", json={"limit": limit}, headers=admin.headers)
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("fmt", ["zip", "tar.gz"])
async def test_an_archive_declaring_more_than_the_quota_is_refused_before_it_expands(
    client: httpx.AsyncClient, db: Database, app: FastAPI, fmt: str
) -> None:
    alice = await make_user(db, client, "alice")
    await _quota(client, alice, 1 << 20)
    item = await create_item(client, alice, "datasets", "bomb")
    bomb = _bomb(fmt, 64 << 20)
    assert len(bomb) < 1 << 20  # the upload itself fits the quota; only its expansion does not
    blobs = _blob_count(app)

    upload = await start_upload(client, alice, "datasets", item["id"], {f"bomb.{fmt}": bomb}, archive=fmt)
    await send_all(client, alice, upload, [bomb])
    r = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)

    assert (r.status_code, r.json()["error"]["code"]) == (409, "quota_exceeded"), r.text
    error = r.json()["error"]
    assert f"declares at least 64.0 MiB of files ({64 << 20} bytes)" in error["message"], error["message"]
    assert (error["details"]["declared"], error["details"]["limit"]) == (64 << 20, 1 << 20)
    assert _blob_count(app) == blobs  # not the expanded file, not the archive's own blob
    assert await _versions(client, alice, item["id"]) == []
    assert list(app.state.ctx.store.tmp_dir.iterdir()) == []


async def test_a_refused_archive_commit_deletes_the_blobs_it_wrote_at_once(
    client: httpx.AsyncClient, db: Database, app: FastAPI, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "late")
    await upload_version(client, alice, "datasets", item["id"], {"shared.txt": b"kept by version 1\n"})
    await _quota(client, alice, 64 << 10)
    blobs = _blob_count(app)
    new = os.urandom(16) + bytes(256 << 10)  # new content, and a small upload that expands beyond the quota
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in (("shared.txt", b"kept by version 1\n"), ("new.bin", new)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    # The quota read before expansion is stale (as when a concurrent commit used the room meanwhile): the
    # archive expands, and the commit's own check in its transaction refuses it.
    monkeypatch.setattr("aicenter.services.catalog._uploads.storage_room", _no_room_known)

    upload = await start_upload(client, alice, "datasets", item["id"], {"data.tgz": out.getvalue()}, archive="tar.gz")
    await send_all(client, alice, upload, [out.getvalue()])
    r = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)

    assert (r.status_code, r.json()["error"]["code"]) == (409, "quota_exceeded"), r.text
    assert _blob_count(app) == blobs  # the new file and the archive are gone; version 1's blob stays
    assert await _versions(client, alice, item["id"]) == [1]
    v1 = await client.get(f"{API}/datasets/{item['id']}/versions/1/files/shared.txt", headers=alice.headers)
    assert v1.content == b"kept by version 1\n"
    # The session stays open with its staged archive: once there is room, the same commit succeeds.
    await _quota(client, alice, 1 << 20)
    again = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=alice.headers)
    assert again.status_code == 201, again.text
    v2 = await client.get(f"{API}/datasets/{item['id']}/versions/2/files/new.bin", headers=alice.headers)
    assert v2.content == new


async def _no_room_known(*_: Any) -> None:
    return None
