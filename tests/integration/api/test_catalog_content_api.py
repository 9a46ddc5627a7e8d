"""Reading a version's content over HTTP on SQLite and PostgreSQL: file lists, downloads with ranges, tar
archives, previews; and who may read content at all, proven for every content endpoint of every kind."""

from __future__ import annotations

import io
import os
import re
import tarfile
from typing import Any

import httpx
from fastapi import FastAPI

from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from aicenter.services import catalog
from tests.factories import Login, admin_login, make_user
from tests.integration.api._catalog import API, add_member, create_item, sha, upload_version, workspace_of

FILES = {
    "README.md": b"# Flowers\n\nfive classes\n",
    "data/train.csv": b"name,label\nrose,1\ntulip,2\n",
    "data/blob.bin": os.urandom(5000),
    "caf\u00e9 menu.txt": "cr\u00e8me br\u00fbl\u00e9e\n".encode(),
}


async def _flowers(client: httpx.AsyncClient, db: Database) -> tuple[Login, str]:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "flowers")
    await upload_version(client, alice, "datasets", item["id"], FILES)
    return alice, f"{API}/datasets/{item['id']}/versions/1"


async def test_list_and_download_files(client: httpx.AsyncClient, db: Database) -> None:
    alice, base = await _flowers(client, db)
    listed = (await client.get(f"{base}/files", headers=alice.headers)).json()
    assert [f["path"] for f in listed["items"]] == sorted(FILES)
    assert {f["path"]: (f["size"], f["sha256"]) for f in listed["items"]} == {
        p: (len(d), sha(d)) for p, d in FILES.items()
    }
    prefixed = (await client.get(f"{base}/files", params={"prefix": "data/"}, headers=alice.headers)).json()
    assert [f["path"] for f in prefixed["items"]] == ["data/blob.bin", "data/train.csv"]
    paged = (await client.get(f"{base}/files", params={"limit": 2}, headers=alice.headers)).json()
    assert len(paged["items"]) == 2
    assert paged["next_cursor"] is not None
    rest = await client.get(f"{base}/files", params={"limit": 2, "cursor": paged["next_cursor"]}, headers=alice.headers)
    assert [f["path"] for f in paged["items"] + rest.json()["items"]] == sorted(FILES)
    too_many = await client.get(f"{base}/files", params={"limit": 1001}, headers=alice.headers)
    assert (too_many.status_code, too_many.json()["error"]["details"]["field"]) == (422, "limit")

    for path, data in FILES.items():
        r = await client.get(f"{base}/files/{path}", headers=alice.headers)
        assert r.status_code == 200, (path, r.text)
        assert r.content == data
        assert r.headers["content-length"] == str(len(data))
        assert r.headers["etag"] == f'"{sha(data)}"'
        assert r.headers["accept-ranges"] == "bytes"
    csv = await client.get(f"{base}/files/data/train.csv", headers=alice.headers)
    assert csv.headers["content-type"].startswith("text/csv")
    assert csv.headers["content-disposition"] == 'attachment; filename="train.csv"'
    accented = await client.get(f"{base}/files/caf\u00e9 menu.txt", headers=alice.headers)
    assert accented.headers["content-disposition"] == "attachment; filename*=utf-8''caf%C3%A9%20menu.txt"
    missing = await client.get(f"{base}/files/data/nope.csv", headers=alice.headers)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    dots = await client.get(f"{base}/files/data/%2E%2E/README.md", headers=alice.headers)
    assert dots.status_code in (404, 422)


async def test_ranges(client: httpx.AsyncClient, db: Database) -> None:
    alice, base = await _flowers(client, db)
    data = FILES["data/blob.bin"]
    url = f"{base}/files/data/blob.bin"
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=100-199"})
    assert (r.status_code, r.content) == (206, data[100:200])
    assert r.headers["content-range"] == f"bytes 100-199/{len(data)}"
    assert r.headers["content-length"] == "100"
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=4990-"})
    assert (r.status_code, r.content) == (206, data[4990:])
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=-10"})
    assert (r.status_code, r.content) == (206, data[-10:])
    assert r.headers["content-range"] == f"bytes {len(data) - 10}-{len(data) - 1}/{len(data)}"
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=9000-9999"})
    assert r.status_code == 416
    assert r.headers["content-range"] == f"bytes */{len(data)}"
    # If-Range with the ETag resumes; with another validator the whole file comes back.
    etag = f'"{sha(data)}"'
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=10-", "If-Range": etag})
    assert (r.status_code, r.content) == (206, data[10:])
    r = await client.get(url, headers={**alice.headers, "Range": "bytes=10-", "If-Range": '"stale"'})
    assert (r.status_code, r.content) == (200, data)


