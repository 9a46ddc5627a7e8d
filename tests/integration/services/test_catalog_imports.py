"""Server-side imports into preset items (roots, admins, symlinks) and versions saved from a job's directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from sqlalchemy import select

from aicenter.config import Settings
from aicenter.core.catalog import ItemKind, Scope
from aicenter.core.errors import Forbidden, NotFound, QuotaExceeded, ValidationFailed
from aicenter.db.engine import Database
from aicenter.db.models import CatalogVersion, VersionFile
from aicenter.services import catalog
from aicenter.storage import BlobStore
from tests.integration.services.catalog_helpers import DS, audit_actions, make_store, new_item, people


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return make_store(tmp_path)


@pytest.fixture
def root_dir(tmp_path: Path) -> Path:
    """An import root holding a dataset directory ``mnist`` with nested files."""
    root = tmp_path / "imports"
    (root / "mnist" / "train").mkdir(parents=True)
    (root / "mnist" / "train" / "images.bin").write_bytes(os.urandom(5000))
    (root / "mnist" / "README.md").write_text("MNIST\n")
    script = root / "mnist" / "prepare.sh"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    return root


@pytest.fixture
def cfg(settings: Settings, root_dir: Path) -> Settings:
    return settings.model_copy(update={"import_roots": [root_dir]})


def tree(directory: Path) -> dict[str, bytes]:
    return {p.relative_to(directory).as_posix(): p.read_bytes() for p in directory.rglob("*") if p.is_file()}


async def version_files(db: Database, store: BlobStore, version_id: int) -> dict[str, bytes]:
    async with db.read() as session:
        rows = (await session.scalars(select(VersionFile).where(VersionFile.version_id == version_id))).all()
    out = {}
    for row in rows:
        with store.open(row.sha256) as f:
            out[row.path] = f.read()
    return out


async def test_an_admin_imports_a_directory_into_a_preset_item(
    db: Database, store: BlobStore, cfg: Settings, root_dir: Path
) -> None:
    p = await people(db)
    preset = await new_item(db, p.root, "mnist", preset=True)
    version = await catalog.import_directory(
        db, p.root, store, cfg, DS, preset.id, path=str(root_dir / "mnist"), description="from the NFS share"
    )
    assert (version.number, version.visibility, version.file_count) == (1, "preset", 3)
    assert version.ref == "preset/mnist:1"
    assert await version_files(db, store, version.id) == tree(root_dir / "mnist")
    async with db.read() as session:
        modes = {row.path: row.mode for row in await session.execute(select(VersionFile.path, VersionFile.mode))}
        assert modes["prepare.sh"] == 0o755
        # Everyone sees it under presets and may read it.
        page = await catalog.list_items(session, p.carol, DS, scope=Scope.PRESET)
        assert [i.name for i in page.items] == ["mnist"]
        seen = await catalog.get_version(session, p.carol, DS, preset.id, 1)
        assert seen.can_read_content
    assert await audit_actions(db, "dataset.version") == ["dataset.version.create", "dataset.version.import"]


async def test_paths_outside_the_import_roots_are_forbidden(
    db: Database, store: BlobStore, cfg: Settings, root_dir: Path, tmp_path: Path
) -> None:
    p = await people(db)
    preset = await new_item(db, p.root, "mnist", preset=True)
    outside = tmp_path / "private"
    outside.mkdir()
    (outside / "secret").write_text("s")
    (root_dir / "escape").symlink_to(outside, target_is_directory=True)
    for path in (str(outside), str(root_dir / ".." / "private"), str(root_dir / "escape"), "/etc"):
        with pytest.raises(Forbidden) as exc:
            await catalog.import_directory(db, p.root, store, cfg, DS, preset.id, path=path)
        assert str(root_dir) in exc.value.message, "the message names the allowed roots"
    with pytest.raises(Forbidden, match="no import roots"):
        await catalog.import_directory(
            db, p.root, store, cfg.model_copy(update={"import_roots": []}), DS, preset.id, path=str(root_dir / "mnist")
        )
    async with db.read() as session:
        assert (await session.scalars(select(CatalogVersion))).all() == []


async def test_imports_are_for_platform_admins_and_preset_items_only(
    db: Database, store: BlobStore, cfg: Settings, root_dir: Path
) -> None:
    p = await people(db)
    preset = await new_item(db, p.root, "mnist", preset=True)
    own = await new_item(db, p.alice, "mine")
    with pytest.raises(Forbidden):
        await catalog.import_directory(db, p.alice, store, cfg, DS, preset.id, path=str(root_dir / "mnist"))
    with pytest.raises(Forbidden, match="preset"):
        await catalog.import_directory(db, p.root, store, cfg, DS, own.id, path=str(root_dir / "mnist"))
    assert list(store.iter_blobs()) == [], "nothing was copied for a refused import"


async def test_bad_directories_are_refused(db: Database, store: BlobStore, cfg: Settings, root_dir: Path) -> None:
    p = await people(db)
    preset = await new_item(db, p.root, "mnist", preset=True)
    for path, field in (
        (str(root_dir / "missing"), "path"),
        (str(root_dir / "mnist" / "README.md"), "path"),
        ("relative/path", "path"),
    ):
        with pytest.raises(ValidationFailed) as exc:
            await catalog.import_directory(db, p.root, store, cfg, DS, preset.id, path=path)
        assert exc.value.details["field"] == field
    empty = root_dir / "empty"
    empty.mkdir()
    with pytest.raises(ValidationFailed, match="no files"):
        await catalog.import_directory(db, p.root, store, cfg, DS, preset.id, path=str(empty))

    (root_dir / "mnist" / "train" / "link").symlink_to(root_dir / "mnist" / "README.md")
    with pytest.raises(ValidationFailed) as exc:
        await catalog.import_directory(db, p.root, store, cfg, DS, preset.id, path=str(root_dir / "mnist"))
    assert "train/link" in exc.value.message
    async with db.read() as session:
        assert (await session.scalars(select(CatalogVersion))).all() == []


async def test_a_job_output_directory_becomes_a_model_version(db: Database, store: BlobStore, tmp_path: Path) -> None:
    p = await people(db)
    model = await new_item(db, p.alice, "resnet", kind=ItemKind.MODEL)
    output = tmp_path / "job-42" / "output"
    output.mkdir(parents=True)
    (output / "model.pt").write_bytes(os.urandom(3000))
    (output / "metrics.json").write_text('{"acc": 0.9}')
    version = await catalog.create_version_from_directory(
        db,
        p.alice,
        store,
        ItemKind.MODEL,
        model.id,
        output,
        description="saved by job 42",
        metadata={"metrics": {"acc": 0.9}, "lineage": {"job_id": 42}},
    )
    assert (version.number, version.file_count, version.visibility) == (1, 2, "private")
    assert version.metadata["lineage"]["job_id"] == 42
    assert await version_files(db, store, version.id) == tree(output)

    with pytest.raises(NotFound):
        await catalog.create_version_from_directory(db, p.alice, store, ItemKind.DATASET, model.id, output)
    async with db.write() as session:
        await catalog.set_storage_quota(session, p.root, p.ws, 4000)
    with pytest.raises(QuotaExceeded):
        await catalog.create_version_from_directory(db, p.alice, store, ItemKind.MODEL, model.id, output)
