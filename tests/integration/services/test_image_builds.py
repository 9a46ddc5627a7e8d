"""Venv image builds with a real venv and a real pip, offline: a wheel the test builds from a tiny package.

The builder controller's tick is called directly; each venv costs a few seconds.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import select

from aicenter.config import Settings
from aicenter.controllers.image_builder import ImageBuilder
from aicenter.core.catalog import ItemKind
from aicenter.core.errors import Conflict, NotFound
from aicenter.db.engine import Database
from aicenter.db.models import ImageBuild
from aicenter.services import catalog
from aicenter.services.context import Actor
from aicenter.storage import BlobStore
from tests.integration.services.catalog_helpers import audit_actions, make_store, new_item, people

IMG = ItemKind.IMAGE
PACKAGE = "aicenter-probe-pkg"


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with one wheel, built offline from a package written here (setuptools and wheel are installed
    in the test interpreter; --no-build-isolation keeps pip from fetching them)."""
    src = tmp_path_factory.mktemp("probe-src")
    (src / "pyproject.toml").write_text(
        "[build-system]\n"
        'requires = ["setuptools"]\n'
        'build-backend = "setuptools.build_meta"\n'
        "[project]\n"
        f'name = "{PACKAGE}"\n'
        'version = "1.0"\n'
        "[tool.setuptools]\n"
        'packages = ["aicenter_probe"]\n'
    )
    (src / "aicenter_probe").mkdir()
    (src / "aicenter_probe" / "__init__.py").write_text("VALUE = 42\n")
    wheels = tmp_path_factory.mktemp("wheels")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-index",
            "--no-build-isolation",
            "--no-deps",
            "-q",
            "-w",
            str(wheels),
            str(src),
        ],
        check=True,
        timeout=120,
    )
    assert list(wheels.glob("*.whl")), "the probe wheel was not built"
    return wheels


@pytest.fixture
def store(tmp_path: Path) -> BlobStore:
    return make_store(tmp_path)


@pytest.fixture
def cfg(settings: Settings, wheelhouse: Path) -> Settings:
    return settings.model_copy(update={"pip_args": ["--no-index", "--find-links", str(wheelhouse)]})


async def image_version(db: Database, actor: Actor, name: str, spec: dict[str, object]) -> catalog.VersionView:
    item = await new_item(db, actor, name, kind=IMG)
    async with db.write() as session:
        return await catalog.create_version(session, actor, IMG, item.id, metadata=spec)


async def build_of(db: Database, actor: Actor, store: BlobStore, version: catalog.VersionView) -> catalog.BuildView:
    async with db.read() as session:
        return await catalog.get_build(session, actor, store, version.item_id, version.number)


async def version_state(db: Database, actor: Actor, version: catalog.VersionView) -> str:
    async with db.read() as session:
        return (await catalog.get_version(session, actor, IMG, version.item_id, version.number)).state