def _untar(body: bytes) -> dict[str, bytes]:
    out: dict[str, bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(body), mode="r:") as tar:
        for member in tar.getmembers():
            assert member.isfile(), member.name
            extracted = tar.extractfile(member)
            assert extracted is not None
            out[member.name] = extracted.read()
    return out


async def test_archives(client: httpx.AsyncClient, db: Database) -> None:
    alice, base = await _flowers(client, db)
    whole = await client.get(f"{base}/archive", headers=alice.headers)
    assert whole.status_code == 200, whole.text
    assert whole.headers["content-type"] == "application/x-tar"
    assert whole.headers["content-disposition"] == 'attachment; filename="flowers-1.tar"'
    assert _untar(whole.content) == FILES

    subset = await client.post(
        f"{base}/archive", json={"paths": ["data/train.csv", "README.md"]}, headers=alice.headers
    )
    assert subset.status_code == 200, subset.text
    assert _untar(subset.content) == {p: FILES[p] for p in ("data/train.csv", "README.md")}
    everything = await client.post(f"{base}/archive", json={}, headers=alice.headers)
    assert _untar(everything.content) == FILES
    unknown = await client.post(f"{base}/archive", json={"paths": ["README.md", "nope"]}, headers=alice.headers)
    assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")


async def test_previews(client: httpx.AsyncClient, db: Database) -> None:
    alice, base = await _flowers(client, db)
    text = (await client.get(f"{base}/preview/README.md", headers=alice.headers)).json()
    assert (text["kind"], text["text"]) == ("text", FILES["README.md"].decode())
    csv = (await client.get(f"{base}/preview/data/train.csv", headers=alice.headers)).json()
    assert (csv["kind"], csv["rows"]) == ("csv", [["name", "label"], ["rose", "1"], ["tulip", "2"]])
    binary = (await client.get(f"{base}/preview/data/blob.bin", headers=alice.headers)).json()
    assert binary["kind"] == "binary"


# ------------------------------------------------------------------------------------ isolation of content

_CONTENT_SUFFIXES = re.compile(r"/(files|files/\{path\}|archive|preview/\{path\}|copy|build)$")
_VERSION_PATH = re.compile(r"^/api/v1/(datasets|algorithms|images|models)/\{item_id\}/versions/\{number\}(/.*)$")


