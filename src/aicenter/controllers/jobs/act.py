"""The job reconciler's hands: everything it does outside the database, through the executors and services.

``observe`` asks the executors about live replicas and prepares scheduled jobs (directories, ports);
``act`` carries out a decision's actions (launch, stop, save the output model). Both return
``Observations`` for ``decide`` and never write a job row: the reconciler applies what ``decide`` makes of them.
Every executor call runs concurrently across replicas and jobs, and none inside a transaction.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime

from aicenter.config import Settings
from aicenter.controllers import engine_nodes
from aicenter.core.clock import utcnow
from aicenter.core.errors import AicenterError
from aicenter.core.jobs import FailureReason, JobKind, JobStatus, ReplicaStatus
from aicenter.core.jobs.reconcile import Actions, Intent, Launch, Observations, Outcome
from aicenter.db.engine import Database
from aicenter.executors.base import NODE_LOST_REASON, Executor, LaunchFailed, ReplicaHandle, ReplicaState
from aicenter.executors.base import ReplicaStatus as Observed
from aicenter.runtime.env import ports_needed
from aicenter.services import catalog, notebooks
from aicenter.services.jobs import (
    NOTEBOOK_PORTS,
    SERVICE_PORTS,
    ImageNotReady,
    JobState,
    final_metrics,
    job_dirs,
    load_content,
    materialize,
    python_bin,
    replica_plans,
)
from aicenter.storage import BlobStore

log = logging.getLogger(__name__)

__all__ = ["Hands", "outcome"]

LAUNCH_FAILURE_PREFIXES = ("launch failed", "launcher error")


def outcome(obs: Observed, *, now: datetime, stopped_for: FailureReason = FailureReason.STOPPED) -> Outcome:
    """Map an executor's observation to the replica's status (docs/dev/jobs-contract.md, the reasons table).

    Args:
        obs: What the executor reports.
        now: Used for times the executor did not record (a lost replica's end, a start seen only now).
        stopped_for: The reason of a replica that ended because it was stopped through ``Executor.stop``.
    """
    if obs.state is ReplicaState.RUNNING:
        return Outcome(ReplicaStatus.RUNNING, started_at=obs.started_at or now)
    if obs.state is ReplicaState.LOST:
        return Outcome(ReplicaStatus.LOST, FailureReason.NODE_LOST, None, obs.started_at, now)
    end = obs.finished_at or now
    reason = obs.reason or ""
    if reason == "stopped":
        return Outcome(ReplicaStatus.STOPPED, stopped_for, obs.exit_code, obs.started_at, end)
    if reason == "oom":
        return Outcome(ReplicaStatus.FAILED, FailureReason.OOM, obs.exit_code, obs.started_at, end)
    if obs.exit_code is None and reason.startswith(LAUNCH_FAILURE_PREFIXES):
        return Outcome(ReplicaStatus.FAILED, FailureReason.LAUNCH_FAILED, None, obs.started_at, end)
    if obs.exit_code == 0:
        return Outcome(ReplicaStatus.SUCCEEDED, None, 0, obs.started_at, end)
    return Outcome(ReplicaStatus.FAILED, FailureReason.ERROR, obs.exit_code, obs.started_at, end)


def _handle(state: JobState, replica_id: int) -> ReplicaHandle:
    data = state.replicas[replica_id].handle
    assert data is not None, "only replicas with an intent are launched, observed or stopped"
    return ReplicaHandle.from_dict(data)


class Hands:
    """Executors and services, as the reconciler uses them.

    Args:
        db: The database (reads for launches; the output model's save).
        store: The blob store (job directories are materialized from it; output models go into it).
        settings: ``jobs_path``, ``api_url`` and ``stop_grace_s`` are read.
        executors: Executors by name; a node's ``executor`` column names the one that runs it.
    """

    def __init__(self, db: Database, store: BlobStore, settings: Settings, executors: Mapping[str, Executor]) -> None:
        self.db = db
        self.store = store
        self.settings = settings
        self.executors = executors
        self._key: str | None = None

    def _secret_key(self) -> str:
        """The server's signing key, which derives notebook tokens (read once: it may live in a file)."""
        if self._key is None:
            self._key = self.settings.resolve_secret_key()
        return self._key

    def _executor(self, name: str) -> Executor:
        executor = self.executors.get(name)
        if executor is None:
            raise LaunchFailed(f"the replica is run by executor {name!r}, which this server does not have")
        return executor

    # -- observe ---------------------------------------------------------------------------------------------

    async def observe(self, states: Mapping[int, JobState]) -> dict[int, Observations]:
        """What each job's executors report of its launched, live replicas; scheduled jobs are prepared."""
        found = await asyncio.gather(*(self._observe(s) for s in states.values()))
        return dict(zip(states, found, strict=True))

    async def _observe(self, state: JobState) -> Observations:
        job = state.snapshot
        if job.status is JobStatus.SCHEDULED and job.stop is None:
            return await self._prepare(state)
        now = utcnow()
        todo = [r.id for r in job.replicas if r.launched and r.live]

        async def one(replica_id: int) -> tuple[int, Outcome] | None:
            handle = _handle(state, replica_id)
            executor = self.executors.get(handle.executor)
            if executor is None:  # another server replica may have it; this one cannot tell
                log.warning("job %s: no %r executor here to observe its replica", job.id, handle.executor)
                return None
            observed = await executor.status(handle)
            if observed.state is ReplicaState.LOST and observed.reason == NODE_LOST_REASON:
                lost_on.add(handle.executor)
            return replica_id, outcome(observed, now=now)

        lost_on: set[str] = set()
        results = await asyncio.gather(*(one(i) for i in todo))
        if lost_on:
            await self.nodes_lost(lost_on)
        return Observations(outcomes=dict(r for r in results if r is not None))

    async def nodes_lost(self, names: set[str]) -> None:
        """Read again the nodes of the engines that reported a replica's node lost (``NODE_LOST_REASON``), before
        the job's restart is decided: the scheduler must not place the next attempt on the dead node."""
        for name in sorted(names):
            executor = self.executors.get(name)
            if executor is None or name == "local":
                continue
            try:
                await engine_nodes.sync_engine(self.db, name, executor)
            except Exception as exc:  # the engine's own errors: its controller retries on its own cadence
                log.warning("executor %s: cannot read its nodes after a node was lost: %s", name, exc)

    async def _prepare(self, state: JobState) -> Observations:
        """The job's directories (code and data from the store) and each replica's ports and run dir."""
        info = state.info
        dirs = job_dirs(self.settings.jobs_path, info.id)
        try:
            async with self.db.read() as session:
                content = await load_content(
                    session, info.algorithm_version_id, list(info.dataset_version_ids), info.model_version_id
                )
                await python_bin(session, self.store, info.spec.image, info.image_version_id)  # built and ready?
            notebook = info.spec.kind is JobKind.NOTEBOOK
            await materialize(self.store, dirs, content, writable_code=notebook)
            if notebook:
                await notebooks.prepare_state(self.db, dirs.notebook, info.user_id)
            wanted = ports_needed(info.spec.framework.value) + (NOTEBOOK_PORTS if notebook else 0)
            wanted += SERVICE_PORTS if info.spec.kind is JobKind.SERVICE else 0
            intents: dict[int, Intent] = {}
            for r in state.replicas.values():
                node = info.nodes.get(r.node)
                name = node.executor if node is not None else "local"
                ports = await self._executor(name).allocate_ports(r.node, wanted)
                handle = ReplicaHandle(
                    executor=name,
                    node=r.node,
                    run_dir=str(dirs.run_dir(r.attempt, r.task, r.index)),
                    pid=0,  # intent only: not launched yet
                    start_time=0.0,
                )
                intents[r.id] = Intent(tuple(ports), handle.to_dict())
        except (ImageNotReady, LaunchFailed, OSError, ValueError, KeyError) as exc:
            log.warning("job %s: could not prepare it: %s", info.id, exc)
            return Observations(prepare_error=str(exc) or type(exc).__name__)
        return Observations(intents=intents)

    # -- act ---------------------------------------------------------------------------------------------------

    async def act(self, state: JobState, actions: Actions, api_token: str) -> Observations:
        """Carry out ``actions`` on one job; what they found is the next round's observations."""
        launches: dict[int, Launch] = {}
        outcomes: dict[int, Outcome] = {}
        saved: int | None = None
        saved_as = save_error = ""
        if actions.launch:
            launches = await self._launch(state, actions.launch, api_token)
        if actions.stop:
            outcomes = await self._stop(state, actions.stop, actions.stop_reason)
        if actions.save_output:
            saved, saved_as, save_error = await self._save_output(state)
        return Observations(
            outcomes=outcomes, launches=launches, saved_version_id=saved, saved_as=saved_as, save_error=save_error
        )

    async def _launch(self, state: JobState, ids: Sequence[int], api_token: str) -> dict[int, Launch]:
        """Launch (or adopt) the replicas; a launch that fails is a result, not an exception."""
        info = state.info
        try:
            async with self.db.read() as session:
                python = await python_bin(session, self.store, info.spec.image, info.image_version_id)
            plans = replica_plans(
                state,
                ids,
                python=python,
                jobs_path=self.settings.jobs_path,
                api_url=self.settings.api_url,
                token=api_token,
                secret_key=self._secret_key(),
            )
        except (ImageNotReady, ValueError, KeyError) as exc:
            return {i: Launch(None, f"could not plan the replica: {exc}") for i in ids}

        async def one(replica_id: int) -> tuple[int, Launch]:
            handle = _handle(state, replica_id)
            try:
                launched = await self._executor(handle.executor).launch(plans[replica_id])
            except LaunchFailed as exc:
                log.warning("job %s: replica %s could not be launched: %s", info.id, replica_id, exc)
                return replica_id, Launch(None, str(exc))
            return replica_id, Launch(launched.to_dict())

        return dict(await asyncio.gather(*(one(i) for i in ids)))

    async def _stop(self, state: JobState, ids: Sequence[int], reason: FailureReason) -> dict[int, Outcome]:
        """Stop the replicas (SIGTERM, ``stop_grace_s``, SIGKILL), concurrently; their final outcomes."""
        grace = self.settings.stop_grace_s

        async def one(replica_id: int) -> tuple[int, Outcome] | None:
            handle = _handle(state, replica_id)
            executor = self.executors.get(handle.executor)
            if executor is None:
                log.warning("job %s: no %r executor here to stop its replica", state.info.id, handle.executor)
                return None
            await executor.stop(handle, grace)
            return replica_id, outcome(await executor.status(handle), now=utcnow(), stopped_for=reason)

        results = await asyncio.gather(*(one(i) for i in ids))
        return dict(r for r in results if r is not None)

    async def _save_output(self, state: JobState) -> tuple[int | None, str, str]:
        """Save the output directory as the job's output model version: (its id, its reference), or the reason it
        was not saved."""
        info = state.info
        assert info.spec.output_model is not None
        ranks = [(task.name, index) for task, index in info.spec.ranks()]
        metrics = await asyncio.to_thread(final_metrics, self.settings.jobs_path, info.id, ranks)
        try:
            version = await catalog.save_job_output(
                self.db,
                self.store,
                job_id=info.id,
                job_name=info.name,
                user_id=info.user_id,
                workspace_id=info.workspace_id,
                model_name=info.spec.output_model,
                directory=job_dirs(self.settings.jobs_path, info.id).output,
                algorithm_version_id=info.algorithm_version_id,
                dataset_version_ids=info.dataset_version_ids,
                metrics=metrics,
            )
        except AicenterError as exc:
            log.warning("job %s: its output model was not saved: %s", info.id, exc.message)
            return None, "", exc.message
        async with self.db.read() as session:
            return version, await catalog.version_reference(session, version), ""
