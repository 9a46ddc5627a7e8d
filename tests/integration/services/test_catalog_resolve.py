"""resolve_version: reference forms, the lookup order (mine, preset, shared), ambiguity and visibility."""

from __future__ import annotations

import pytest
from sqlalchemy import update

from aicenter.core.catalog import ItemKind, Visibility
from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogVersion
from aicenter.services import catalog
from aicenter.services.context import Actor
from tests.integration.services.catalog_helpers import DS, new_item, new_version, people


async def _resolve(db: Database, actor: Actor, ref: str, **kwargs: int) -> catalog.VersionView:
    async with db.read() as session:
        return await catalog.resolve_version(session, actor, DS, ref, **kwargs)


async def _share(db: Database, actor: Actor, item_id: int, number: int, visibility: Visibility) -> None:
    async with db.write() as session:
        await catalog.share_version(session, actor, DS, item_id, number, visibility=visibility)


async def test_forms_of_reference(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "mnist")
    for _ in range(3):
        await new_version(db, p.alice, item.id)
    # The newest ready version: a failed one is skipped.
    async with db.write() as session:
        await session.execute(
            update(CatalogVersion)
            .where(CatalogVersion.item_id == item.id, CatalogVersion.number == 3)
            .values(state="failed")
        )
    assert (await _resolve(db, p.alice, "mnist")).number == 2
    assert (await _resolve(db, p.alice, "mnist:3")).number == 3
    assert (await _resolve(db, p.alice, " mnist:1 ")).number == 1
    assert (await _resolve(db, p.alice, "alice/mnist:1")).number == 1
    v1 = await _resolve(db, p.alice, "mnist:1")
    assert (await _resolve(db, p.alice, f"#{v1.id}")).number == 1
    assert v1.ref == "mnist:1"
    for missing in ("mnist:9", "nothing", "bob/mnist", "nobody/mnist:1", f"#{v1.id + 1000}"):
        with pytest.raises(NotFound):
            await _resolve(db, p.alice, missing)
    for bad in ("", "mnist:x", ":3", "a/b/c:1", "/mnist", "mnist:", "#abc"):
        with pytest.raises(ValidationFailed) as exc:
            await _resolve(db, p.alice, bad)
        assert exc.value.details["field"] == "ref"
    with pytest.raises(NotFound):  # the right id of another kind
        async with db.read() as session:
            await catalog.resolve_version(session, p.alice, ItemKind.MODEL, f"#{v1.id}")


async def test_visibility_applies(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "secret")
    v1 = await new_version(db, p.alice, item.id)
    for ref in ("secret", "secret:1", "alice/secret:1", "alice/secret", f"#{v1.id}"):
        with pytest.raises(NotFound):
            await _resolve(db, p.carol, ref)
    # Admins resolve by explicit reference to read metadata; the view says they cannot read the content.
    assert not (await _resolve(db, p.root, f"#{v1.id}")).can_read_content
    await _share(db, p.alice, item.id, 1, Visibility.WORKSPACE)
    assert (await _resolve(db, p.bob, "secret")).ref == "alice/secret:1"
    assert (await _resolve(db, p.bob, "alice/secret")).number == 1
    assert (await _resolve(db, p.bob, f"#{v1.id}")).number == 1
    with pytest.raises(NotFound):
        await _resolve(db, p.carol, "secret")
    # workspace_id narrows "shared with me" to that workspace.
    assert (await _resolve(db, p.bob, "secret", workspace_id=p.ws)).number == 1
    with pytest.raises(NotFound):
        await _resolve(db, p.bob, "secret", workspace_id=p.bob_ws)


async def test_lookup_order_mine_then_preset_then_shared(db: Database) -> None:
    p = await people(db)
    shared = await new_item(db, p.alice, "resnet")
    await new_version(db, p.alice, shared.id)
    await _share(db, p.alice, shared.id, 1, Visibility.PUBLIC)
    assert (await _resolve(db, p.carol, "resnet")).owner_name == "alice"

    preset = await new_item(db, p.root, "resnet", preset=True)
    await new_version(db, p.root, preset.id)
    found = await _resolve(db, p.carol, "resnet")
    assert (found.ref, found.item_id) == ("preset/resnet:1", preset.id)
    assert (await _resolve(db, p.carol, "preset/resnet:1")).item_id == preset.id
    assert (await _resolve(db, p.carol, "alice/resnet")).item_id == shared.id

    mine = await new_item(db, p.carol, "resnet")
    # carol's own item has no version yet: the lookup goes on to the preset.
    assert (await _resolve(db, p.carol, "resnet")).item_id == preset.id
    await new_version(db, p.carol, mine.id)
    assert (await _resolve(db, p.carol, "resnet")).item_id == mine.id
    # The preset has no version 2, and a number looks only for that number.
    await new_version(db, p.carol, mine.id)
    assert (await _resolve(db, p.carol, "resnet:2")).item_id == mine.id


async def test_ambiguous_shared_names(db: Database) -> None:
    p = await people(db)
    for owner in (p.alice, p.bob):
        item = await new_item(db, owner, "imagenet")
        await new_version(db, owner, item.id)
        await _share(db, owner, item.id, 1, Visibility.PUBLIC)
    with pytest.raises(Conflict) as exc:
        await _resolve(db, p.carol, "imagenet")
    assert exc.value.details["candidates"] == ["alice/imagenet", "bob/imagenet"]
    assert "alice/imagenet, bob/imagenet" in exc.value.message
    assert (await _resolve(db, p.carol, "bob/imagenet")).owner_name == "bob"
    # For alice, her own item wins: no ambiguity.
    assert (await _resolve(db, p.alice, "imagenet")).owner_name == "alice"
