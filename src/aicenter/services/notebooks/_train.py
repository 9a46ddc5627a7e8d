"""Train from here: a training job spec prefilled from a notebook, for the user to finish and submit."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.catalog import ItemKind
from aicenter.core.jobs import parse_job_spec
from aicenter.db.models import Notebook, Workspace
from aicenter.services import catalog
from aicenter.services.context import Actor
from aicenter.services.notebooks._views import load_notebook

__all__ = ["TRAIN_COMMAND", "train_spec"]

TRAIN_COMMAND = "python train.py"
"""The command a prefilled spec proposes: the user replaces it with their entry point."""


async def train_spec(session: AsyncSession, actor: Actor, job_id: int) -> dict[str, Any]:
    """A ``train`` job spec (normalized) with the notebook's latest saved algorithm version (else the one it
    was created from), image, datasets, workspace, pool and resources; the command is ``TRAIN_COMMAND``."""
    job = await load_notebook(session, actor, job_id)
    spec = dict(job.spec)
    notebook = await session.scalar(select(Notebook).where(Notebook.job_id == job.id))
    algorithm = spec.get("algorithm")
    if notebook is not None and notebook.saved_version_id is not None:
        view = await catalog.resolve_version(session, actor, ItemKind.ALGORITHM, f"#{notebook.saved_version_id}")
        algorithm = f"{view.owner_name}/{view.item_name}:{view.number}"
    task = dict(spec["tasks"][0])
    data: dict[str, Any] = {
        "kind": "train",
        "name": f"{job.name}-train",
        "image": spec.get("image", "host"),
        "datasets": spec.get("datasets", []),
        "priority": spec.get("priority", "normal"),
        "env": spec.get("env", {}),
        "tasks": [{"name": "worker", "replicas": 1, "resources": task["resources"], "command": TRAIN_COMMAND}],
    }
    if algorithm:
        data["algorithm"] = algorithm
    if spec.get("pool"):
        data["pool"] = spec["pool"]
    # The notebook's workspace, by its current name: the spec names one only when the user wrote it there (one
    # given as the request's workspace_id is not in it), and a job without it goes to the default workspace.
    data["workspace"] = await session.scalar(select(Workspace.name).where(Workspace.id == job.workspace_id))
    return parse_job_spec(data).normalized()
