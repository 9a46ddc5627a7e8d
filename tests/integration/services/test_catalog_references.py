"""Messages name versions as users write them (``linreg-model:1``), never by their row id."""

from __future__ import annotations

import pytest

from aicenter.core.errors import NotFound
from aicenter.db.engine import Database
from aicenter.services import catalog
from tests.integration.services.catalog_helpers import DS, new_item, new_version, people


async def test_a_version_id_reads_back_as_name_and_number(db: Database) -> None:
    p = await people(db)
    await new_item(db, p.alice, "padding")  # so that row ids and version numbers differ
    item = await new_item(db, p.alice, "linreg-data")
    first = await new_version(db, p.alice, item.id)
    second = await new_version(db, p.alice, item.id)
    async with db.read() as session:
        assert await catalog.version_reference(session, first.id) == "linreg-data:1"
        assert await catalog.version_reference(session, second.id) == "linreg-data:2"
        assert await catalog.version_reference(session, 999_999) == "#999999"
    assert catalog.reference("resnet", 3, owner="alice") == "alice/resnet:3"
    assert catalog.reference("base", 2, preset=True) == "preset/base:2"


async def test_a_missing_version_is_named_as_a_reference(db: Database) -> None:
    p = await people(db)
    item = await new_item(db, p.alice, "cifar-mini")
    await new_version(db, p.alice, item.id)
    with pytest.raises(NotFound) as exc:
        async with db.read() as session:
            await catalog.load_version(session, p.alice, DS, item.id, 7)
    assert exc.value.message == "dataset cifar-mini:7 not found"
