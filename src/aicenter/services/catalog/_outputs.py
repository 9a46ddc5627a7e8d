"""Job outputs as model versions: the catalog's side of "a job that succeeds saves its output directory".

The job's owner gets a version of their model ``name`` (the item is created on first use), with lineage (the
job, its algorithm and dataset versions) and the job's final metrics in the version's metadata. Saving is
idempotent per job: a reconciler that crashed after saving and before marking the job succeeded finds the
version by its lineage instead of saving a second one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.core.errors import Conflict, NotFound
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, CatalogVersion, User
from aicenter.services.catalog._imports import create_version_from_directory
from aicenter.services.catalog._items import create_item, user_namespace
from aicenter.services.context import Actor
from aicenter.storage import BlobStore

__all__ = ["save_job_output"]


async def save_job_output(
    db: Database,
    store: BlobStore,
    *,
    job_id: int,
    job_name: str,
    user_id: int | None,
    workspace_id: int,
    model_name: str,
    directory: Path,
    algorithm_version_id: int | None = None,
    dataset_version_ids: Sequence[int] = (),
    metrics: Mapping[str, float] | None = None,
) -> int:
    """Save ``directory`` as a new version of the job owner's model ``model_name``; returns the version's id.

    Raises:
        NotFound: The job's owner no longer exists.
        AicenterError: The model cannot be created, or the version does not fit the workspace's storage quota.
    """
    async with db.read() as session:
        user = await session.get(User, user_id) if user_id is not None else None
        if user is None:
            raise NotFound(f"the owner of job {job_id} no longer exists; its output was not saved")
        item_id = await _model_item(session, user.id, model_name)
        if item_id is not None:
            done = await _version_of_job(session, item_id, job_id)
            if done is not None:
                return done
    actor = Actor(user.id, user.username, user.is_platform_admin)
    if item_id is None:
        try:
            async with db.write() as session:
                view = await create_item(session, actor, ItemKind.MODEL, name=model_name, workspace_id=workspace_id)
                item_id = view.id
        except Conflict:  # created meanwhile (another reconciler, the user)
            async with db.read() as session:
                item_id = await _model_item(session, user.id, model_name)
            if item_id is None:
                raise
    metadata: dict[str, object] = {
        "lineage": {
            "job_id": job_id,
            "algorithm_version_id": algorithm_version_id,
            "dataset_version_ids": [int(v) for v in dataset_version_ids],
        }
    }
    if metrics:
        metadata["metrics"] = dict(metrics)
    version = await create_version_from_directory(
        db,
        actor,
        store,
        ItemKind.MODEL,
        item_id,
        directory,
        description=f"output of job {job_id} ({job_name})",
        metadata=metadata,
    )
    return version.id


async def _model_item(session: AsyncSession, user_id: int, name: str) -> int | None:
    return await session.scalar(
        select(CatalogItem.id).where(
            CatalogItem.kind == ItemKind.MODEL.value,
            CatalogItem.namespace == user_namespace(user_id),
            CatalogItem.name == name,
        )
    )


async def _version_of_job(session: AsyncSession, item_id: int, job_id: int) -> int | None:
    # An item has few versions; the lineage is JSON, matched here (JSON paths differ between backends).
    for version_id, meta in await session.execute(
        select(CatalogVersion.id, CatalogVersion.meta).where(CatalogVersion.item_id == item_id)
    ):
        if ((meta or {}).get("lineage") or {}).get("job_id") == job_id:
            return int(version_id)
    return None
