"""The job reconciler: launches, watches, restarts and stops the replicas of jobs through the executors.

Every server replica runs it. A tick leases the jobs that need work (``claim_rows``: ``SKIP LOCKED`` on
PostgreSQL, so two replicas never take the same job), ``scheduled`` ones first (their launch is the latency
users see), and drives them in passes. A pass over a group of leased jobs is::

    load (one read) -> observe (executors, preparation) -> decide (pure) -> apply (one write) -> act -> ...

repeated in rounds while a decision has actions: each round's apply writes the previous round's findings and
the new decision in one transaction that checks every lease (``services.jobs.apply_steps``), and the last one
gives the leases back. The scheduled jobs of one claim form one group (their launches take two write
transactions for the whole group); every other job is a group of its own, so a slow stop (the grace period,
30 s by default) holds back nothing else. ``RowLeaseKeeper`` renews the group's leases while it acts.

Exactly once: a replica is launched only by the holder of its job's lease, after its intent (status
``starting``, run dir) committed; a pass that finds an intent without a launch result launches into the same
run dir, which adopts the running replica (``Executor.launch`` contract).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import WakeableController, replica_name
from aicenter.controllers.jobs.act import Hands
from aicenter.controllers.jobs.decide import decide
from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.core.jobs.reconcile import Decision, Observations
from aicenter.db.engine import Database
from aicenter.db.leases import RowLeaseKeeper, release_row
from aicenter.db.models import Job
from aicenter.executors.base import Executor
from aicenter.executors.local import LocalExecutor
from aicenter.services.jobs import Work, any_job_to_reconcile, apply_steps, claim_jobs, load_jobs
from aicenter.storage import BlobStore

log = logging.getLogger(__name__)

__all__ = ["MAX_ROUNDS", "JobReconciler", "build"]

# Statuses a pass moves on from by itself in its next round: their replicas are stopped, then the job queued.
_FOLLOW_UP = (JobStatus.RESTARTING, JobStatus.PREEMPTED)

TOPUP_S = 1.0
"""While passes run and the last claim found no more jobs, how often to claim again."""

MAX_ROUNDS = 6
"""Rounds of one pass at most. A start takes 2 (intent, handles), a gang restart 3 (restarting and stops,
the stopped replicas and the next attempt, ...); a stop of an intent without a launch result one more (it is
launched, which adopts it, before it is stopped). What is left after the last round is the next tick's."""


