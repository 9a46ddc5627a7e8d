"""Catalog items and versions over HTTP on SQLite and PostgreSQL: CRUD for every kind, scopes, search, tags,
sort and pagination, versions (numbering, sharing, copies, in-use refusal), image builds, resolve, storage."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from aicenter.services import catalog
from tests.factories import Login, admin_login, make_user
from tests.integration.api._catalog import API, add_member, create_item, upload_version, workspace_of

KINDS = [kind.plural for kind in ItemKind]


async def _names(client: httpx.AsyncClient, user: Login, plural: str, **params: Any) -> list[str]:
    r = await client.get(f"{API}/{plural}", params=params, headers=user.headers)
    assert r.status_code == 200, r.text
    return [item["name"] for item in r.json()["items"]]


@pytest.mark.parametrize("plural", KINDS)
async def test_item_crud(client: httpx.AsyncClient, db: Database, plural: str) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, plural, "first", description="Some things", tags=["a", "b"])
    assert item["kind"] == plural[:-1]
    assert (item["owner_name"], item["workspace_name"], item["is_preset"]) == ("alice", "alice", False)
    assert (item["version_count"], item["latest_version"], item["tags"]) == (0, None, ["a", "b"])
    assert isinstance(item["metadata"], dict)

    url = f"{API}/{plural}/{item['id']}"
    assert (await client.get(url, headers=alice.headers)).json() == item
    assert await _names(client, alice, plural) == ["first"]

    r = await client.patch(url, json={"name": "second", "description": "Other", "tags": ["c"]}, headers=alice.headers)
    assert r.status_code == 200, r.text
    assert (r.json()["name"], r.json()["description"], r.json()["tags"]) == ("second", "Other", ["c"])

    # Bad input changes nothing.
    for body, field in (({"name": "Bad Name"}, "name"), ({"tags": None}, "tags"), ({"colour": "red"}, "colour")):
        bad = await client.patch(url, json=body, headers=alice.headers)
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"]["details"]["field"] == field
    bad = await client.post(f"{API}/{plural}", json={"name": "../x"}, headers=alice.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "name")
    dup = await client.post(f"{API}/{plural}", json={"name": "second"}, headers=alice.headers)
    assert (dup.status_code, dup.json()["error"]["code"]) == (409, "conflict")
    assert (await client.get(url, headers=alice.headers)).json()["name"] == "second"

    # Other users neither see nor change it.
    bob = await make_user(db, client, "bob")
    assert (await client.get(url, headers=bob.headers)).status_code == 404
    assert (await client.patch(url, json={"description": "x"}, headers=bob.headers)).status_code == 404
    assert (await client.delete(url, headers=bob.headers)).status_code == 404
    # The same name in another user's namespace is fine.
    await create_item(client, bob, plural, "second")

    assert (await client.delete(url, headers=alice.headers)).status_code == 204
    assert (await client.get(url, headers=alice.headers)).status_code == 404
    assert await _names(client, alice, plural) == []


async def test_scopes_search_tags_sort_and_pages(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    for name, tags, description in (
        ("cifar", ["vision"], "Tiny images"),
        ("imagenet", ["vision", "big"], "Large images"),
        ("squad", ["nlp"], "Questions"),
    ):
        await create_item(client, alice, "datasets", name, tags=tags, description=description)
    assert await _names(client, alice, "datasets", sort="name") == ["cifar", "imagenet", "squad"]
    assert await _names(client, alice, "datasets", sort="-name") == ["squad", "imagenet", "cifar"]
    assert await _names(client, alice, "datasets", sort="created_at") == ["cifar", "imagenet", "squad"]
    assert await _names(client, alice, "datasets", q="IMAGES", sort="name") == ["cifar", "imagenet"]
    assert await _names(client, alice, "datasets", q="%", sort="name") == []
    assert await _names(client, alice, "datasets", tag="vision", sort="name") == ["cifar", "imagenet"]
    assert await _names(client, alice, "datasets", tag="nlp") == ["squad"]

    # Pages follow the sort, without overlap.
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, Any] = {"sort": "name", "limit": 2, **({"cursor": cursor} if cursor else {})}
        page = (await client.get(f"{API}/datasets", params=params, headers=alice.headers)).json()
        seen += [i["name"] for i in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ["cifar", "imagenet", "squad"]
    bad = await client.get(f"{API}/datasets", params={"cursor": "nonsense"}, headers=alice.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "cursor")
    bad = await client.get(f"{API}/datasets", params={"sort": "size"}, headers=alice.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "sort")

    # Public: items with a public version; bob sees them but not alice's private ones.
    items = {i["name"]: i for i in (await client.get(f"{API}/datasets", headers=alice.headers)).json()["items"]}
    cifar = items["cifar"]["id"]
    assert (await client.post(f"{API}/datasets/{cifar}/versions", json={}, headers=alice.headers)).status_code == 201
    r = await client.post(
        f"{API}/datasets/{cifar}/versions/1/share", json={"visibility": "public"}, headers=alice.headers
    )
    assert r.status_code == 200, r.text
    assert await _names(client, bob, "datasets", scope="public") == ["cifar"]
    assert await _names(client, bob, "datasets") == []
    assert (await client.get(f"{API}/datasets/{cifar}", headers=bob.headers)).json()["latest_version"] == 1
    assert (await client.get(f"{API}/datasets/{items['squad']['id']}", headers=bob.headers)).status_code == 404

    # Workspace: shared to a workspace bob is a member of.
    await add_member(db, await workspace_of(client, alice), "bob")
    squad = items["squad"]["id"]
    await client.post(f"{API}/datasets/{squad}/versions", json={}, headers=alice.headers)
    r = await client.post(
        f"{API}/datasets/{squad}/versions/1/share", json={"visibility": "workspace"}, headers=alice.headers
    )
    assert r.json()["visibility"] == "workspace"
    assert r.json()["shared_workspace_name"] == "alice"
    assert await _names(client, bob, "datasets", scope="workspace") == ["squad"]

    # Preset: created by platform admins, seen by everyone.
    preset = await create_item(client, admin, "datasets", "mnist", preset=True)
    assert preset["is_preset"] is True
    assert preset["workspace_id"] is None
    assert await _names(client, bob, "datasets", scope="preset") == ["mnist"]
    refused = await client.post(f"{API}/datasets", json={"name": "fake", "preset": True}, headers=bob.headers)
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "forbidden")

    # All: platform admins only (metadata of every item).
    assert len(await _names(client, admin, "datasets", scope="all")) == 4
    r = await client.get(f"{API}/datasets", params={"scope": "all"}, headers=bob.headers)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "forbidden")
    r = await client.get(f"{API}/datasets", params={"scope": "everything"}, headers=bob.headers)
    assert (r.status_code, r.json()["error"]["details"]["field"]) == (422, "scope")


@pytest.fixture
def in_use_hook() -> Iterator[set[int]]:
    """A VERSION_USERS hook, as the jobs area registers one, reporting the version ids put in the set."""
    used: set[int] = set()

    async def hook(session: AsyncSession, version_ids: list[int]) -> dict[int, list[str]]:
        return {vid: ["job 42 (running)"] for vid in version_ids if vid in used}

    catalog.VERSION_USERS.append(hook)
    try:
        yield used
    finally:
        catalog.VERSION_USERS.remove(hook)


async def test_versions_share_copy_delete(client: httpx.AsyncClient, db: Database, in_use_hook: set[int]) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    item = await create_item(client, alice, "datasets", "flowers")
    base = f"{API}/datasets/{item['id']}/versions"
    v1 = await upload_version(client, alice, "datasets", item["id"], {"a.txt": b"alpha", "b/c.txt": b"gamma"})
    assert (v1["number"], v1["ref"], v1["file_count"], v1["size_bytes"]) == (1, "flowers:1", 2, 10)
    assert (v1["visibility"], v1["state"], v1["can_read_content"]) == ("private", "ready", True)
    r = await client.post(base, json={"description": "empty"}, headers=alice.headers)
    assert r.status_code == 201, r.text
    assert (r.json()["number"], r.json()["file_count"]) == (2, 0)

    r = await client.patch(f"{base}/1", json={"description": "Flowers, v1"}, headers=alice.headers)
    assert (r.status_code, r.json()["description"]) == (200, "Flowers, v1")
    r = await client.patch(f"{base}/1", json={"metadata": {"files": 3}}, headers=alice.headers)
    assert (r.status_code, r.json()["error"]["details"]["field"]) == (422, "metadata.files")
    versions = (await client.get(base, headers=alice.headers)).json()["items"]
    assert [v["number"] for v in versions] == [2, 1]

    # Private: bob sees nothing; public: he sees, reads and copies it.
    assert (await client.get(f"{base}/1", headers=bob.headers)).status_code == 404
    assert (await client.post(f"{base}/1/copy", json={}, headers=bob.headers)).status_code == 404
    refused = await client.post(f"{base}/1/share", json={"visibility": "public"}, headers=bob.headers)
    assert refused.status_code == 404
    bad = await client.post(f"{base}/1/share", json={"visibility": "preset"}, headers=alice.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "visibility")
    shared = await client.post(f"{base}/1/share", json={"visibility": "public"}, headers=alice.headers)
    assert shared.json()["visibility"] == "public"
    seen = await client.get(f"{base}/1", headers=bob.headers)
    assert (seen.status_code, seen.json()["ref"], seen.json()["can_read_content"]) == (200, "alice/flowers:1", True)
    assert [v["number"] for v in (await client.get(base, headers=bob.headers)).json()["items"]] == [1]
    copy = await client.post(f"{base}/1/copy", json={"description": "mine now"}, headers=bob.headers)
    assert copy.status_code == 201, copy.text
    copied = copy.json()
    assert (copied["ref"], copied["visibility"], copied["copied_from_id"]) == ("flowers:1", "private", v1["id"])
    assert (copied["size_bytes"], copied["manifest_sha256"]) == (v1["size_bytes"], v1["manifest_sha256"])
    assert await _names(client, bob, "datasets") == ["flowers"]

    unshared = await client.post(f"{base}/1/unshare", headers=alice.headers)
    assert unshared.json()["visibility"] == "private"
    assert (await client.get(f"{base}/1", headers=bob.headers)).status_code == 404

    # In use: refused with the user named, for the version and for the item; nothing deleted.
    in_use_hook.add(v1["id"])
    r = await client.delete(f"{base}/1", headers=alice.headers)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "in_use")
    assert "job 42 (running)" in r.json()["error"]["message"]
    r = await client.delete(f"{API}/datasets/{item['id']}", headers=alice.headers)
    assert (r.status_code, r.json()["error"]["code"]) == (409, "in_use")
    assert (await client.get(f"{base}/1", headers=alice.headers)).status_code == 200
    in_use_hook.clear()

    assert (await client.delete(f"{base}/2", headers=alice.headers)).status_code == 204
    assert (await client.delete(f"{base}/1", headers=alice.headers)).status_code == 204
    assert (await client.get(f"{base}/1", headers=alice.headers)).status_code == 404
    # Numbers are never reused.
    assert (await client.post(base, json={}, headers=alice.headers)).json()["number"] == 3


async def test_image_versions_and_builds(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    venv = await create_item(client, alice, "images", "torch-env", metadata={"image_type": "venv"})
    base = f"{API}/images/{venv['id']}/versions"
    r = await client.post(base, json={"metadata": {"python": "3.11", "requirements": ["numpy"]}}, headers=alice.headers)
    assert r.status_code == 201, r.text
    assert (r.json()["state"], r.json()["metadata"]["python"]) == ("pending", "3.11")
    build = await client.get(f"{base}/1/build", headers=alice.headers)
    assert build.status_code == 200, build.text
    assert build.json()["state"] == "pending"
    assert len(build.json()["env_hash"]) == 64
    retry = await client.post(f"{base}/1/build", headers=alice.headers)
    assert (retry.status_code, retry.json()["error"]["code"]) == (409, "conflict")
    bad = await client.post(base, json={"metadata": {"python": "2.7"}}, headers=alice.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "metadata.python")

    container = await create_item(client, alice, "images", "ngc", metadata={"image_type": "container"})
    r = await client.post(
        f"{API}/images/{container['id']}/versions",
        json={"metadata": {"reference": "nvcr.io/nvidia/pytorch:24.01-py3"}},
        headers=alice.headers,
    )
    assert (r.status_code, r.json()["state"]) == (201, "ready")

    # Builds exist only under /images.
    dataset = await create_item(client, alice, "datasets", "d")
    r = await client.get(f"{API}/datasets/{dataset['id']}/versions/1/build", headers=alice.headers)
    assert r.status_code in (404, 405)


async def test_resolve(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    item = await create_item(client, alice, "models", "resnet")
    await client.post(f"{API}/models/{item['id']}/versions", json={}, headers=alice.headers)
    await client.post(f"{API}/models/{item['id']}/versions", json={}, headers=alice.headers)
    for ref, number in (("resnet:1", 1), ("resnet", 2), ("alice/resnet:1", 1)):
        r = await client.get(f"{API}/catalog/resolve", params={"kind": "model", "ref": ref}, headers=alice.headers)
        assert r.status_code == 200, r.text
        assert (r.json()["item_id"], r.json()["number"]) == (item["id"], number)
    r = await client.get(f"{API}/catalog/resolve", params={"kind": "dataset", "ref": "resnet"}, headers=alice.headers)
    assert r.status_code == 404
    r = await client.get(f"{API}/catalog/resolve", params={"kind": "models", "ref": "resnet"}, headers=alice.headers)
    assert (r.status_code, r.json()["error"]["details"]["field"]) == (422, "kind")


async def test_resolving_a_hidden_version_id_reads_like_a_missing_one(client: httpx.AsyncClient, db: Database) -> None:
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    item = await create_item(client, alice, "models", "secret-model")
    version = (await client.post(f"{API}/models/{item['id']}/versions", json={}, headers=alice.headers)).json()
    hidden, missing, huge = f"#{version['id']}", "#987654321", f"#{10**30}"

    async def refusal(ref: str) -> tuple[int, dict[str, Any]]:
        r = await client.get(f"{API}/catalog/resolve", params={"kind": "model", "ref": ref}, headers=bob.headers)
        return r.status_code, r.json()["error"]

    (status, error), (missing_status, missing_error) = await refusal(hidden), await refusal(missing)
    assert (status, missing_status) == (404, 404)
    # The same words apart from the id itself: nothing tells bob that the hidden version exists, nor its name.
    assert error["message"].replace(hidden, "#ID") == missing_error["message"].replace(missing, "#ID")
    assert error["details"] == missing_error["details"]
    assert "secret-model" not in error["message"]
    status, error = await refusal(huge)  # beyond any id a column holds: the same answer, not a 500
    assert (status, error["message"].replace(huge, "#ID")) == (404, missing_error["message"].replace(missing, "#ID"))
    r = await client.get(f"{API}/catalog/resolve", params={"kind": "model", "ref": hidden}, headers=alice.headers)
    assert (r.status_code, r.json()["id"]) == (200, version["id"])


async def test_storage_quota_and_admin(client: httpx.AsyncClient, db: Database) -> None:
    admin = await admin_login(client)
    alice = await make_user(db, client, "alice")
    bob = await make_user(db, client, "bob")
    workspace = await workspace_of(client, alice)
    url = f"{API}/workspaces/{workspace}/storage"
    assert (await client.get(url, headers=alice.headers)).json() == {
        "workspace_id": workspace,
        "limit_bytes": None,
        "used_bytes": 0,
    }
    item = await create_item(client, alice, "datasets", "d")
    await upload_version(client, alice, "datasets", item["id"], {"x": b"0123456789"})
    assert (await client.get(url, headers=alice.headers)).json()["used_bytes"] == 10

    r = await client.put(url, json={"limit": "10Gi"}, headers=admin.headers)
    assert (r.status_code, r.json()["limit_bytes"]) == (200, 10 * 2**30)
    r = await client.put(url, json={"limit": 4096}, headers=admin.headers)
    assert r.json()["limit_bytes"] == 4096
    bad = await client.put(url, json={"limit": "lots"}, headers=admin.headers)
    assert (bad.status_code, bad.json()["error"]["details"]["field"]) == (422, "limit")
    assert (await client.put(url, json={"limit": "1Gi"}, headers=alice.headers)).status_code == 403
    assert (await client.get(url, headers=bob.headers)).status_code in (403, 404)
    assert (await client.get(url, headers=alice.headers)).json()["limit_bytes"] == 4096
    r = await client.put(url, json={"limit": None}, headers=admin.headers)
    assert r.json()["limit_bytes"] is None

    gc = await client.post(f"{API}/admin/storage/gc", headers=admin.headers)
    assert gc.status_code == 200, gc.text
    assert set(gc.json()) == {"scanned", "deleted", "freed_bytes", "kept_young", "expired_uploads"}
    fsck = await client.post(f"{API}/admin/storage/fsck", json={"repair": False}, headers=admin.headers)
    assert fsck.status_code == 200, fsck.text
    assert fsck.json()["checked"] >= 1
    assert (fsck.json()["missing"], fsck.json()["damaged"]) == ([], [])
    assert (await client.post(f"{API}/admin/storage/gc", headers=alice.headers)).status_code == 403
    assert (await client.post(f"{API}/admin/storage/fsck", json={}, headers=alice.headers)).status_code == 403
