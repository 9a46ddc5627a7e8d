"""Venv image builds: their state for users, retries, and the leased state changes the builder controller makes.

A venv image version owns one ImageBuild row (created with the version, state pending). The builder
(controllers/image_builder.py) claims pending rows with a lease, builds outside any transaction, and applies
the outcome with an update guarded by its lease token, so a build whose lease was lost changes nothing.
Environments are shared by every build with the same inputs: ``<store>/envs/<env_hash>``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind, VersionState, Visibility
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound
from aicenter.db.engine import Database
from aicenter.db.leases import claim_rows, guarded_update, renew_row
from aicenter.db.models import CatalogVersion, ImageBuild
from aicenter.services import audit
from aicenter.services.catalog._access import can_read_content, load_version, my_workspace_ids
from aicenter.services.context import Actor
from aicenter.storage import BlobStore

__all__ = [
    "LOG_TAIL_BYTES",
    "BuildJob",
    "BuildView",
    "build_log_path",
    "claim_build",
    "env_dir",
    "finish_build",
    "get_build",
    "read_log_tail",
    "rebuild",
    "renew_build",
    "requeue_build",
]

LOG_TAIL_BYTES = 64 * 1024


@dataclass(frozen=True)
class BuildView:
    version_id: int
    state: str
    env_hash: str
    error: str
    started_at: datetime | None
    finished_at: datetime | None
    # The end of the build log: empty for those who see the version's metadata but not its content.
    log_tail: str


@dataclass(frozen=True)
class BuildJob:
    """A claimed build: what the builder needs, and the lease token its updates are guarded by."""

    build_id: int
    version_id: int
    env_hash: str
    token: str
    python: str
    requirements: list[str]
    system_site_packages: bool


def env_dir(store: BlobStore, build: str | ImageBuild) -> Path:
    """Where a built environment lives (``<env>/bin/python``), by env hash or build row. For the jobs area."""
    return store.envs_dir / (build if isinstance(build, str) else build.env_hash)


def build_log_path(store: BlobStore, version_id: int) -> Path:
    return store.logs_dir / "builds" / f"{version_id}.log"


def read_log_tail(path: Path, limit: int = LOG_TAIL_BYTES) -> str:
    """The last ``limit`` bytes of a log, from a line start; "" if there is no log yet. Sync (use a thread)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except FileNotFoundError:
        return ""
    if size > limit:
        data = data[data.find(b"\n") + 1 :]  # drop the partial first line
    return data.decode("utf-8", errors="replace")


def _view(build: ImageBuild, log_tail: str = "") -> BuildView:
    return BuildView(
        version_id=build.version_id,
        state=build.state,
        env_hash=build.env_hash,
        error=build.error,
        started_at=build.started_at,
        finished_at=build.finished_at,
        log_tail=log_tail,
    )


async def _build_of(session: AsyncSession, version: CatalogVersion, ref: str, *, lock: bool = False) -> ImageBuild:
    stmt = select(ImageBuild).where(ImageBuild.version_id == version.id)
    build = await session.scalar(stmt.with_for_update() if lock else stmt)
    if build is None:
        raise NotFound(f"image {ref} is not a venv image: nothing is built for it")
    return build


async def get_build(session: AsyncSession, actor: Actor, store: BlobStore, item_id: int, number: int) -> BuildView:
    """The build of a venv image version. The log is content: platform admins see the state of every build
    but the log only of images they may read (presets, public, their workspaces', their own).

    Raises:
        NotFound: the actor cannot see the version, or it is not a venv image.
    """
    item, version = await load_version(session, actor, ItemKind.IMAGE, item_id, number)
    build = await _build_of(session, version, f"{item.name}:{number}")
    mine = await my_workspace_ids(session, actor) if version.visibility == Visibility.WORKSPACE.value else set()
    tail = ""
    if can_read_content(actor, item, version, mine):
        tail = await asyncio.to_thread(read_log_tail, build_log_path(store, version.id))
    return _view(build, tail)


async def rebuild(session: AsyncSession, actor: Actor, item_id: int, number: int) -> BuildView:
    """Queue a failed build again (owner; platform admins for presets).

    Raises:
        Conflict: the build is not failed (pending, building and ready builds are left alone).
    """
    item, version = await load_version(session, actor, ItemKind.IMAGE, item_id, number, write=True)
    build = await _build_of(session, version, f"{item.name}:{number}", lock=True)
    if build.state != VersionState.FAILED.value:
        raise Conflict(
            f"the build of image {item.name}:{number} is {build.state}; only failed builds are built again",
            details={"state": build.state},
        )
    build.state = VersionState.PENDING.value
    build.error = ""
    build.started_at = None
    build.finished_at = None
    build.lock_owner = build.lock_token = None
    build.lock_expires_at = None
    version.state = VersionState.PENDING.value
    await session.flush()
    audit.record(
        session,
        actor,
        "image.version.rebuild",
        "image_version",
        version.id,
        workspace_id=item.workspace_id,
        details={"item": item.name, "number": number},
    )
    return _view(build)


# --- for the builder controller --------------------------------------------------------------------------------


async def claim_build(db: Database, owner: str, ttl_s: float) -> BuildJob | None:
    """Lease the oldest pending build (or a building one whose builder's lease expired) and mark it building."""
    async with db.write() as session:
        rows = await claim_rows(
            session,
            ImageBuild,
            ImageBuild.state.in_([VersionState.PENDING.value, VersionState.BUILDING.value]),
            owner=owner,
            ttl_s=ttl_s,
            order_by=ImageBuild.id,
        )
        if not rows:
            return None
        build = rows[0]
        version = await session.get(CatalogVersion, build.version_id)
        assert version is not None  # the foreign key cascades
        assert build.lock_token is not None
        build.state = VersionState.BUILDING.value
        build.started_at = utcnow()
        build.finished_at = None
        build.error = ""
        version.state = VersionState.BUILDING.value
        spec = version.meta
        return BuildJob(
            build_id=build.id,
            version_id=version.id,
            env_hash=build.env_hash,
            token=build.lock_token,
            python=str(spec.get("python", "3")),
            requirements=[str(r) for r in spec.get("requirements", [])],
            system_site_packages=bool(spec.get("system_site_packages", False)),
        )


async def renew_build(db: Database, job: BuildJob, ttl_s: float) -> bool:
    """Extend the lease of a build in progress; False means another builder took it over."""
    async with db.write() as session:
        return await renew_row(session, ImageBuild, ImageBuild.id == job.build_id, token=job.token, ttl_s=ttl_s)


async def _apply(db: Database, job: BuildJob, state: VersionState, **values: object) -> bool:
    async with db.write() as session:
        applied = await guarded_update(
            session,
            ImageBuild,
            ImageBuild.id == job.build_id,
            token=job.token,
            state=state.value,
            lock_owner=None,
            lock_token=None,
            lock_expires_at=None,
            **values,
        )
        if applied:
            await session.execute(
                update(CatalogVersion).where(CatalogVersion.id == job.version_id).values(state=state.value)
            )
        return applied


async def finish_build(db: Database, job: BuildJob, *, error: str | None) -> bool:
    """Record the outcome (``error`` None: ready) and release the lease. False: the lease was lost and the
    outcome dropped (another builder owns the row now)."""
    state = VersionState.FAILED if error else VersionState.READY
    return await _apply(db, job, state, error=error or "", finished_at=utcnow())


async def requeue_build(db: Database, job: BuildJob) -> bool:
    """Give an interrupted build back (the builder is stopping): pending again, at once claimable elsewhere."""
    return await _apply(db, job, VersionState.PENDING, started_at=None, finished_at=None)