class JobReconciler(WakeableController):
    """Launches, watches, restarts and stops jobs' replicas; saves output models.

    Args:
        db: The database.
        store: The blob store (code and data are materialized from it; output models go into it).
        settings: ``jobs_path``, ``reconcile_interval_s``, ``stop_grace_s`` and ``api_url`` are read.
        executors: Executors by name (``local``, ...); default: this host's local executor.
        owner: The lease owner name (default ``host:pid``).
        batch: Jobs driven concurrently at most (each pass holds its jobs' leases).
        lease_ttl_s: How long a job's lease lasts without renewal (renewed every third of it while acting).
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
        self.settings = settings
        self.interval_s = settings.reconcile_interval_s
        self.hands = Hands(db, store, settings, executors or {"local": LocalExecutor(settings.jobs_path)})
        self.owner = owner or replica_name()
        self.batch = batch
        self.lease_ttl_s = lease_ttl_s

    async def tick(self) -> None:
        # Launches first: a scheduled job waits for nothing but this, and its start is the latency users see;
        # watching running jobs and noticing exits can wait for the second sweep, which also claims jobs
        # scheduled while it runs (their ids are higher).
        await self._sweep(scheduled_only=True)
        await self._sweep(scheduled_only=False)

    async def _sweep(self, *, scheduled_only: bool) -> None:
        """Drive every free job that needs work (or only the scheduled ones), in id order, ``batch`` at a time.

        A pool, not batches: a claim tops the running passes up as they finish, and is tried again every
        ``TOPUP_S`` while they run, so one slow pass does not hold back the launches queued behind it.
        """
        async with self.db.read() as session:
            if not await any_job_to_reconcile(session, scheduled_only=scheduled_only):
                return
        after = 0
        exhausted = False
        passes: dict[asyncio.Task[None], int] = {}  # a pass -> the jobs (slots) it drives
        try:
            while not self._stopping.is_set():
                free = self.batch - sum(passes.values())
                # Top up once a quarter of the slots is free: a claim is a write transaction, one per job
                # finishing would contend with the API for the database.
                if not exhausted and (free >= max(1, self.batch // 4) or not passes):
                    async with self.db.write() as session:
                        claims = await claim_jobs(
                            session,
                            owner=self.owner,
                            ttl_s=self.lease_ttl_s,
                            after=after,
                            limit=free,
                            scheduled_only=scheduled_only,
                        )
                    if claims:
                        after = max(claims)
                        scheduled = {i: t for i, (t, s) in claims.items() if s}
                        if scheduled:
                            passes[asyncio.create_task(self.drive(scheduled))] = len(scheduled)
                        for i, (t, s) in claims.items():
                            if not s:
                                passes[asyncio.create_task(self.drive({i: t}))] = 1
                    exhausted = len(claims) < free
                if not passes:
                    return
                # A claim that ran out of jobs is tried again after TOPUP_S while the passes run: a pass lasts as
                # long as its slowest launch (seconds on Slurm), and a job scheduled meanwhile must not wait for
                # another job's launch. Not on every wake-up: a pass's own commits wake this controller, and a
                # claim (a write) per commit slowed short passes down on SQLite.
                done, _ = await asyncio.wait(
                    passes, timeout=TOPUP_S if exhausted else None, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:
                    exhausted = False
                for task in done:
                    del passes[task]
        finally:
            if passes:  # stopping: let the passes end (each gives its leases back)
                await asyncio.gather(*passes, return_exceptions=True)

    async def drive(self, leases: Mapping[int, str]) -> None:
        """One pass over leased jobs (id -> lease token): rounds of decide, apply, act until nothing is left to
        do now. Every lease is given back by the last write, or by ``_give_back`` when the pass fails."""
        try:
            async with RowLeaseKeeper(self.db, Job, leases, self.lease_ttl_s):
                await self._rounds(dict(leases))
        except Exception:
            log.exception("jobs %s: reconcile pass failed", sorted(leases))
            await self._give_back(leases)

    async def _give_back(self, leases: Mapping[int, str]) -> None:
        """Release the leases of a failed pass, so that the next tick tries again at once (what the pass
        wrote stays: every round's write is complete in itself)."""
        try:
            async with self.db.write() as session:
                for job_id, token in leases.items():
                    await release_row(session, Job, Job.id == job_id, token=token)
        except Exception:  # they expire by themselves
            log.warning("jobs %s: could not give their leases back", sorted(leases), exc_info=True)

    async def _rounds(self, leases: dict[int, str]) -> None:
        async with self.db.read() as session:
            states = await load_jobs(session, leases)
        seen = await self.hands.observe(states)
        for round_no in range(MAX_ROUNDS):
            now = utcnow()
            decisions = {i: decide(s.snapshot, seen[i], now=now) for i, s in states.items()}
            last = round_no == MAX_ROUNDS - 1
            released = {i for i, d in decisions.items() if last or not _goes_on(d)}
            work = [Work(states[i], leases[i], d.steps, release=i in released) for i, d in decisions.items()]
            async with self.db.write() as session:
                applied = await apply_steps(session, work, lease_ttl_s=self.lease_ttl_s)
            # Jobs whose lease was lost are dropped; a job that changed meanwhile was given back undecided (the
            # next pass decides it again); released jobs are done.
            going = {i: a for i, a in applied.items() if a.decided and i not in released}
            if not going:
                return
            states = {i: a.state for i, a in going.items()}
            found = await asyncio.gather(
                *(self.hands.act(a.state, decisions[i].actions, a.api_token) for i, a in going.items())
            )
            seen = dict(zip(going, found, strict=True))
            for i in states:  # a follow-up round without actions observes nothing new
                seen.setdefault(i, Observations())


def _goes_on(decision: Decision) -> bool:
    """Whether the pass needs another round after this decision: actions to take, or a status it moves on
    from by itself (a restarting or preempted gang is stopped and requeued in the same pass)."""
    change = decision.steps.job
    return bool(decision.actions) or (change is not None and change.to in _FOLLOW_UP)


def build(ctx: AppContext) -> JobReconciler:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return JobReconciler(
        ctx.db, ctx.store, ctx.settings, executors=ctx.executors or None, batch=ctx.settings.reconcile_batch
    )