def _content_operations(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every operation under a version that reads its content, from the OpenAPI document."""
    ops: list[tuple[str, str]] = []
    for path, item in app.openapi()["paths"].items():
        match = _VERSION_PATH.match(path)
        if match is None or not _CONTENT_SUFFIXES.search(match.group(2)):
            continue
        # POST .../build retries a build (a change, not a read); GET .../build reads the log.
        ops.extend((method, path) for method in item if not (match.group(2) == "/build" and method == "post"))
    return sorted(ops)


def test_content_operations_cover_every_kind(app: FastAPI) -> None:
    ops = _content_operations(app)
    for kind in ItemKind:
        mine = {(m, p.split("/versions/{number}")[1]) for m, p in ops if p.startswith(f"/api/v1/{kind.plural}/")}
        assert {
            ("get", "/files"),
            ("get", "/files/{path}"),
            ("get", "/archive"),
            ("post", "/archive"),
            ("get", "/preview/{path}"),
            ("post", "/copy"),
        } <= mine, kind
    assert ("get", "/api/v1/images/{item_id}/versions/{number}/build") in ops


BUILD_LOG = "pip install: secret-internal-package==1.0"


async def _setup_kind(app: FastAPI, client: httpx.AsyncClient, alice: Login, kind: ItemKind) -> int:
    """A private item of alice with version 1 holding README.md (images: a venv image, so it has a build,
    whose log names something private)."""
    item = await create_item(client, alice, kind.plural, f"private-{kind.value}")
    version = await upload_version(client, alice, kind.plural, item["id"], {"README.md": b"secret"})
    if kind is ItemKind.IMAGE:
        log = catalog.build_log_path(app.state.ctx.store, version["id"])
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(BUILD_LOG + "\n")
    item_id: int = item["id"]
    return item_id


async def _call(client: httpx.AsyncClient, user: Login, method: str, url: str) -> httpx.Response:
    body: dict[str, Any] | None = {"paths": ["README.md"]} if url.endswith("/archive") and method == "post" else None
    if url.endswith("/copy"):
        body = {"name": f"copy-{user.username}"}
    return await client.request(method.upper(), url, json=body, headers=user.headers)


def _read(r: httpx.Response, who: str, method: str, path: str) -> None:
    """The content was answered."""
    assert r.status_code in (200, 201), (who, method, path, r.text)
    if path.endswith("/build"):
        assert BUILD_LOG in r.json()["log_tail"], (who, r.text)


async def test_content_is_isolated_on_every_endpoint(app: FastAPI, client: httpx.AsyncClient, db: Database) -> None:
    """Platform admins: 403 on alice's private content, content once she makes it public; other members: 404.

    The build is the one answer that mixes metadata (its state, which admins see) and content (its log): for
    admins the log is left out rather than the whole answer refused.
    """
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    ops = _content_operations(app)
    assert ops
    items = {kind.plural: await _setup_kind(app, client, alice, kind) for kind in ItemKind}

    def url(path: str) -> str:
        item_id = items[path.split("/")[3]]
        return path.replace("{item_id}", str(item_id)).replace("{number}", "1").replace("{path}", "README.md")

    checked = set()
    for method, path in ops:
        r = await _call(client, admin, method, url(path))
        if path.endswith("/build"):
            assert (r.status_code, r.json()["log_tail"]) == (200, ""), r.text
        else:
            assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden"), (method, path, r.text)
            assert "not their content" in r.json()["error"]["message"]
        r = await _call(client, bob, method, url(path))
        assert (r.status_code, r.json()["error"]["code"]) == (404, "not_found"), (method, path, r.text)
        _read(await _call(client, alice, method, url(path)), "alice", method, path)
        checked.add(path.split("/")[3])
    assert checked == {kind.plural for kind in ItemKind}

    # Metadata stays readable for the admin.
    for plural, item_id in items.items():
        assert (await client.get(f"{API}/{plural}/{item_id}/versions/1", headers=admin.headers)).status_code == 200
        r = await client.post(
            f"{API}/{plural}/{item_id}/versions/1/share", json={"visibility": "public"}, headers=alice.headers
        )
        assert r.status_code == 200, r.text
    for method, path in ops:
        for user in (admin, bob):
            _read(await _call(client, user, method, url(path)), user.username, method, path)


async def test_shared_to_workspace_reads_for_members_only(client: httpx.AsyncClient, db: Database) -> None:
    alice, base = await _flowers(client, db)
    bob = await make_user(db, client, "bob")
    carol = await make_user(db, client, "carol")
    await add_member(db, await workspace_of(client, alice), "bob")
    r = await client.post(f"{base}/share", json={"visibility": "workspace"}, headers=alice.headers)
    assert r.status_code == 200, r.text
    assert (await client.get(f"{base}/files/README.md", headers=bob.headers)).content == FILES["README.md"]
    assert (await client.get(f"{base}/files/README.md", headers=carol.headers)).status_code == 404


async def test_a_blob_of_the_wrong_length_is_quarantined_not_served(
    client: httpx.AsyncClient, db: Database, app: FastAPI
) -> None:
    alice, base = await _flowers(client, db)
    store = app.state.ctx.store
    data = FILES["data/train.csv"]
    blob = store.path(sha(data))
    # What a job could do through a hard link of a mounted input before inputs were read-only mounts.
    os.chmod(blob, 0o600)
    blob.write_bytes(blob.read_bytes() + b"evil,0\n")

    r = await client.get(f"{base}/files/data/train.csv", headers=alice.headers)
    assert r.status_code == 500, r.text
    error = r.json()["error"]
    assert error["code"] == "damaged"
    assert "quarantined" in error["message"]
    assert error["details"] == {
        "sha256": sha(data),
        "problem": "length",
        "size": len(data) + 7,
        "expected": len(data),
    }
    assert b"evil" not in r.content
    assert not blob.exists()
    assert sha(data) in [p.name.split(".")[0] for p in store.quarantine_dir.iterdir()]
    # Ranges of it are refused too; what fsck says agrees: the blob is now missing, nothing is damaged.
    ranged = await client.get(f"{base}/files/data/train.csv", headers={**alice.headers, "Range": "bytes=0-3"})
    assert (ranged.status_code, ranged.json()["error"]["code"]) == (500, "damaged")
    assert ranged.json()["error"]["details"]["problem"] == "missing"
    admin = await admin_login(client)
    fsck = await client.post(f"{API}/admin/storage/fsck", json={"repair": False}, headers=admin.headers)
    assert (fsck.json()["missing"], fsck.json()["damaged"]) == ([sha(data)], [])
    for path, other in FILES.items():
        if path != "data/train.csv":
            assert (await client.get(f"{base}/files/{path}", headers=alice.headers)).content == other


async def test_a_blob_of_the_right_length_but_wrong_bytes_is_cut_short_and_quarantined(
    client: httpx.AsyncClient, db: Database, app: FastAPI
) -> None:
    alice, base = await _flowers(client, db)
    store = app.state.ctx.store
    data = FILES["data/blob.bin"]
    blob = store.path(sha(data))
    os.chmod(blob, 0o600)
    blob.write_bytes(b"X" + data[1:])  # same length: only hashing while it streams can tell

    # The response has started (200, Content-Length) when the hash is known: the server breaks it off, and the
    # held-back last bytes (here the only piece) never leave.
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url=client.base_url) as raw:
        cut = await raw.get(f"{base}/files/data/blob.bin", headers=alice.headers)
    assert (cut.status_code, cut.headers["content-length"], cut.content) == (200, str(len(data)), b"")
    assert not blob.exists()
    admin = await admin_login(client)
    fsck = await client.post(f"{API}/admin/storage/fsck", json={"repair": False}, headers=admin.headers)
    assert (fsck.json()["missing"], fsck.json()["damaged"]) == ([sha(data)], [])
    again = await client.get(f"{base}/files/data/blob.bin", headers=alice.headers)
    assert (again.status_code, again.json()["error"]["code"]) == (500, "damaged")
    intact = await client.get(f"{base}/files/README.md", headers=alice.headers)
    assert intact.content == FILES["README.md"]


async def test_a_large_download_is_verified_piece_by_piece_and_held_back_at_the_end(
    client: httpx.AsyncClient, db: Database, app: FastAPI
) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "datasets", "large")
    big = os.urandom((5 << 20) // 2)  # 2.5 MiB: two full 1 MiB pieces and a half one
    other = os.urandom(len(big))
    await upload_version(client, alice, "datasets", item["id"], {"big.bin": big, "other.bin": other})
    base = f"{API}/datasets/{item['id']}/versions/1"
    whole = await client.get(f"{base}/files/other.bin", headers=alice.headers)
    assert whole.content == other

    blob = app.state.ctx.store.path(sha(big))
    os.chmod(blob, 0o600)
    blob.write_bytes(big[:-1] + bytes([big[-1] ^ 1]))  # the last byte flipped
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False, client=("127.0.0.1", 50000))
    async with httpx.AsyncClient(transport=transport, base_url=client.base_url) as raw:
        cut = await raw.get(f"{base}/files/big.bin", headers=alice.headers)
    assert cut.status_code == 200
    # The pieces before the last went out; the last, which completes the hash, did not.
    assert cut.content == big[: 2 << 20]
    assert not blob.exists()
