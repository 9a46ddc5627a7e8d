"""What a replica needs on disk and in its plan: the job's directories and the ``ReplicaPlan`` the reconciler
hands to the executor.

Layout (one directory per job, shared by every attempt; ``settings.jobs_path``)::

    <jobs>/<job id>/code                 the algorithm version's files, read-only ($AICENTER_CODE_DIR, cwd)
    <jobs>/<job id>/data/<dataset name>  each dataset version's files, read-only ($AICENTER_DATA_DIR)
    <jobs>/<job id>/model                the spec's model version's files, read-only ($AICENTER_MODEL_DIR)
    <jobs>/<job id>/output               files that become the output model version ($AICENTER_OUTPUT_DIR)
    <jobs>/<job id>/checkpoints          kept across restarts ($AICENTER_CHECKPOINT_DIR)
    <jobs>/<job id>/runs/<attempt>/<task>-<index>   the executor's run dir of one replica attempt

A notebook has no read-only ``code``: its algorithm version is checked out once, as ordinary writable files, into
``<jobs>/<job id>/work`` (its ``$AICENTER_CODE_DIR``, kept across stop and start), and its SSH agent's files live
in ``<jobs>/<job id>/notebook`` (``services.notebooks``).

Files come from the blob store by hard link (no copy, no extra space; blobs are read-only files), or by copy
when the jobs directory is on another filesystem. Each read-only tree is built under a temporary name and
renamed into place, so a tree that exists is complete: a reconciler that crashed half-way builds it again.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import shutil
import sys
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.jobs import JobKind, JobSpec
from aicenter.db.models import CatalogItem, CatalogVersion, ImageBuild, VersionFile
from aicenter.executors.base import ReplicaPlan
from aicenter.runtime.env import ReplicaAddress, framework_env, runtime_env
from aicenter.runtime.jobpath import job_pythonpath, write_job_pythonpath
from aicenter.services.catalog import env_dir
from aicenter.services.jobs._notebook_plan import notebook_plan
from aicenter.services.jobs._service_plan import service_plan
from aicenter.storage import BLOB_MODE, BlobStore

log = logging.getLogger(__name__)

HOST_IMAGE = "host"
"""The image that runs jobs with the server's own Python."""

_READ_ONLY_DIR = 0o555


class ImageNotReady(Exception):
    """The job's image cannot run here (not built, failed, or not a venv image). The message says why."""


# -- directories ----------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class JobDirs:
    """The directories of one job (see the module docstring)."""

    root: Path
    code: Path
    data: Path
    output: Path
    checkpoints: Path

    @property
    def work(self) -> Path:
        """A notebook's writable work dir (its code dir)."""
        return self.root / "work"

    @property
    def model(self) -> Path:
        """The model version the job reads (a service replica serves it), read-only."""
        return self.root / "model"

    @property
    def notebook(self) -> Path:
        """A notebook's state: the SSH agent's host key, authorized keys and activity file."""
        return self.root / "notebook"

    def run_dir(self, attempt: int, task: str, index: int) -> Path:
        """The executor's directory for one replica attempt."""
        return self.root / "runs" / str(attempt) / f"{task}-{index}"


def job_dirs(jobs_root: Path, job_id: int) -> JobDirs:
    root = jobs_root / str(job_id)
    return JobDirs(root, root / "code", root / "data", root / "output", root / "checkpoints")


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One file of a version to materialize: its relative path, blob hash and mode."""

    path: str
    sha256: str
    mode: int


@dataclass(frozen=True, slots=True)
class Content:
    """What to materialize for a job: the algorithm's files and each dataset's (by dataset item name)."""

    code: list[FileEntry]
    datasets: dict[str, list[FileEntry]]
    model: list[FileEntry] | None = None


async def _manifest(session: AsyncSession, version_id: int) -> list[FileEntry]:
    rows = await session.execute(
        select(VersionFile.path, VersionFile.sha256, VersionFile.mode).where(VersionFile.version_id == version_id)
    )
    return [FileEntry(p, h, m) for p, h, m in rows]


async def load_content(
    session: AsyncSession,
    algorithm_version_id: int | None,
    dataset_version_ids: Sequence[int],
    model_version_id: int | None = None,
) -> Content:
    """The manifests of the job's algorithm, dataset and model versions (one query each)."""
    code: list[FileEntry] = []
    if algorithm_version_id is not None:
        code = await _manifest(session, algorithm_version_id)
    datasets: dict[str, list[FileEntry]] = {}
    ids = [int(i) for i in dataset_version_ids]
    if ids:
        stmt = (
            select(CatalogVersion.id, CatalogItem.name)
            .join(CatalogItem, CatalogItem.id == CatalogVersion.item_id)
            .where(CatalogVersion.id.in_(ids))
        )
        names = {int(v): str(n) for v, n in await session.execute(stmt)}
        file_rows = await session.execute(
            select(VersionFile.version_id, VersionFile.path, VersionFile.sha256, VersionFile.mode).where(
                VersionFile.version_id.in_(ids)
            )
        )
        for version_id in ids:
            datasets.setdefault(names.get(version_id, f"dataset-{version_id}"), [])
        for version_id, path, sha, mode in file_rows:
            datasets[names.get(version_id, f"dataset-{version_id}")].append(FileEntry(path, sha, mode))
    model = None if model_version_id is None else await _manifest(session, model_version_id)
    return Content(code, datasets, model)