@pytest.mark.slow
async def test_a_venv_image_is_built_and_an_equal_one_reuses_the_environment(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    spec = {"python": "3", "requirements": [PACKAGE]}
    first = await image_version(db, p.alice, "probe", spec)
    assert first.state == "pending"
    builder = ImageBuilder(db, store, cfg, owner="builder-a")
    await builder.tick()

    build = await build_of(db, p.alice, store, first)
    assert (build.state, build.error) == ("ready", ""), build.log_tail
    assert build.started_at is not None
    assert build.finished_at is not None
    assert await version_state(db, p.alice, first) == "ready"
    env = catalog.env_dir(store, build.env_hash)
    probe = [str(env / "bin" / "python"), "-c", "import aicenter_probe, sys; print(aicenter_probe.VALUE, sys.prefix)"]
    out = await asyncio.to_thread(subprocess.run, probe, capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.split() == ["42", str(env)]
    # Scripts were made in a temporary directory and renamed: their shebangs must point at the final one.
    pip = await asyncio.to_thread(
        subprocess.run, [str(env / "bin" / "pip"), "--version"], capture_output=True, text=True, timeout=60
    )
    assert pip.returncode == 0, pip.stderr
    assert [p.name for p in store.envs_dir.iterdir()] == [build.env_hash], "no temporary directory is left"
    assert "pip install" in build.log_tail
    assert f"Successfully installed {PACKAGE}-1.0" in build.log_tail
    assert build.log_tail.splitlines()[0][:4].isdigit(), "log lines start with a timestamp"

    # Another user's image with the same inputs shares the environment.
    second = await image_version(db, p.bob, "probe-too", spec)
    await builder.tick()
    reused = await build_of(db, p.bob, store, second)
    assert (reused.state, reused.env_hash) == ("ready", build.env_hash)
    assert f"reusing cached environment {build.env_hash}" in reused.log_tail

    # The log is content: a platform admin sees the state of alice's private image, not its log.
    admin_view = await build_of(db, p.root, store, first)
    assert (admin_view.state, admin_view.log_tail) == ("ready", "")
    async with db.write() as session:
        with pytest.raises(Conflict, match="only failed builds"):
            await catalog.rebuild(session, p.alice, first.item_id, first.number)


@pytest.mark.slow
async def test_a_requirement_pip_cannot_find_fails_the_build_with_a_reason(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "broken", {"python": "3", "requirements": ["no-such-package-aic"]})
    await ImageBuilder(db, store, cfg, owner="builder-a").tick()
    build = await build_of(db, p.alice, store, version)
    assert build.state == "failed"
    assert "no-such-package-aic" in build.error
    assert "\n" not in build.error
    assert await version_state(db, p.alice, version) == "failed"
    assert list(store.envs_dir.iterdir()) == [], "a failed build leaves no environment behind"


async def test_a_python_version_that_is_not_installed_fails_saying_so_and_can_be_retried(
    db: Database, store: BlobStore, cfg: Settings
) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "ancient", {"python": "3.2", "requirements": [PACKAGE]})
    builder = ImageBuilder(db, store, cfg, owner="builder-a")
    await builder.tick()
    build = await build_of(db, p.alice, store, version)
    assert (build.state, build.error) == ("failed", "python 3.2 is not installed on this host")
    assert "python 3.2 is not installed" in build.log_tail
    assert await version_state(db, p.alice, version) == "failed"

    async with db.write() as session:
        with pytest.raises(NotFound):
            await catalog.rebuild(session, p.bob, version.item_id, version.number)
        again = await catalog.rebuild(session, p.alice, version.item_id, version.number)
    assert (again.state, again.error) == ("pending", "")
    assert await version_state(db, p.alice, version) == "pending"
    async with db.read() as session:
        row = await session.scalar(select(ImageBuild).where(ImageBuild.version_id == version.id))
        assert row is not None
        assert (row.lock_token, row.started_at) == (None, None)
    await builder.tick()
    assert (await build_of(db, p.alice, store, version)).state == "failed"
    assert await audit_actions(db, "image.version.rebuild") == ["image.version.rebuild"]


async def test_a_build_past_its_timeout_fails(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "slow", {"python": "3", "requirements": [PACKAGE]})
    await ImageBuilder(db, store, cfg.model_copy(update={"build_timeout_s": 0.05}), owner="builder-a").tick()
    build = await build_of(db, p.alice, store, version)
    assert (build.state, build.error) == ("failed", "build timed out after 0.05 s")
    assert list(store.envs_dir.iterdir()) == []


async def test_pip_options_are_not_accepted_as_requirements(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "sneaky", {"requirements": ["--index-url=http://127.0.0.1:1/"]})
    await ImageBuilder(db, store, cfg, owner="builder-a").tick()
    build = await build_of(db, p.alice, store, version)
    assert build.state == "failed"
    assert "pip option" in build.error


async def test_a_build_whose_builder_died_is_taken_over(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "orphan", {"python": "3.2"})
    # A builder claims it and dies before finishing: its lease expires.
    job = await catalog.claim_build(db, "dead-builder", ttl_s=60)
    assert job is not None
    assert await version_state(db, p.alice, version) == "building"
    async with db.write() as session:
        row = await session.scalar(select(ImageBuild).where(ImageBuild.version_id == version.id))
        assert row is not None
        row.lock_expires_at = row.started_at  # expired for certain
        row.lock_owner = "dead-builder"
    await ImageBuilder(db, store, cfg, owner="builder-b").tick()
    assert (await build_of(db, p.alice, store, version)).state == "failed"
    assert not await catalog.finish_build(db, job, error=None), "the dead builder's late outcome is dropped"


async def test_a_stopping_builder_gives_its_build_back(db: Database, store: BlobStore, cfg: Settings) -> None:
    p = await people(db)
    version = await image_version(db, p.alice, "interrupted", {"python": "3", "requirements": [PACKAGE]})
    builder = ImageBuilder(db, store, cfg, owner="builder-a")
    log_path = catalog.build_log_path(store, version.id)
    builder.start()
    try:
        deadline = asyncio.get_running_loop().time() + 120
        # Wait until the build runs its first command (the venv), then stop the controller under it.
        while not (log_path.exists() and "$ " in log_path.read_text()):
            assert asyncio.get_running_loop().time() < deadline, "the build never started"
            await asyncio.sleep(0.05)
    finally:
        await builder.stop()
    async with db.read() as session:
        row = await session.scalar(select(ImageBuild).where(ImageBuild.version_id == version.id))
        assert row is not None
        assert (row.state, row.lock_token, row.started_at) == ("pending", None, None)
    assert await version_state(db, p.alice, version) == "pending"
    assert "builder stopping" in log_path.read_text()
    assert list(store.envs_dir.iterdir()) == [], "the half-made environment is removed"
