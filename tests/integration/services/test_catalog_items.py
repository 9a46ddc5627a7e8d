"""Catalog items: create, scopes and visibility, update, delete, list filters, pagination, query count."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import event, select

from aicenter.core.catalog import ItemKind, Scope, Visibility
from aicenter.core.errors import Conflict, Forbidden, InUse, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion
from aicenter.services import catalog
from tests.integration.services.catalog_helpers import DS, audit_actions, new_item, new_version, people


@contextmanager
def count_queries(db: Database) -> Iterator[list[str]]:
    statements: list[str] = []

    def before(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement)

    event.listen(db.engine.sync_engine, "before_cursor_execute", before)
    try:
        yield statements
    finally:
        event.remove(db.engine.sync_engine, "before_cursor_execute", before)


async def _list(db: Database, actor: Any, **kwargs: Any) -> list[str]:
    async with db.read() as session:
        page = await catalog.list_items(session, actor, DS, **kwargs)
    return [view.name for view in page.items]


async def test_create_item_defaults_and_audit(db: Database) -> None:
    p = await people(db)
    view = await new_item(db, p.alice, "imagenet-mini", description="Tiny", tags=["vision", "vision", "small"])
    assert view.workspace_id == p.ws
    assert view.owner_name == "alice"
    assert view.workspace_name == "alice"
    assert view.tags == ["vision", "small"]
    assert view.metadata == {"data_type": "other"}
    assert (view.version_count, view.latest_version, view.is_preset) == (0, None, False)
    assert await audit_actions(db, "dataset.") == ["dataset.create"]
    async with db.read() as session:
        item = await session.get(CatalogItem, view.id)
        assert item is not None
        assert item.namespace == f"user:{p.alice.user_id}"

    with pytest.raises(Conflict) as exc:
        await new_item(db, p.alice, "imagenet-mini")
    assert exc.value.details == {"field": "name"}
    # Names are per owner: bob may use the same name; other kinds are separate namespaces too.
    await new_item(db, p.bob, "imagenet-mini")
    await new_item(db, p.alice, "imagenet-mini", kind=ItemKind.MODEL)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"name": "Bad Name"}, "name"),
        ({"name": "ok", "tags": ["Not A Tag"]}, "tags[0]"),
        ({"name": "ok", "metadata": {"data_type": "smell"}}, "metadata.data_type"),
        ({"name": "ok", "metadata": {"unknown": 1}}, "metadata.unknown"),
        ({"name": "ok", "description": "x" * 5000}, "description"),
    ],
)
async def test_create_item_rejects_bad_input(db: Database, kwargs: dict[str, Any], field: str) -> None:
    p = await people(db)
    with pytest.raises(ValidationFailed) as exc:
        await new_item(db, p.alice, **kwargs)
    assert exc.value.details["field"] == field
    async with db.read() as session:
        assert (await session.scalars(select(CatalogItem))).all() == []


async def test_create_item_workspace_and_preset_rules(db: Database) -> None:
    p = await people(db)
    with pytest.raises(NotFound):
        await new_item(db, p.carol, "x", workspace_id=p.ws)  # not a member
    view = await new_item(db, p.bob, "in-alice-ws", workspace_id=p.ws)  # bob is a member
    assert view.workspace_id == p.ws
    with pytest.raises(Forbidden):
        await new_item(db, p.root, "x", workspace_id=p.ws)  # admins act only where they are members
    with pytest.raises(Forbidden):
        await new_item(db, p.alice, "resnet", preset=True)
    preset = await new_item(db, p.root, "resnet", preset=True)
    assert (preset.is_preset, preset.workspace_id) == (True, None)
    with pytest.raises(ValidationFailed) as exc:
        await new_item(db, p.alice, "img", kind=ItemKind.IMAGE, metadata={"image_type": "docker"})
    assert exc.value.details["field"] == "metadata.image_type"


async def test_visibility_of_items(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "private-data")
    await new_version(db, p.alice, item.id)
    await new_version(db, p.alice, item.id)
    async with db.read() as session:
        assert (await catalog.get_item(session, p.alice, DS, item.id)).version_count == 2
        # Platform admins see the metadata of every item (all versions counted).
        admin_view = await catalog.get_item(session, p.root, DS, item.id)
        assert (admin_view.version_count, admin_view.latest_version) == (2, 2)
        for outsider in (p.bob, p.carol):
            with pytest.raises(NotFound):
                await catalog.get_item(session, outsider, DS, item.id)
        with pytest.raises(NotFound):  # the right id of the wrong kind
            await catalog.get_item(session, p.alice, ItemKind.MODEL, item.id)

    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, item.id, 1, visibility=Visibility.WORKSPACE)
    async with db.read() as session:
        bob_view = await catalog.get_item(session, p.bob, DS, item.id)
        assert (bob_view.version_count, bob_view.latest_version) == (1, 1)  # only what bob can see
        with pytest.raises(NotFound):
            await catalog.get_item(session, p.carol, DS, item.id)

    assert await _list(db, p.bob, scope=Scope.WORKSPACE) == ["private-data"]
    assert await _list(db, p.bob, scope=Scope.WORKSPACE, workspace_id=p.ws) == ["private-data"]
    assert await _list(db, p.bob, scope=Scope.WORKSPACE, workspace_id=p.bob_ws) == []
    assert await _list(db, p.carol, scope=Scope.WORKSPACE) == []
    with pytest.raises(NotFound):
        await _list(db, p.carol, scope=Scope.WORKSPACE, workspace_id=p.ws)
    assert await _list(db, p.bob, scope=Scope.MINE) == []
    assert await _list(db, p.alice, scope=Scope.MINE) == ["private-data"]


async def test_public_preset_and_all_scopes(db: Database) -> None:
    p = await people(db)
    shared = await new_item(db, p.alice, "mart-data")
    await new_version(db, p.alice, shared.id)
    await new_item(db, p.alice, "hidden-data")
    preset = await new_item(db, p.root, "coco", preset=True)
    await new_version(db, p.root, preset.id)
    async with db.write() as session:
        await catalog.share_version(session, p.alice, DS, shared.id, 1, visibility=Visibility.PUBLIC)

    assert await _list(db, p.carol, scope=Scope.PUBLIC) == ["mart-data"]
    assert await _list(db, p.carol, scope=Scope.PRESET) == ["coco"]
    async with db.read() as session:
        assert (await catalog.get_item(session, p.carol, DS, preset.id)).latest_version == 1
        assert (await catalog.get_item(session, p.carol, DS, shared.id)).name == "mart-data"
    with pytest.raises(Forbidden):
        await _list(db, p.alice, scope=Scope.ALL)
    assert sorted(await _list(db, p.root, scope=Scope.ALL)) == ["coco", "hidden-data", "mart-data"]
    assert sorted(await _list(db, p.root, scope=Scope.ALL, workspace_id=p.ws)) == ["hidden-data", "mart-data"]
    # An admin's own list does not include the presets they manage.
    assert await _list(db, p.root, scope=Scope.MINE) == []


async def test_update_item(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "old-name")
    await new_item(db, p.alice, "taken")
    async with db.write() as session:
        view = await catalog.update_item(
            session, p.alice, DS, item.id, name="new-name", tags=["a", "b"], metadata={"data_type": "image"}
        )
    assert (view.name, view.tags, view.metadata) == ("new-name", ["a", "b"], {"data_type": "image"})
    assert view.description == ""
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.update_item(session, p.alice, DS, item.id, name="taken")
    with pytest.raises(NotFound):
        async with db.write() as session:
            await catalog.update_item(session, p.carol, DS, item.id, description="mine now")
    with pytest.raises(Forbidden):  # admins see it, but may not change a user's item
        async with db.write() as session:
            await catalog.update_item(session, p.root, DS, item.id, description="admin")
    async with db.read() as session:
        assert (await catalog.get_item(session, p.alice, DS, item.id)).name == "new-name"
    assert await audit_actions(db, "dataset.update") == ["dataset.update"]


async def test_image_type_is_fixed_once_versions_exist(db: Database) -> None:
    p = await people(db)
    img = await new_item(db, p.alice, "env", kind=ItemKind.IMAGE, metadata={"image_type": "container"})
    async with db.write() as session:  # no versions yet: may change
        await catalog.update_item(session, p.alice, ItemKind.IMAGE, img.id, metadata={"image_type": "venv"})
        await catalog.update_item(session, p.alice, ItemKind.IMAGE, img.id, metadata={"image_type": "container"})
    await new_version(db, p.alice, img.id, kind=ItemKind.IMAGE, metadata={"reference": "python:3.11"})
    with pytest.raises(Conflict):
        async with db.write() as session:
            await catalog.update_item(session, p.alice, ItemKind.IMAGE, img.id, metadata={"image_type": "venv"})


async def test_delete_item_in_use_then_deleted(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "used-data")
    first = await new_version(db, p.alice, item.id)
    await new_version(db, p.alice, item.id)

    async def jobs(_session: Any, version_ids: list[int]) -> dict[int, list[str]]:
        return {first.id: ["job 42 (running)"]} if first.id in version_ids else {}

    catalog.VERSION_USERS.append(jobs)
    try:
        with pytest.raises(InUse) as exc:
            async with db.write() as session:
                await catalog.delete_item(session, p.alice, DS, item.id)
        assert exc.value.message == "version used-data:1 is used by job 42 (running)"
        assert exc.value.details["users"] == ["job 42 (running)"]
    finally:
        catalog.VERSION_USERS.remove(jobs)
    with pytest.raises(NotFound):
        async with db.write() as session:
            await catalog.delete_item(session, p.carol, DS, item.id)
    async with db.write() as session:
        await catalog.delete_item(session, p.alice, DS, item.id)
    async with db.read() as session:
        assert (await session.scalars(select(CatalogVersion))).all() == []
        with pytest.raises(NotFound):
            await catalog.get_item(session, p.alice, DS, item.id)
    assert await audit_actions(db, "dataset.delete") == ["dataset.delete"]


async def test_query_and_tag_filters(db: Database) -> None:
    p = await people(db)
    await new_item(db, p.alice, "cats", description="Pictures of CATS", tags=["vision"])
    await new_item(db, p.alice, "dogs_v2", description="100% dogs", tags=["vision", "dogs"])
    await new_item(db, p.alice, "dogsv2", description="text", tags=["nlp"])
    assert await _list(db, p.alice, q="cats", sort="name") == ["cats"]
    assert await _list(db, p.alice, q="CAT", sort="name") == ["cats"]
    # "_" and "%" are text, not LIKE patterns.
    assert await _list(db, p.alice, q="dogs_", sort="name") == ["dogs_v2"]
    assert await _list(db, p.alice, q="100%", sort="name") == ["dogs_v2"]
    assert await _list(db, p.alice, tag="vision", sort="name") == ["cats", "dogs_v2"]
    assert await _list(db, p.alice, tag="dogs", sort="name") == ["dogs_v2"]
    assert await _list(db, p.alice, tag="vis", sort="name") == []
    assert await _list(db, p.alice, tag="vision", q="dogs", sort="name") == ["dogs_v2"]


async def test_sorts_and_pagination(db: Database) -> None:
    p = await people(db)
    names = ["delta", "alpha", "echo", "charlie", "bravo", "foxtrot", "golf"]
    for name in names:
        await new_item(db, p.alice, name)
    async with db.write() as session:  # touch "alpha": it becomes the most recently updated
        await catalog.update_item(session, p.alice, DS, (await _item_id(session, "alpha")), description="new")

    async def walk(sort: str, limit: int) -> list[str]:
        seen: list[str] = []
        cursor: str | None = None
        while True:
            async with db.read() as session:
                page = await catalog.list_items(session, p.alice, DS, sort=sort, limit=limit, cursor=cursor)
            seen.extend(v.name for v in page.items)
            assert len(page.items) <= limit
            if page.next_cursor is None:
                return seen
            cursor = page.next_cursor

    assert await walk("name", 3) == sorted(names)
    assert await walk("-name", 2) == sorted(names, reverse=True)
    assert await walk("created_at", 3) == names
    assert await walk("-created_at", 4) == names[::-1]
    assert (await walk("-updated_at", 3))[0] == "alpha"
    assert (await walk("updated_at", 5))[-1] == "alpha"
    assert sorted(await walk("-updated_at", 1)) == sorted(names)

    async with db.read() as session:
        first = await catalog.list_items(session, p.alice, DS, sort="name", limit=2)
        assert first.next_cursor is not None
        with pytest.raises(ValidationFailed) as exc:  # a cursor of another sort is refused, not misread
            await catalog.list_items(session, p.alice, DS, sort="-name", limit=2, cursor=first.next_cursor)
        assert exc.value.details["field"] == "cursor"
        with pytest.raises(ValidationFailed):
            await catalog.list_items(session, p.alice, DS, sort="size", limit=2)
        with pytest.raises(ValidationFailed):
            await catalog.list_items(session, p.alice, DS, cursor="garbage!")
        with pytest.raises(ValidationFailed):
            await catalog.list_items(session, p.alice, DS, limit=0)


async def _item_id(session: Any, name: str) -> int:
    item_id = await session.scalar(select(CatalogItem.id).where(CatalogItem.name == name))
    assert item_id is not None
    return int(item_id)


async def test_list_page_costs_a_fixed_number_of_queries(db: Database) -> None:
    p = await people(db)
    for i in range(50):
        item = await new_item(db, p.alice, f"item-{i:02d}", workspace_id=p.ws)
        await new_version(db, p.alice, item.id)
        async with db.write() as session:
            await catalog.share_version(session, p.alice, DS, item.id, 1, visibility=Visibility.WORKSPACE)

    async def cost(actor: Any, limit: int, scope: Scope) -> int:
        async with db.read() as session:
            with count_queries(db) as statements:
                page = await catalog.list_items(session, actor, DS, scope=scope, limit=limit)
            assert len(page.items) == limit
        return len(statements)

    for actor, scope in ((p.alice, Scope.MINE), (p.bob, Scope.WORKSPACE), (p.root, Scope.ALL)):
        # The fewest of two runs: a connection the pool opens afresh, or a cache refilled, may add a statement
        # to either run whatever its page size; a cost that grew with the page would show in both.
        small = min([await cost(actor, 5, scope), await cost(actor, 5, scope)])
        large = min([await cost(actor, 50, scope), await cost(actor, 50, scope)])
        assert small == large, (actor.username, small, large)
        assert large <= 5, large

    async with db.read() as session:
        item_id = await _item_id(session, "item-07")
        with count_queries(db) as statements:
            versions = await catalog.list_versions(session, p.bob, DS, item_id)
        assert len(versions.items) == 1
        assert len(statements) <= 5