def _safe_relative(path: str) -> PurePosixPath:
    rel = PurePosixPath(path)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts:
        raise ValueError(f"unsafe path in a version manifest: {path!r}")
    return rel


def _place_file(store: BlobStore, entry: FileEntry, target: Path) -> None:
    """Hard-link the blob to ``target``; copy it when the link is impossible (another filesystem, or a
    kernel that protects hard links to files of other users)."""
    source = store.path(entry.sha256)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
        if os.stat(target).st_mode & 0o444 != 0o444:
            # A blob an older release stored owner-only: the sandboxed job reads it as its own uid.
            os.chmod(target, BLOB_MODE)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.EACCES):
            raise
        shutil.copyfile(source, target)
        os.chmod(target, 0o555 if entry.mode & 0o111 else 0o444)


def _seal(tree: Path) -> None:
    """Make every directory of ``tree`` read-only (files from the store already are)."""
    for dirpath, _dirnames, _files in os.walk(tree, topdown=False):
        os.chmod(dirpath, _READ_ONLY_DIR)


def _unseal(tree: Path) -> None:
    for dirpath, _dirnames, _files in os.walk(tree):
        os.chmod(dirpath, 0o700)  # owner-only while it is removed or rebuilt


def _build_tree(store: BlobStore, entries: Iterable[FileEntry], target: Path) -> None:
    """Build ``target`` from ``entries`` unless it exists; atomically (temporary name, then rename)."""
    if target.exists():
        return
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir(parents=True)
    try:
        for entry in entries:
            _place_file(store, entry, tmp / _safe_relative(entry.path))
        _seal(tmp)
        try:
            tmp.rename(target)
        except OSError as exc:  # another reconciler built it meanwhile: theirs is as good as ours
            if not target.exists():
                raise exc
            _unseal(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        if tmp.exists():
            _unseal(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_out(store: BlobStore, entries: Iterable[FileEntry], target: Path) -> None:
    """Copy files as the user's own, writable (a notebook's work dir), once: a work dir that exists is kept,
    whatever the user did to it since. Built under a temporary name, then renamed, like the read-only trees."""
    if target.exists():
        return
    tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        for entry in entries:
            dest = tmp / _safe_relative(entry.path)
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(store.path(entry.sha256), dest)
            dest.chmod(0o755 if entry.mode & 0o111 else 0o644)
        tmp.rename(target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def materialize_sync(store: BlobStore, dirs: JobDirs, content: Content, *, writable_code: bool = False) -> None:
    """Create the job's directories (idempotent). Blocking file work: call it through ``materialize``.

    ``writable_code`` (a notebook): the algorithm's files go to the writable work dir instead of ``code``.
    """
    dirs.root.mkdir(parents=True, exist_ok=True)
    if writable_code:
        _check_out(store, content.code, dirs.work)
    else:
        _build_tree(store, content.code, dirs.code)
    if not dirs.data.exists():
        tmp = dirs.data.with_name(f".data.tmp-{uuid.uuid4().hex[:8]}")
        tmp.mkdir()
        for name, entries in content.datasets.items():
            _build_tree(store, entries, tmp / name)
        _seal(tmp)
        try:
            tmp.rename(dirs.data)
        except OSError:
            if not dirs.data.exists():
                raise
            _unseal(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
    if content.model is not None:
        _build_tree(store, content.model, dirs.model)
    dirs.output.mkdir(exist_ok=True)
    dirs.checkpoints.mkdir(exist_ok=True)
    write_job_pythonpath(dirs.root.parent)  # for jobs in venv images: see ``build_plans``


async def materialize(store: BlobStore, dirs: JobDirs, content: Content, *, writable_code: bool = False) -> None:
    """``materialize_sync`` off the event loop (hard links are cheap, copies are not)."""
    await asyncio.to_thread(materialize_sync, store, dirs, content, writable_code=writable_code)


def remove_job_dir(dirs: JobDirs) -> None:
    """Delete a job's directory, read-only trees included."""
    if dirs.root.exists():
        _unseal(dirs.root)
        shutil.rmtree(dirs.root, ignore_errors=True)


# -- image ----------------------------------------------------------------------------------------------------


async def python_bin(session: AsyncSession, store: BlobStore, image: str, image_version_id: int | None) -> Path:
    """The ``bin/`` directory put first on the replica's PATH.

    ``host`` is this server's interpreter; a venv image is its built environment.

    Raises:
        ImageNotReady: The image has no ready build (pending, failed) or is not a venv image.
    """
    if image == HOST_IMAGE or image_version_id is None:
        return Path(sys.executable).parent
    build = await session.scalar(select(ImageBuild).where(ImageBuild.version_id == image_version_id))
    if build is None:
        raise ImageNotReady(f"image {image} is not a venv image; the local executor runs venv images only")
    if build.state != "ready":
        raise ImageNotReady(
            f"image {image} is not built (build {build.state}{': ' + build.error if build.error else ''})"
        )
    return env_dir(store, build) / "bin"


# -- plans ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PlannedReplica:
    """One replica attempt as recorded on its row: what the plan is computed from."""

    task: str
    index: int
    attempt: int
    node: str
    host: str
    ports: tuple[int, ...]
    devices: tuple[int, ...]
    cpus: tuple[int, ...] | None
    cpu_milli: int
    memory_bytes: int
    run_dir: Path


def build_plans(
    job_id: int,
    spec: JobSpec,
    replicas: Sequence[PlannedReplica],
    dirs: JobDirs,
    *,
    python: Path,
    api_url: str,
    token: str = "",
    workspace_id: int | None = None,
    notebook_token: str = "",
    serve_token: str = "",
    publish_host: str = "127.0.0.1",
) -> list[ReplicaPlan]:
    """The plan of every replica, in rank order (tasks in spec order, then index). Pure: the same rows give the
    same plans, which is what lets a reconciler that restarted adopt replicas launched before it crashed.

    The environment is the spec's (job, then task) overlaid by aicenter's runtime variables and the framework's:
    a job cannot override ``AICENTER_*``, ``RANK``, ``MASTER_PORT`` and the like.

    A notebook's plan runs the platform's JupyterLab in its writable work dir (``_notebook_plan``), with
    ``notebook_token`` and its ports published on ``publish_host``; a service replica's checks ``serve_token``
    on every request (``_service_plan``).

    A job whose Python is not the server's (a venv image) gets the job-side helpers (``aicenter.runtime``) at
    the end of its ``PYTHONPATH`` (see ``aicenter.runtime.jobpath``; ``materialize`` writes them); the server's
    own interpreter has them already.
    """
    extra_path = None if python == Path(sys.executable).parent else str(job_pythonpath(dirs.root.parent))
    by_key = {(r.task, r.index): r for r in replicas}
    ordered = [by_key[(task.name, index)] for task, index in spec.ranks()]
    layout = [ReplicaAddress(r.task, r.index, r.host, r.ports) for r in ordered]
    plans = []
    for rank, replica in enumerate(ordered):
        task = spec.task(replica.task)
        env: dict[str, str] = dict(spec.env_for(task))
        env.update(
            runtime_env(
                job_id,
                replica.task,
                replica.index,
                replica.attempt,
                code_dir=dirs.code,
                data_dir=dirs.data,
                output_dir=dirs.output,
                checkpoint_dir=dirs.checkpoints,
                api_url=api_url,
                token=token,
            )
        )
        env.update(framework_env(spec.framework.value, layout, rank))
        if spec.model is not None:
            env["AICENTER_MODEL_DIR"] = str(dirs.model)
        if extra_path is not None:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (env.get("PYTHONPATH"), extra_path) if p)
        plan = ReplicaPlan(
            job_id=job_id,
            task=replica.task,
            replica=replica.index,
            attempt=replica.attempt,
            node=replica.node,
            command=task.command,
            env=env,
            run_dir=replica.run_dir,
            workdir=dirs.code,
            devices=replica.devices,
            cpus=replica.cpus,
            cpu_milli=replica.cpu_milli,
            memory_bytes=replica.memory_bytes,
            python_bin=python,
            workspace_id=workspace_id,
        )
        if spec.kind is JobKind.NOTEBOOK:
            plan = notebook_plan(
                plan,
                work=dirs.work,
                state=dirs.notebook,
                ports=replica.ports,
                token=notebook_token,
                publish_host=publish_host,
            )
        if spec.kind is JobKind.SERVICE:
            assert spec.serving is not None  # the spec's rules
            serving = spec.serving.model_dump(mode="json", exclude_none=True)
            plan = service_plan(
                plan, ports=replica.ports, publish_host=publish_host, serving=serving, token=serve_token
            )
        plans.append(plan)
    return plans


def replica_host(node_address: str, node_name: str, nodes_of_job: Iterable[str]) -> str:
    """The address other replicas of the job reach this one at: loopback when the whole job is on one node
    (no interface but ``lo`` is needed), else the node's address (its name when it has none)."""
    if len(set(nodes_of_job)) <= 1:
        return "127.0.0.1"
    return node_address or node_name
