"""Shared set-up of the catalog service tests: people in workspaces, a store, versions with files."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import select

from aicenter.core.catalog import ItemKind
from aicenter.db.engine import Database
from aicenter.db.models import AuditEvent
from aicenter.services import catalog, members, tenancy
from aicenter.services.context import Actor
from aicenter.storage import BlobStore, FileEntry
from tests.factories import ADMIN

DS = ItemKind.DATASET


@dataclass
class People:
    """alice owns things in workspace ``ws``; bob is a member of ``ws``; carol is in no shared workspace;
    root is a platform admin who is a member of nothing but their own default workspace."""

    alice: Actor
    bob: Actor
    carol: Actor
    root: Actor
    ws: int
    bob_ws: int
    carol_ws: int


async def _user(db: Database, username: str, *, admin: bool = False) -> tuple[Actor, int]:
    async with db.write() as session:
        user = await tenancy.create_user(session, ADMIN, username=username, password=None, is_platform_admin=admin)
        assert user.default_workspace_id is not None
        return Actor(user.id, username, is_platform_admin=admin), user.default_workspace_id


async def people(db: Database) -> People:
    alice, ws = await _user(db, "alice")
    bob, bob_ws = await _user(db, "bob")
    carol, carol_ws = await _user(db, "carol")
    root, _ = await _user(db, "root", admin=True)
    async with db.write() as session:
        await members.add_member(session, ADMIN, ws, user_id=bob.user_id)
    return People(alice, bob, carol, root, ws, bob_ws, carol_ws)


def make_store(tmp_path: Path) -> BlobStore:
    return BlobStore(tmp_path / "store", fsync=False)


def entries(store: BlobStore, files: Mapping[str, bytes]) -> list[FileEntry]:
    out = []
    for path, data in sorted(files.items()):
        sha, size = store.put_bytes(data)
        out.append(FileEntry(path, size, sha))
    return out


async def new_item(db: Database, actor: Actor, name: str, *, kind: ItemKind = DS, **kwargs: Any) -> catalog.ItemView:
    async with db.write() as session:
        return await catalog.create_item(session, actor, kind, name=name, **kwargs)


async def new_version(
    db: Database,
    actor: Actor,
    item_id: int,
    files: list[FileEntry] | None = None,
    *,
    kind: ItemKind = DS,
    metadata: dict[str, Any] | None = None,
    description: str = "",
) -> catalog.VersionView:
    async with db.write() as session:
        item = await catalog.load_item_for_write(session, actor, kind, item_id)
        version = await catalog.add_version(
            session, actor, item, entries=files or [], metadata=metadata, description=description
        )
        return await catalog.version_view(session, actor, item, version)


async def audit_actions(db: Database, prefix: str) -> list[str]:
    async with db.read() as session:
        rows = await session.scalars(
            select(AuditEvent.action).where(AuditEvent.action.startswith(prefix)).order_by(AuditEvent.id)
        )
        return list(rows.all())
