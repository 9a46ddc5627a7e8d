"""Helpers of the catalog API tests: items, uploads over HTTP (parts and bundles), as a client would send them."""

from __future__ import annotations

import hashlib
from typing import Any

import httpx

from aicenter.db.engine import Database
from aicenter.services import members
from tests.factories import ADMIN, Login

API = "/api/v1"


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def bundle(files: dict[int, bytes]) -> bytes:
    """A bundle body: each file as a 48-byte header (index, size, reserved: 16 hex digits each), then its bytes."""
    return b"".join(f"{index:016x}{len(data):016x}{0:016x}".encode() + data for index, data in files.items())


async def workspace_of(client: httpx.AsyncClient, user: Login) -> int:
    me = await client.get(f"{API}/users/me", headers=user.headers)
    workspace_id: int = me.json()["default_workspace_id"]
    return workspace_id


async def add_member(db: Database, workspace_id: int, username: str) -> None:
    async with db.write() as session:
        await members.add_member(session, ADMIN, workspace_id, username=username)


async def create_item(client: httpx.AsyncClient, user: Login, plural: str, name: str, **extra: Any) -> dict[str, Any]:
    r = await client.post(f"{API}/{plural}", json={"name": name, **extra}, headers=user.headers)
    assert r.status_code == 201, r.text
    item: dict[str, Any] = r.json()
    return item


async def start_upload(
    client: httpx.AsyncClient,
    user: Login,
    plural: str,
    item_id: int,
    files: dict[str, bytes],
    *,
    declare_hashes: bool = True,
    **extra: Any,
) -> dict[str, Any]:
    declared = [
        {"path": path, "size": len(data), **({"sha256": sha(data)} if declare_hashes else {})}
        for path, data in files.items()
    ]
    r = await client.post(f"{API}/{plural}/{item_id}/uploads", json={"files": declared, **extra}, headers=user.headers)
    assert r.status_code == 201, r.text
    upload: dict[str, Any] = r.json()
    return upload


async def put_part(
    client: httpx.AsyncClient, user: Login, upload_id: int, index: int, part: int, data: bytes
) -> httpx.Response:
    return await client.put(
        f"{API}/uploads/{upload_id}/files/{index}/parts/{part}",
        content=data,
        headers={**user.headers, "X-Part-Sha256": sha(data)},
    )


async def post_bundle(client: httpx.AsyncClient, user: Login, upload_id: int, body: bytes) -> httpx.Response:
    return await client.post(
        f"{API}/uploads/{upload_id}/bundle",
        content=body,
        headers={**user.headers, "Content-Type": "application/octet-stream"},
    )


async def send_all(client: httpx.AsyncClient, user: Login, upload: dict[str, Any], contents: list[bytes]) -> None:
    """Send every needed file: in parts when larger than a part, else all small ones in one bundle."""
    part_size = int(upload["part_size"])
    small: dict[int, bytes] = {}
    for index in upload["needed"]:
        data = contents[index]
        if len(data) <= part_size:
            small[index] = data
            continue
        for part in range(max(1, -(-len(data) // part_size))):
            r = await put_part(client, user, upload["id"], index, part, data[part * part_size : (part + 1) * part_size])
            assert r.status_code == 204, r.text
    if small:
        r = await post_bundle(client, user, upload["id"], bundle(small))
        assert r.status_code == 200, r.text
        assert sorted(r.json()["received"]) == sorted(small)


async def upload_version(
    client: httpx.AsyncClient, user: Login, plural: str, item_id: int, files: dict[str, bytes], **extra: Any
) -> dict[str, Any]:
    """A new version with these files, through start, parts/bundle and commit."""
    upload = await start_upload(client, user, plural, item_id, files, **extra)
    await send_all(client, user, upload, list(files.values()))
    r = await client.post(f"{API}/uploads/{upload['id']}/commit", headers=user.headers)
    assert r.status_code == 201, r.text
    version: dict[str, Any] = r.json()
    return version
