"""One reconciler pass over one leased job: launch, watch, restart, stop, finish.

Every step reads the rows, acts outside any transaction (ports, directories, the executor), and writes the
result in a short transaction that first checks the job's lease token (``renew_row``): a pass whose lease was
taken over writes nothing. Launching follows "record the intent before acting": the replica rows become
``starting`` with their run dir (an intent-only handle, pid 0) and that commits BEFORE the executor is called,
so a reconciler that crashes between the two finds the intent and launches into the same run dir, which the
executor turns into an adoption of what is already running instead of a second start.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.controllers.jobs_observe import (
    GangFailure,
    Outcome,
    gang_failure,
    handle_of,
    launched,
    outcome,
    stop_reason,
)
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError
from aicenter.core.jobs import (
    FailureReason,
    JobSpec,
    JobStatus,
    counts_against_budget,
    parse_job_spec,
    should_restart,
    status_after_failure,
)
from aicenter.core.jobs import ReplicaStatus as RowStatus
from aicenter.db.leases import renew_row
from aicenter.db.models import Job, Node, Replica, User
from aicenter.executors.base import Executor, LaunchFailed, ReplicaHandle, ReplicaPlan
from aicenter.runtime.env import ports_needed
from aicenter.services.context import Actor
from aicenter.services.jobs import issue_job_token, transition
from aicenter.services.jobs._lifecycle import transition_many
from aicenter.services.jobs._runtime import (
    ImageNotReady,
    PlannedReplica,
    build_plans,
    job_dirs,
    load_content,
    materialize,
    notify_after_commit,
    python_bin,
    replica_host,
)

if TYPE_CHECKING:
    from aicenter.controllers.reconciler import JobReconciler

log = logging.getLogger(__name__)

RECONCILER_ACTOR = Actor.system("reconciler")


class LeaseLost(Exception):
    """Another reconciler holds the job now: this pass must stop writing."""


@dataclass
class Loaded:
    job: Job
    replicas: list[Replica]  # the current attempt, in (task, index) order
    spec: JobSpec


@dataclass
class Prepared:
    """What a launch needs besides the rows, when the caller has it already (``start``): saves two reads and
    a write per job (the token is issued in the intent's transaction)."""

    python: Path
    nodes: dict[str, Node]
    token: str


@dataclass
class Ready:
    """What ``prepare`` found for a launch: the interpreter, the replicas' nodes, their ports by row id."""

    python: Path
    nodes: dict[str, Node]
    ports: dict[int, list[int]]


def startable(job: Job) -> bool:
    """A scheduled job nobody asked to stop: what ``start`` (and ``start_many``) launch."""
    return job.status == JobStatus.SCHEDULED.value and stop_reason(job) is None


class JobPass:
    """Drives one job one step (or a few) toward its goal. Created per job per tick."""

    def __init__(self, owner: JobReconciler, job_id: int, token: str) -> None:
        self.r = owner
        self.db = owner.db
        self.job_id = job_id
        self.token = token
        self.released = False  # the lease was given back by the pass's last write (the caller need not)

    # -- reading and guarded writing ----------------------------------------------------------------------------

    async def load(self) -> Loaded | None:
        async with self.db.read() as session:
            job = await session.get(Job, self.job_id)
            if job is None or job.lock_token != self.token:
                return None
            rows = (
                await session.scalars(
                    select(Replica)
                    .where(Replica.job_id == job.id, Replica.attempt == job.restart_count)
                    .order_by(Replica.task, Replica.index)
                )
            ).all()
        return Loaded(job, list(rows), parse_job_spec(job.spec))

    @asynccontextmanager
    async def guarded(self, *, release: bool = False) -> AsyncIterator[tuple[AsyncSession, Job]]:
        """A write transaction in which we still hold the job's lease (it is renewed first), with the job row.

        ``release``: the pass ends with this write, which gives the lease back too (one transaction, not two).
        """
        async with self.db.write() as session:
            if not await renew_row(session, Job, Job.id == self.job_id, token=self.token, ttl_s=self.r.lease_ttl_s):
                raise LeaseLost
            job = await session.get(Job, self.job_id, populate_existing=True)
            assert job is not None
            yield session, job
            if release:
                job.lock_owner = job.lock_token = job.lock_expires_at = None
        self.released = release

    async def _rows(self, session: AsyncSession, job: Job) -> dict[int, Replica]:
        rows = await session.scalars(
            select(Replica).where(Replica.job_id == job.id, Replica.attempt == job.restart_count)
        )
        return {r.id: r for r in rows.all()}

    # -- entry --------------------------------------------------------------------------------------------------

    async def run(self) -> None:
        loaded = await self.load()
        if loaded is None:
            return
        job = loaded.job
        status = JobStatus(job.status)
        reason = stop_reason(job)
        if status.is_finished():
            return
        if reason is not None:
            await self.stop(loaded, reason)
        elif status is JobStatus.SCHEDULED:
            await self.start(loaded)
        elif status in (JobStatus.STARTING, JobStatus.RUNNING):
            await self.watch(loaded)
        elif status in (JobStatus.RESTARTING, JobStatus.PREEMPTED):
            await self.requeue(loaded)

    # -- start ----------------------------------------------------------------------------------------------------

    async def start(self, loaded: Loaded) -> None:
        """scheduled -> starting: ports, directories, the intent (committed), then the launches."""
        ready = await self.prepare(loaded)
        if ready is None:
            return
        async with self.guarded() as (session, fresh):
            if not startable(fresh):
                return  # changed meanwhile; the next pass decides
            rows = self.record_intent(fresh, await self._rows(session, fresh), ready)
            await transition(session, fresh, JobStatus.STARTING, actor=RECONCILER_ACTOR, reason="starting")
            # AICENTER_TOKEN of this launch (_tokens.py), in the intent's transaction: it holds the lease.
            token = await issue_job_token(session, fresh)
        # The rows as just committed (the session does not expire them): no read back.
        loaded = Loaded(fresh, rows, loaded.spec)
        await self.launch_pending(loaded, Prepared(ready.python, ready.nodes, token), release=True)

    async def prepare(self, loaded: Loaded) -> Ready | None:
        """What comes before the intent: the manifests, the image, the directories, the ports. ``None``: the job
        cannot start (it was failed with ``launch_failed``)."""
        job, replicas, spec = loaded.job, loaded.replicas, loaded.spec
        dirs = job_dirs(self.r.settings.jobs_path, job.id)
        try:
            async with self.db.read() as session:
                content = await load_content(session, job.algorithm_version_id, list(job.dataset_version_ids or []))
                python = await python_bin(session, self.r.store, spec.image, job.image_version_id)
                nodes = await self._nodes(session, replicas)
            await materialize(self.r.store, dirs, content)
            ports: dict[int, list[int]] = {}
            for r in replicas:
                executor = self._executor_for_node(nodes, r)
                ports[r.id] = await executor.allocate_ports(r.node_name or "", ports_needed(spec.framework.value))
        except (ImageNotReady, LaunchFailed, OSError, ValueError, KeyError) as exc:
            await self.fail_launch(loaded, f"could not prepare the job: {exc}")
            return None
        return Ready(python, nodes, ports)

    def record_intent(self, job: Job, rows: dict[int, Replica], ready: Ready) -> list[Replica]:
        """Mark the replica rows ``starting`` with their ports and an intent-only handle (in the caller's write
        transaction, before any launch). Returns them in (task, index) order."""
        dirs = job_dirs(self.r.settings.jobs_path, job.id)
        ordered = sorted(rows.values(), key=lambda r: (r.task, r.index))
        for r in ordered:
            node = ready.nodes.get(r.node_name or "")
            handle = ReplicaHandle(
                executor=node.executor if node else "local",
                node=r.node_name or "",
                run_dir=str(dirs.run_dir(job.restart_count, r.task, r.index)),
                pid=0,  # intent only: not launched yet
                start_time=0.0,
            )
            r.status = RowStatus.STARTING.value
            r.ports = ready.ports.get(r.id, [])
            r.handle = handle.to_dict()
        return ordered

    async def _nodes(self, session: AsyncSession, replicas: Sequence[Replica]) -> dict[str, Node]:
        names = {r.node_name for r in replicas if r.node_name}
        if not names:
            return {}
        return {n.name: n for n in (await session.scalars(select(Node).where(Node.name.in_(names)))).all()}

    def _executor_for_node(self, nodes: dict[str, Node], replica: Replica) -> Executor:
        node = nodes.get(replica.node_name or "")
        kind = node.executor if node is not None else "local"
        executor = self.r.executors.get(kind)
        if executor is None:
            raise LaunchFailed(f"node {replica.node_name} is run by executor {kind!r}, which this server does not have")
        return executor

    def _executor(self, handle: ReplicaHandle) -> Executor:
        executor = self.r.executors.get(handle.executor)
        if executor is None:
            raise LaunchFailed(f"no {handle.executor!r} executor on this server")
        return executor

    async def plans(self, loaded: Loaded, prepared: Prepared | None = None) -> dict[int, ReplicaPlan]:
        """The plan of every replica of the current attempt, rebuilt from its rows (see ``build_plans``)."""
        job, replicas, spec = loaded.job, loaded.replicas, loaded.spec
        if prepared is None:
            async with self.db.read() as session:
                python = await python_bin(session, self.r.store, spec.image, job.image_version_id)
                nodes = await self._nodes(session, replicas)
            async with self.guarded() as (session, fresh):  # AICENTER_TOKEN: a new one per launch (_tokens.py)
                token = await issue_job_token(session, fresh)
        else:
            python, nodes, token = prepared.python, prepared.nodes, prepared.token
        node_names = [r.node_name or "" for r in replicas]
        planned = []
        for r in replicas:
            handle = handle_of(r)
            assert handle is not None
            node = nodes.get(r.node_name or "")
            planned.append(
                PlannedReplica(
                    task=r.task,
                    index=r.index,
                    attempt=r.attempt,
                    node=r.node_name or "",
                    host=replica_host(node.address if node else "", r.node_name or "", node_names),
                    ports=tuple(int(p) for p in r.ports or []),
                    devices=tuple(int(d) for d in r.devices or []),
                    cpus=None if r.cpus is None else tuple(int(c) for c in r.cpus),
                    cpu_milli=int(r.cpu_milli),
                    memory_bytes=int(r.memory_bytes),
                    run_dir=Path(handle.run_dir),
                )
            )
        plans = build_plans(
            job.id,
            spec,
            planned,
            job_dirs(self.r.settings.jobs_path, job.id),
            python=python,
            api_url=self.r.settings.api_url,
            token=token,
        )
        by_key = {(p.task, p.replica): p for p in plans}
        return {r.id: by_key[(r.task, r.index)] for r in replicas}

    async def launch_pending(self, loaded: Loaded, prepared: Prepared | None = None, *, release: bool = False) -> None:
        """Launch (or adopt) every replica whose intent is recorded and whose handle is not stored yet.

        ``release``: this is the pass's last step; the write that stores the handles gives the lease back.
        """
        results = await self.launch(loaded, prepared)
        if not results:
            return
        async with self.guarded(release=release) as (session, job):
            store_handles(job, await self._rows(session, job), results)

    async def launch(self, loaded: Loaded, prepared: Prepared | None = None) -> list[Launched]:
        """The launches of ``launch_pending``, concurrent, outside any transaction; the caller stores them.
        ``[]``: nothing to launch, or the plans could not be built (the job was failed)."""
        todo = [r for r in loaded.replicas if r.status == RowStatus.STARTING.value and not launched(r)]
        if not todo:
            return []
        try:
            plans = await self.plans(loaded, prepared)
        except (ImageNotReady, ValueError, KeyError) as exc:
            await self.fail_launch(loaded, f"could not plan the replicas: {exc}")
            return []

        async def one(r: Replica) -> Launched:
            intent = handle_of(r)
            assert intent is not None
            try:
                return r.id, await self._executor(intent).launch(plans[r.id]), ""
            except LaunchFailed as exc:
                return r.id, None, str(exc)

        return list(await asyncio.gather(*(one(r) for r in todo)))

    async def fail_launch(self, loaded: Loaded, message: str) -> None:
        """The job cannot start (image not built, unusable directories): it fails with ``launch_failed``, or
        restarts if its policy says so."""
        log.warning("job %s: %s", loaded.job.id, message)
        async with self.guarded() as (session, job):
            if JobStatus(job.status) not in (JobStatus.SCHEDULED, JobStatus.STARTING):
                return
            now = utcnow()
            for row in (await self._rows(session, job)).values():
                if not RowStatus(row.status).is_finished():
                    row.status = RowStatus.FAILED.value
                    row.reason = FailureReason.LAUNCH_FAILED.value
                    row.finished_at = now
            if job.status == JobStatus.SCHEDULED.value:
                await transition(
                    session,
                    job,
                    JobStatus.FAILED,
                    actor=RECONCILER_ACTOR,
                    failure_reason=FailureReason.LAUNCH_FAILED,
                    message=message[:4000],
                )
                notify_after_commit(session)
                return
        # A starting job goes through the gang-failure path (stop what was launched, retry policy).
        fresh = await self.load()
        if fresh is not None:
            await self.fail(fresh, GangFailure(FailureReason.LAUNCH_FAILED, None, message[:4000]))

    # -- watch ----------------------------------------------------------------------------------------------------

    async def observe(self, replicas: Sequence[Replica]) -> dict[int, Outcome]:
        """Ask the executor about every launched, unfinished replica (concurrently)."""
        now = utcnow()

        async def one(r: Replica) -> tuple[int, Outcome]:
            handle = handle_of(r)
            assert handle is not None
            return r.id, outcome(await self._executor(handle).status(handle), now=now)

        todo = [r for r in replicas if launched(r) and not RowStatus(r.status).is_finished()]
        return dict(await asyncio.gather(*(one(r) for r in todo)))

    async def record(self, outcomes: dict[int, Outcome]) -> None:
        """Write observed changes to the replica rows (only what changed: no write churn)."""
        if not outcomes:
            return
        async with self.guarded() as (session, job):
            rows = await self._rows(session, job)
            for replica_id, out in outcomes.items():
                row = rows.get(replica_id)
                if row is None or RowStatus(row.status).is_finished():
                    continue
                _apply_outcome(row, out)

    async def watch(self, loaded: Loaded) -> None:
        await self.launch_pending(loaded)
        loaded = await self.load() or loaded
        outcomes = await self.observe(loaded.replicas)
        if any(_changes(r, outcomes.get(r.id)) for r in loaded.replicas):
            await self.record(outcomes)
            loaded = await self.load() or loaded
        replicas = loaded.replicas
        failure = gang_failure(replicas)
        if failure is not None:
            await self.fail(loaded, failure)
        elif replicas and all(r.status == RowStatus.SUCCEEDED.value for r in replicas):
            await self.succeed(loaded)
        elif (
            loaded.job.status == JobStatus.STARTING.value
            and replicas
            and all(r.status in (RowStatus.RUNNING.value, RowStatus.SUCCEEDED.value) for r in replicas)
        ):
            async with self.guarded() as (session, job):
                if job.status == JobStatus.STARTING.value and stop_reason(job) is None:
                    await transition(session, job, JobStatus.RUNNING, actor=RECONCILER_ACTOR, reason="running")

    # -- stopping -------------------------------------------------------------------------------------------------

    async def stop_replicas(self, loaded: Loaded, reason: FailureReason) -> None:
        """Stop every unfinished replica (SIGTERM, ``stop_grace_s``, SIGKILL), concurrently, and record them.

        A replica whose intent is recorded but whose launch result is not is launched first: the launch adopts
        it if it is running, and a stop must never leave a process of the job behind.
        """
        await self.launch_pending(loaded)
        loaded = await self.load() or loaded
        grace = self.r.settings.stop_grace_s

        async def one(r: Replica) -> tuple[int, Outcome]:
            handle = handle_of(r)
            assert handle is not None
            executor = self._executor(handle)
            await executor.stop(handle, grace)
            return r.id, outcome(await executor.status(handle), now=utcnow(), stopped_for=reason)

        todo = [r for r in loaded.replicas if launched(r) and not RowStatus(r.status).is_finished()]
        outcomes = dict(await asyncio.gather(*(one(r) for r in todo)))
        now = utcnow()
        async with self.guarded() as (session, job):
            for row in (await self._rows(session, job)).values():
                if RowStatus(row.status).is_finished():
                    continue
                out = outcomes.get(row.id)
                if out is not None:
                    _apply_outcome(row, out)
                else:  # never launched: ends with the job, with no machine time
                    row.status = RowStatus.STOPPED.value
                    row.reason = reason.value
                    row.finished_at = now

    async def stop(self, loaded: Loaded, reason: FailureReason) -> None:
        """Carry out a stop request: a person's (-> stopped) or a preemption (-> preempted -> queued)."""
        status = JobStatus(loaded.job.status)
        if reason is FailureReason.PREEMPTED and status is JobStatus.SCHEDULED:
            await self._undo_placement()
            return
        if status not in (JobStatus.PENDING, JobStatus.QUEUED):
            await self.stop_replicas(loaded, reason)
        if reason is FailureReason.PREEMPTED:
            async with self.guarded() as (session, job):
                if JobStatus(job.status) in (JobStatus.STARTING, JobStatus.RUNNING):
                    await transition(
                        session,
                        job,
                        JobStatus.PREEMPTED,
                        actor=RECONCILER_ACTOR,
                        failure_reason=FailureReason.PREEMPTED,
                        message=job.message,
                    )
                    notify_after_commit(session)
            fresh = await self.load()
            if fresh is not None:
                await self.requeue(fresh)
            return
        async with self.guarded() as (session, job):
            if JobStatus(job.status).is_finished():
                return
            who = "a platform admin" if reason is FailureReason.STOPPED_BY_ADMIN else "request"
            await transition(
                session,
                job,
                status_after_failure(reason),
                actor=RECONCILER_ACTOR,
                failure_reason=reason,
                message=f"stopped by {who}" if reason is not FailureReason.ARREARS else "stopped: balance exhausted",
            )
            notify_after_commit(session)

    async def _undo_placement(self) -> None:
        """A preempted job that was placed but not launched goes straight back to the queue."""
        async with self.guarded() as (session, job):
            if job.status != JobStatus.SCHEDULED.value:
                return
            for row in (await self._rows(session, job)).values():
                row.node_name = None
                row.node_id = None
                row.devices = []
            job.stop_requested_at = None
            job.failure_reason = None
            await transition(
                session, job, JobStatus.QUEUED, actor=RECONCILER_ACTOR, reason="placement_undone", message=job.message
            )
            notify_after_commit(session)

    # -- failure, restart, success ------------------------------------------------------------------------------

    async def fail(self, loaded: Loaded, failure: GangFailure) -> None:
        """A replica failed: restart the gang (restarting -> stop the rest -> queued) or stop it and fail."""
        if should_restart(loaded.spec.retry, failure.reason, loaded.job.counted_restarts):
            await self._end_live(JobStatus.RESTARTING, failure)
            fresh_loaded = await self.load()
            if fresh_loaded is not None:
                await self.requeue(fresh_loaded)
            return
        # Stop the peers BEFORE the job becomes final: a finished job is never claimed again, so a peer left
        # running now would run forever.
        await self.stop_replicas(loaded, FailureReason.STOPPED)
        await self._end_live(JobStatus.FAILED, failure)

    async def _end_live(self, to: JobStatus, failure: GangFailure) -> None:
        """Move a starting or running job to ``to`` with the failure's reason (a job that moved on meanwhile,
        e.g. stopped by its user, is left as it is); a final status wakes the controllers."""
        async with self.guarded() as (session, fresh):
            if JobStatus(fresh.status) in (JobStatus.STARTING, JobStatus.RUNNING):
                await transition(
                    session,
                    fresh,
                    to,
                    actor=RECONCILER_ACTOR,
                    failure_reason=failure.reason,
                    exit_code=failure.exit_code,
                    message=failure.message,
                )
                if to.is_finished():
                    notify_after_commit(session)

    async def requeue(self, loaded: Loaded) -> None:
        """restarting / preempted -> (every replica stopped) -> queued with the next attempt, or failed."""
        job = loaded.job
        reason = FailureReason(job.failure_reason or FailureReason.ERROR.value)
        await self.stop_replicas(
            loaded, FailureReason.PREEMPTED if reason is FailureReason.PREEMPTED else FailureReason.STOPPED
        )
        async with self.guarded() as (session, fresh):
            status = JobStatus(fresh.status)
            if status not in (JobStatus.RESTARTING, JobStatus.PREEMPTED):
                return
            if status is JobStatus.PREEMPTED and not should_restart(loaded.spec.retry, reason, fresh.counted_restarts):
                await transition(
                    session,
                    fresh,
                    JobStatus.FAILED,
                    actor=RECONCILER_ACTOR,
                    failure_reason=FailureReason.PREEMPTED,
                    message="preempted; its retry policy does not restart on preemption",
                )
                notify_after_commit(session)
                return
            current = list((await self._rows(session, fresh)).values())
            fresh.restart_count += 1
            if counts_against_budget(reason):
                fresh.counted_restarts += 1
            fresh.stop_requested_at = None
            fresh.failure_reason = None
            fresh.exit_code = None
            for row in sorted(current, key=lambda r: (r.task, r.index)):
                session.add(_next_attempt(row, fresh.restart_count))
            await transition(
                session,
                fresh,
                JobStatus.QUEUED,
                actor=RECONCILER_ACTOR,
                reason="restart",
                message=f"restart {fresh.restart_count} after {reason.value}",
            )
            notify_after_commit(session)

    async def succeed(self, loaded: Loaded) -> None:
        """Every replica exited 0: save the output model (once), then succeeded."""
        job, spec = loaded.job, loaded.spec
        version_id: int | None = job.output_model_version_id
        message = "all replicas exited 0"
        if spec.output_model and version_id is None:
            try:
                version_id = await self.r.save_output(job, spec.output_model)
                message = f"saved model {spec.output_model} (version {version_id})"
            except AicenterError as exc:  # the job did its work; the model could not be kept
                message = f"succeeded, but the output model was not saved: {exc.message}"
                log.warning("job %s: %s", job.id, message)
        async with self.guarded() as (session, fresh):
            if JobStatus(fresh.status) not in (JobStatus.STARTING, JobStatus.RUNNING):
                return
            fresh.output_model_version_id = version_id
            await transition(
                session, fresh, JobStatus.SUCCEEDED, actor=RECONCILER_ACTOR, reason="succeeded", message=message
            )
            notify_after_commit(session)


async def start_many(owner: JobReconciler, passes: Sequence[JobPass]) -> list[JobPass]:
    """``start`` for a claimed batch of scheduled jobs, with ONE intent transaction and ONE handles-and-release
    transaction instead of two per job.

    Why: on SQLite every write transaction holds the one write lock. Started one by one, 200 concurrent
    submissions held it ~81 ms per intent (about 9 statements) and ~14 ms per handles write: ~19 s of lock time
    queued behind each other (issue 5). Batched, a statement covers the batch (``IN (...)`` updates, one
    multi-row event insert); only the token inserts and the replica rows' own values stay per row.

    The guarantees are ``start``'s: the intent commits before any launch, only jobs whose lease we still hold
    (token compared under ``FOR UPDATE``) and that are still scheduled with no stop request are written, and a
    crash between the two transactions leaves intents that the next holder launches again (adoption).

    Returns the passes it did not drive: jobs that are no longer plain scheduled ones (a stop request came, a
    status changed since the claim); the caller runs them one by one. Passes it drove have ``released`` set when
    the handles write gave their lease back; the caller releases the others.
    """
    by_id = {p.job_id: p for p in passes}
    db, ttl = owner.db, owner.lease_ttl_s
    async with db.read() as session:
        jobs = (await session.scalars(select(Job).where(Job.id.in_(by_id)))).all()
        replicas = await _replicas(session, jobs)
    loaded: dict[int, Loaded] = {}
    alone: list[JobPass] = []
    for job in jobs:
        if job.lock_token != by_id[job.id].token:
            continue  # taken over already
        if not startable(job):
            alone.append(by_id[job.id])
            continue
        try:
            loaded[job.id] = Loaded(job, replicas[job.id], parse_job_spec(job.spec))
        except ValueError:
            alone.append(by_id[job.id])  # its own pass fails it the way it always has
    prepared = await asyncio.gather(*(by_id[i].prepare(one) for i, one in loaded.items()), return_exceptions=True)
    ready: dict[int, Ready] = {}
    for job_id, found in zip(loaded, prepared, strict=True):
        if isinstance(found, BaseException):
            log.error("job %s: could not prepare its launch", job_id, exc_info=found)
        elif found is not None:
            ready[job_id] = found
    if not ready:
        return alone

    # The intent, one transaction for the batch.
    async with db.write() as session:
        held = [j for j in await _hold(session, {i: by_id[i].token for i in ready}, ttl) if startable(j)]
        rows = await _replicas(session, held)
        intents = {j.id: by_id[j.id].record_intent(j, {r.id: r for r in rows[j.id]}, ready[j.id]) for j in held}
        await transition_many(session, held, JobStatus.STARTING, actor=RECONCILER_ACTOR, reason="starting")
        # One read for the tokens' users (issue_job_token's session.get then finds them in the identity map).
        await session.scalars(select(User).where(User.id.in_({j.user_id for j in held if j.user_id is not None})))
        tokens = {j.id: await issue_job_token(session, j) for j in held}

    async def launch(job: Job) -> list[Launched]:
        one, spec = ready[job.id], loaded[job.id].spec
        return await by_id[job.id].launch(
            Loaded(job, intents[job.id], spec), Prepared(one.python, one.nodes, tokens[job.id])
        )

    launches = await asyncio.gather(*(launch(j) for j in held), return_exceptions=True)
    results: dict[int, list[Launched]] = {}
    for job, result in zip(held, launches, strict=True):
        if isinstance(result, BaseException):
            log.error("job %s: its launch failed", job.id, exc_info=result)
        elif result:
            results[job.id] = result
    if not results:
        return alone

    # The handles, and the leases given back, one transaction for the batch.
    async with db.write() as session:
        held = await _hold(session, {i: by_id[i].token for i in results}, ttl)
        rows = await _replicas(session, held)
        for job in held:
            store_handles(job, {r.id: r for r in rows[job.id]}, results[job.id])
        await session.flush()
        await session.execute(
            update(Job)
            .where(Job.id.in_([j.id for j in held]))
            .values(lock_owner=None, lock_token=None, lock_expires_at=None)
            .execution_options(synchronize_session=False)
        )
    for job in held:
        by_id[job.id].released = True
    return alone


async def _hold(session: AsyncSession, tokens: dict[int, str], ttl_s: float) -> list[Job]:
    """The jobs of ``tokens`` whose lease is still ours, read afresh and locked (``FOR UPDATE`` on PostgreSQL;
    SQLite's write transaction serializes writers) until the caller commits, with their leases renewed: the
    batch counterpart of ``JobPass.guarded``. In id order (locks always taken in the same order)."""
    jobs = (
        await session.scalars(
            select(Job)
            .where(Job.id.in_(tokens))
            .order_by(Job.id)
            .with_for_update()
            .execution_options(populate_existing=True)
        )
    ).all()
    held = [j for j in jobs if j.lock_token == tokens[j.id]]
    if held:
        await session.execute(
            update(Job)
            .where(Job.id.in_([j.id for j in held]))
            .values(lock_expires_at=utcnow() + timedelta(seconds=ttl_s))
            .execution_options(synchronize_session=False)
        )
    return held


async def _replicas(session: AsyncSession, jobs: Sequence[Job]) -> dict[int, list[Replica]]:
    """The current attempt's replica rows of each job, in (task, index) order, in one query."""
    attempt = {j.id: j.restart_count for j in jobs}
    out: dict[int, list[Replica]] = {i: [] for i in attempt}
    if not attempt:
        return out
    rows = await session.scalars(
        select(Replica).where(Replica.job_id.in_(attempt)).order_by(Replica.job_id, Replica.task, Replica.index)
    )
    for r in rows.all():
        if r.attempt == attempt[r.job_id]:
            out[r.job_id].append(r)
    return out


Launched = tuple[int, ReplicaHandle | None, str]
"""A launch result: the replica row's id, its handle (``None``: the launch failed), the error."""


def store_handles(job: Job, rows: dict[int, Replica], results: Sequence[Launched]) -> None:
    """Write launch results to the replica rows still in ``starting`` (in the caller's guarded transaction)."""
    now = utcnow()
    for replica_id, handle, error in results:
        row = rows.get(replica_id)
        if row is None or row.status != RowStatus.STARTING.value:
            continue
        if handle is not None:
            row.handle = handle.to_dict()
        else:
            row.status = RowStatus.FAILED.value
            row.reason = FailureReason.LAUNCH_FAILED.value
            row.finished_at = now
            log.warning("job %s: %s/%s could not be launched: %s", job.id, row.task, row.index, error)


def _changes(row: Replica, out: Outcome | None) -> bool:
    if out is None:
        return False
    return out.status.value != row.status or (out.started_at is not None and row.started_at is None)


def _apply_outcome(row: Replica, out: Outcome) -> None:
    row.status = out.status.value
    if out.started_at is not None and row.started_at is None:
        row.started_at = out.started_at
    if out.status.is_finished():
        row.reason = out.reason.value if out.reason is not None else None
        row.exit_code = out.exit_code
        row.finished_at = out.finished_at or utcnow()


def _next_attempt(row: Replica, attempt: int) -> Replica:
    """The row of the next attempt of a replica: same resources and billing weight, not placed yet."""
    fields: dict[str, Any] = {
        "cpu_milli": row.cpu_milli,
        "memory_bytes": row.memory_bytes,
        "gpu": row.gpu,
        "gpu_type": row.gpu_type,
        "gpu_share": row.gpu_share,
        "spec_id": row.spec_id,
        "billing_weight": row.billing_weight,
    }
    return Replica(
        job_id=row.job_id, task=row.task, index=row.index, attempt=attempt, status=RowStatus.PENDING.value, **fields
    )
