"""The job reconciler: launches, watches, restarts and stops the replicas of jobs through the executors.

Every replica runs it. A tick walks the jobs that need work in id order, ``scheduled`` ones first (their launch
is the latency users see), with up to ``batch`` passes at once: it leases jobs (``claim_rows``: ``SKIP LOCKED``
on PostgreSQL, so two replicas never take the same job), drives each one step in a ``JobPass``
(controllers/jobs_pass.py) with the lease renewed in the background, releases it, and leases more as passes end.
Jobs that need work: ``scheduled``, ``starting``, ``running``, ``restarting``, ``preempted``, and pending or
queued jobs with a stop request.

Exactly once: a replica is launched only by the holder of its job's lease, after its intent (status
``starting``, run dir) committed; a reconciler that restarts finds the intent without a launch result and
launches into the same run dir, which adopts the running replica (``Executor.launch`` contract).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.controllers.base import ControllerContext
from aicenter.controllers.jobs_common import WakeableController
from aicenter.controllers.jobs_pass import JobPass, LeaseLost, start_many
from aicenter.controllers.store_gc import replica_name
from aicenter.core.catalog import ItemKind
from aicenter.core.clock import utcnow
from aicenter.core.errors import Conflict, NotFound
from aicenter.core.jobs import JobStatus
from aicenter.db.engine import Database
from aicenter.db.leases import claim_rows, is_free, release_row, renew_row
from aicenter.db.models import CatalogItem, CatalogVersion, Job, User
from aicenter.executors.base import Executor
from aicenter.executors.local import LocalExecutor
from aicenter.services import catalog
from aicenter.services.catalog._items import user_namespace
from aicenter.services.context import Actor
from aicenter.services.jobs._runtime import job_dirs
from aicenter.storage import BlobStore

log = logging.getLogger(__name__)

_WORKING = tuple(
    s.value
    for s in (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.PREEMPTED)
)
_NOT_LAUNCHED = (JobStatus.PENDING.value, JobStatus.QUEUED.value)


def needs_work() -> ColumnElement[bool]:
    """The jobs a reconciler leases (through the status index)."""
    return or_(
        Job.status.in_(_WORKING),
        and_(Job.status.in_(_NOT_LAUNCHED), Job.stop_requested_at.is_not(None)),
    )


class JobReconciler(WakeableController):
    """Launches, watches, restarts and stops jobs' replicas; saves output models.

    Args:
        db: The database.
        store: The blob store (code and data are materialized from it; output models go into it).
        settings: ``jobs_path``, ``reconcile_interval_s``, ``stop_grace_s`` and ``api_url`` are read.
        executors: Executors by name (``local``, ...); default: this host's local executor.
        owner: The lease owner name (default ``host:pid``).
        batch: Jobs driven concurrently at most (each pass holds its job's lease).
        lease_ttl_s: How long a job's lease lasts without renewal (renewed every third of it while working).
    """

    name = "job-reconciler"

    def __init__(
        self,
        db: Database,
        store: BlobStore,
        settings: Settings,
        *,
        executors: Mapping[str, Executor] | None = None,
        owner: str | None = None,
        batch: int = 32,
        lease_ttl_s: float = 30.0,
    ) -> None:
        super().__init__()
        self.db = db
        self.store = store
        self.settings = settings
        self.interval_s = settings.reconcile_interval_s
        self.executors: Mapping[str, Executor] = executors or {"local": LocalExecutor(settings.jobs_path)}
        self.owner = owner or replica_name()
        self.batch = batch
        self.lease_ttl_s = lease_ttl_s

    async def tick(self) -> None:
        # Launches first: a scheduled job waits for nothing but this, and its start is the latency users see;
        # watching running jobs and noticing exits can wait for the second sweep. The launches go by claimed
        # batch (``start_many``: two write transactions per batch, not two per job), in both sweeps: jobs
        # scheduled while the second one runs are claimed by it (their ids are higher).
        await self._sweep(Job.status == JobStatus.SCHEDULED.value)
        await self._sweep(needs_work())

    async def _sweep(self, which: ColumnElement[bool]) -> None:
        """Drive every free job matching ``which``, in id order, at most ``batch`` jobs at a time.

        A pool, not batches: a claim tops the running passes up as they finish, so one slow pass (a stop that
        waits its grace, 30 s by default) does not hold back the launches queued behind it. The scheduled jobs
        of a claim are driven as one group (``start_many``; their launches take about the same time, so a group
        frees its slots together without holding others back); every other job has a pass of its own.
        """
        if not await self._any_free(which):
            return
        after = 0
        exhausted = False
        passes: dict[asyncio.Task[None], int] = {}  # a task -> the jobs (slots) it drives
        try:
            while not self._stopping.is_set():
                free = self.batch - sum(passes.values())
                # Top up once a quarter of the slots is free: a claim is a write transaction, one per job
                # finishing would contend with the API for the database.
                if not exhausted and (free >= max(1, self.batch // 4) or not passes):
                    claims = await self._claim(which, after, free)
                    if claims:
                        after = claims[-1][0]
                        group = [(i, t) for i, t, scheduled in claims if scheduled]
                        if group:
                            passes[asyncio.create_task(self._drive(group))] = len(group)
                        passes.update((asyncio.create_task(self._drive([(i, t)])), 1) for i, t, s in claims if not s)
                    exhausted = len(claims) < free
                if not passes:
                    return
                done, _ = await asyncio.wait(passes, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    del passes[task]
        finally:
            if passes:  # stopping: let the passes end (each releases its lease)
                await asyncio.gather(*passes, return_exceptions=True)

    async def _any_free(self, which: ColumnElement[bool]) -> bool:
        """A read before the claim: a tick with nothing to do (every submit wakes it) takes no write lock."""
        async with self.db.read() as session:
            found = await session.scalar(select(Job.id).where(is_free(Job, utcnow()), which).limit(1))
        return found is not None

    async def _claim(self, which: ColumnElement[bool], after: int, limit: int) -> list[tuple[int, str, bool]]:
        """Lease up to ``limit`` jobs after id ``after``: (id, token, whether it is scheduled)."""
        async with self.db.write() as session:
            rows = await claim_rows(
                session,
                Job,
                Job.id > after,
                which,
                owner=self.owner,
                ttl_s=self.lease_ttl_s,
                limit=limit,
                order_by=Job.id,
            )
            return [(row.id, row.lock_token or "", row.status == JobStatus.SCHEDULED.value) for row in rows]

    async def _drive(self, claims: list[tuple[int, str]]) -> None:
        """Drive the claimed jobs: one ``JobPass`` each, or, for more than one, ``start_many`` for those that are
        scheduled and a pass each for the rest. Every lease not given back by a pass's last write is released."""
        passes = [JobPass(self, i, t) for i, t in claims]
        keepers = [asyncio.create_task(self._keep(p.job_id, p.token)) for p in passes]
        try:
            alone = passes
            if len(passes) > 1:
                try:
                    alone = await start_many(self, passes)
                except Exception:  # the leases are released below; the next tick tries again
                    log.exception("jobs %s: batched launch failed", [p.job_id for p in passes])
                    alone = []
            await asyncio.gather(*(self._run_pass(p) for p in alone))
        finally:
            for keeper in keepers:
                keeper.cancel()
            await asyncio.gather(*keepers, return_exceptions=True)
            await asyncio.gather(*(self._release(p) for p in passes if not p.released))

    async def _run_pass(self, job_pass: JobPass) -> None:
        try:
            await job_pass.run()
        except LeaseLost:
            log.info("job %s: lease lost to another reconciler; its pass is dropped", job_pass.job_id)
        except Exception:
            log.exception("job %s: reconcile pass failed", job_pass.job_id)

    async def _release(self, job_pass: JobPass) -> None:
        try:
            async with self.db.write() as session:
                await release_row(session, Job, Job.id == job_pass.job_id, token=job_pass.token)
        except Exception:  # the lease then expires by itself
            log.warning("job %s: could not release its lease", job_pass.job_id, exc_info=True)

    async def _keep(self, job_id: int, token: str) -> None:
        """Renew the job's lease every third of its lifetime while a pass works (a stop waits the grace)."""
        while True:
            await asyncio.sleep(self.lease_ttl_s / 3)
            async with self.db.write() as session:
                if not await renew_row(session, Job, Job.id == job_id, token=token, ttl_s=self.lease_ttl_s):
                    return

    async def save_output(self, job: Job, model_name: str) -> int:
        """Save the job's output directory as a version of its user's model ``model_name`` (created if missing),
        with lineage. Idempotent: a version already saved for this job (a crash before the job was marked
        succeeded) is returned instead of a second one.

        Raises:
            AicenterError: The owner is gone, the model cannot be created, the version does not fit the quota.
        """
        async with self.db.read() as session:
            user = await session.get(User, job.user_id) if job.user_id is not None else None
            if user is None:
                raise NotFound(f"the owner of job {job.id} no longer exists; its output was not saved")
            item_id = await _model_item(session, user.id, model_name)
            if item_id is not None:
                done = await _version_of_job(session, item_id, job.id)
                if done is not None:
                    return done
        actor = Actor(user.id, user.username, user.is_platform_admin)
        if item_id is None:
            try:
                async with self.db.write() as session:
                    view = await catalog.create_item(
                        session, actor, ItemKind.MODEL, name=model_name, workspace_id=job.workspace_id
                    )
                    item_id = view.id
            except Conflict:  # created meanwhile (another pass, the user)
                async with self.db.read() as session:
                    item_id = await _model_item(session, user.id, model_name)
                if item_id is None:
                    raise
        lineage = {
            "job_id": job.id,
            "algorithm_version_id": job.algorithm_version_id,
            "dataset_version_ids": [int(v) for v in job.dataset_version_ids or []],
        }
        version = await catalog.create_version_from_directory(
            self.db,
            actor,
            self.store,
            ItemKind.MODEL,
            item_id,
            job_dirs(self.settings.jobs_path, job.id).output,
            description=f"output of job {job.id} ({job.name})",
            metadata={"lineage": lineage},
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


def build(ctx: ControllerContext) -> JobReconciler:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return JobReconciler(ctx.db, ctx.store, ctx.settings)
