"""Saving a notebook: its work dir becomes a new version of an algorithm the owner owns.

The work dir is copied to a snapshot first (the user may go on editing while the version is stored), leaving out
what is not code: JupyterLab's checkpoints, bytecode caches, the user's pip/IPython state in the work dir (it is
the notebook's ``HOME``), and symbolic links (a version holds regular files only). The snapshot is stored through
the catalog like any import, so the version counts against the workspace's storage quota.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select

from aicenter.core.catalog import ItemKind
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, InvalidTransition, ValidationFailed
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.models import CatalogItem, Notebook
from aicenter.services import audit, catalog, jobs
from aicenter.services.context import Actor
from aicenter.services.notebooks._lifecycle import require_owner
from aicenter.services.notebooks._views import load_notebook
from aicenter.storage import BlobStore

__all__ = ["SKIPPED_NAMES", "Saved", "save_notebook"]

SKIPPED_NAMES = frozenset(
    {".ipynb_checkpoints", "__pycache__", ".cache", ".local", ".ipython", ".jupyter", ".bash_history", ".config"}
)


@dataclass(frozen=True, slots=True)
class Saved:
    """A save's result: the version, its reference (``name:n``) and what was left out."""

    version: catalog.VersionView
    reference: str
    skipped_links: int


def _snapshot(work: Path, target: Path) -> int:
    """Copy ``work``'s regular files to ``target``; the number of symbolic links left out."""
    links = 0
    for source in sorted(work.rglob("*")):
        relative = source.relative_to(work)
        if any(part in SKIPPED_NAMES for part in relative.parts):
            continue
        if source.is_symlink():
            links += 1
            continue
        dest = target / relative
        if source.is_dir():
            dest.mkdir(parents=True, exist_ok=True)
        elif source.is_file():
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, dest)
            dest.chmod(0o755 if source.stat().st_mode & 0o111 else 0o644)
    return links


async def save_notebook(
    db: Database,
    store: BlobStore,
    actor: Actor,
    job_id: int,
    *,
    jobs_path: Path,
    algorithm: str | None = None,
    description: str = "",
) -> Saved:
    """Save the running notebook's work dir as a new algorithm version (its owner only).

    Args:
        algorithm: The algorithm item's name; the notebook's own (the one it was created from, or saved to
            before) when absent. An item of that name the owner does not have is created in the notebook's
            workspace.

    Raises:
        NotFound: No such notebook for the actor.
        Forbidden: Not its owner.
        InvalidTransition: It is not running.
        ValidationFailed: No algorithm to save to (the notebook has none: name one), a bad name.
        QuotaExceeded: The version does not fit the workspace's storage quota.
    """
    async with db.write() as session:
        job = await load_notebook(session, actor, job_id)
        require_owner(actor, job, "save")
        if job.status != JobStatus.RUNNING.value:
            raise InvalidTransition(
                f"notebook {job.id} is {job.status}; only a running notebook can be saved (start it first)",
                details={"status": job.status},
            )
        notebook = await session.scalar(select(Notebook).where(Notebook.job_id == job.id))
        if notebook is None:
            raise Conflict(f"notebook {job.id} has no notebook record")
        item = None
        created = False
        if algorithm is None and notebook.algorithm_item_id is not None:
            item = await session.get(CatalogItem, notebook.algorithm_item_id)
            if item is not None and item.owner_id != actor.user_id:
                item = None  # another user's algorithm: the save goes to one of the owner's own
        if item is None:
            if algorithm is None:
                raise ValidationFailed(
                    "this notebook has no algorithm of yours to save to: name one (a new one is created)",
                    field="algorithm",
                )
            item = await session.scalar(
                select(CatalogItem).where(
                    CatalogItem.kind == ItemKind.ALGORITHM.value,
                    CatalogItem.owner_id == actor.user_id,
                    CatalogItem.name == algorithm,
                    CatalogItem.is_preset.is_(False),
                )
            )
            if item is None:
                new_item = await catalog.create_item(
                    session, actor, ItemKind.ALGORITHM, name=algorithm, workspace_id=job.workspace_id
                )
                item_id, created = new_item.id, True
            else:
                item_id = item.id
        else:
            item_id = item.id
        workspace_id = job.workspace_id
    work = jobs.job_dirs(jobs_path, job_id).work
    try:
        with tempfile.TemporaryDirectory(prefix=f"aicenter-save-{job_id}-") as tmp:
            links = await asyncio.to_thread(_snapshot, work, Path(tmp)) if work.exists() else 0
            version = await catalog.create_version_from_directory(
                db,
                actor,
                store,
                ItemKind.ALGORITHM,
                item_id,
                Path(tmp),
                description=description or f"saved from notebook {job_id}",
                metadata=None,
            )
    except BaseException:
        if created:  # the algorithm made for this save goes with it: a refused save leaves nothing behind
            async with db.write() as session:
                await catalog.delete_item(session, actor, ItemKind.ALGORITHM, item_id)
        raise
    async with db.write() as session:
        notebook = await session.scalar(select(Notebook).where(Notebook.job_id == job_id))
        if notebook is not None:
            notebook.algorithm_item_id = item_id
            notebook.saved_version_id = version.id
            notebook.saved_at = utcnow()
        audit.record(
            session,
            actor,
            "notebook.save",
            "job",
            job_id,
            workspace_id=workspace_id,
            details={"algorithm": version.item_name, "number": version.number, "skipped_links": links},
        )
    return Saved(version, f"{version.item_name}:{version.number}", links)
