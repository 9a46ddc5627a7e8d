"""The job reconciler's reads and writes: load leased jobs as snapshots, apply decided steps in one guarded
transaction, and change a replica's status through one function.

The reconciler (``aicenter.controllers.jobs``) decides; this module is the only place its decisions touch rows.
``apply_steps`` writes a whole batch of jobs in ONE transaction: on SQLite every write transaction holds the one
write lock, and 200 concurrent launches written one transaction each held it ~81 ms per intent and ~14 ms per
handles write, ~19 s queued behind each other; one transaction per batch with grouped status updates
(``transition_many``) is what keeps a burst of submissions starting within seconds.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import ColumnElement, and_, or_, select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.errors import InvalidTransition
from aicenter.core.jobs import (
    TRANSITIONS,
    FailureReason,
    JobSpec,
    JobStatus,
    ReplicaStatus,
    parse_job_spec,
    stop_reason,
)
from aicenter.core.jobs.reconcile import JobChange, JobSnapshot, ReplicaChange, ReplicaRow, Steps
from aicenter.db.leases import claim_rows, hold_rows, is_free, release_held
from aicenter.db.models import Job, Node, Replica, User
from aicenter.events import notify_after_commit
from aicenter.executors.base import ReplicaPlan
from aicenter.services.context import Actor
from aicenter.services.jobs._lifecycle import transition, transition_many
from aicenter.services.jobs._notebook_plan import notebook_token
from aicenter.services.jobs._replicas import change_replica
from aicenter.services.jobs._runtime import PlannedReplica, build_plans, job_dirs, replica_host
from aicenter.services.jobs._service_plan import serve_token
from aicenter.services.jobs._tokens import issue_job_token

log = logging.getLogger(__name__)

__all__ = [
    "Applied",
    "JobInfo",
    "JobState",
    "NodeRef",
    "ReplicaInfo",
    "Work",
    "any_job_to_reconcile",
    "apply_steps",
    "claim_jobs",
    "load_jobs",
    "replica_plans",
]

RECONCILER = Actor.system("reconciler")
"""The actor of the reconciler's job events."""


@dataclass(frozen=True, slots=True)
class NodeRef:
    """What a launch needs of a node: how peers reach it and which executor runs it."""

    address: str
    executor: str


@dataclass(frozen=True, slots=True)
class JobInfo:
    """The job's fields that do not change while it runs: what plans and output saving need."""

    id: int
    name: str
    user_id: int | None
    workspace_id: int
    spec: JobSpec
    image_version_id: int | None
    algorithm_version_id: int | None
    dataset_version_ids: tuple[int, ...]
    nodes: Mapping[str, NodeRef] = field(default_factory=dict)
    model_version_id: int | None = None


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica row's fields a plan is built from."""

    id: int
    task: str
    index: int
    attempt: int
    node: str
    ports: tuple[int, ...]
    devices: tuple[int, ...]
    cpus: tuple[int, ...] | None
    cpu_milli: int
    memory_bytes: int
    handle: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class JobState:
    """A leased job: the snapshot ``decide`` reads, and the rest of what acting on it needs."""

    snapshot: JobSnapshot
    info: JobInfo
    replicas: Mapping[int, ReplicaInfo]


@dataclass(frozen=True, slots=True)
class Work:
    """One job's share of an ``apply_steps`` call."""

    state: JobState
    lease_token: str
    steps: Steps
    release: bool = False


@dataclass(frozen=True, slots=True)
class Applied:
    """A job after ``apply_steps``: its state as written, the API token issued for its launches, and whether
    the decision was applied (``False``: the job changed meanwhile; only the facts were written)."""

    state: JobState
    api_token: str = ""
    decided: bool = True


# -- claiming ---------------------------------------------------------------------------------------------------

_WORKING = tuple(
    s.value
    for s in (JobStatus.SCHEDULED, JobStatus.STARTING, JobStatus.RUNNING, JobStatus.RESTARTING, JobStatus.PREEMPTED)
)
_NOT_LAUNCHED = (JobStatus.PENDING.value, JobStatus.QUEUED.value)


def _needing_work(scheduled_only: bool) -> ColumnElement[bool]:
    """The jobs a reconciler leases, through the status index: those with replicas to launch, watch or stop, and
    pending or queued ones with a stop request; or only the scheduled ones (their launch is what users wait for)."""
    if scheduled_only:
        return Job.status == JobStatus.SCHEDULED.value
    return or_(
        Job.status.in_(_WORKING),
        and_(Job.status.in_(_NOT_LAUNCHED), Job.stop_requested_at.is_not(None)),
    )


async def any_job_to_reconcile(session: AsyncSession, *, scheduled_only: bool = False) -> bool:
    """Whether a free job needs the reconciler: a read, so that a tick with nothing to do takes no write lock."""
    found = await session.scalar(select(Job.id).where(is_free(Job, utcnow()), _needing_work(scheduled_only)).limit(1))
    return found is not None


async def claim_jobs(
    session: AsyncSession, *, owner: str, ttl_s: float, after: int, limit: int, scheduled_only: bool = False
) -> dict[int, tuple[str, bool]]:
    """Lease up to ``limit`` free jobs that need the reconciler, after id ``after``, in id order (``SKIP
    LOCKED`` on PostgreSQL). Returns id -> (lease token, whether the job is scheduled)."""
    rows = await claim_rows(
        session,
        Job,
        Job.id > after,
        _needing_work(scheduled_only),
        owner=owner,
        ttl_s=ttl_s,
        limit=limit,
        order_by=Job.id,
    )
    return {row.id: (row.lock_token or "", row.status == JobStatus.SCHEDULED.value) for row in rows}


# -- reading ----------------------------------------------------------------------------------------------------


def _stamp(job: Job) -> tuple[Any, ...]:
    return (job.status, job.stop_requested_at, job.stop_requested_by, job.failure_reason)


def _launched(handle: Mapping[str, Any] | None) -> bool:
    # An intent-only handle has pid 0: the launch was decided, not (known to be) done.
    return bool(handle) and int((handle or {}).get("pid") or 0) > 0


def _row(r: Replica) -> ReplicaRow:
    return ReplicaRow(
        id=r.id,
        task=r.task,
        index=r.index,
        status=ReplicaStatus(r.status),
        node=r.node_name or "",
        intent=r.handle is not None,
        launched=_launched(r.handle),
        reason=FailureReason(r.reason) if r.reason else None,
        exit_code=r.exit_code,
        started_at=r.started_at,
    )


def _info(r: Replica) -> ReplicaInfo:
    return ReplicaInfo(
        id=r.id,
        task=r.task,
        index=r.index,
        attempt=r.attempt,
        node=r.node_name or "",
        ports=tuple(int(p) for p in r.ports or []),
        devices=tuple(int(d) for d in r.devices or []),
        cpus=None if r.cpus is None else tuple(int(c) for c in r.cpus),
        cpu_milli=int(r.cpu_milli),
        memory_bytes=int(r.memory_bytes),
        handle=dict(r.handle) if r.handle else None,
    )


def _state(job: Job, rows: Sequence[Replica], info: JobInfo) -> JobState:
    ordered = sorted(rows, key=lambda r: (r.task, r.index))
    snapshot = JobSnapshot(
        id=job.id,
        status=JobStatus(job.status),
        stop=stop_reason(job.stop_requested_at is not None, job.stop_requested_by, job.failure_reason),
        failure_reason=FailureReason(job.failure_reason) if job.failure_reason else None,
        restart_count=job.restart_count,
        counted_restarts=job.counted_restarts,
        retry=info.spec.retry,
        output_model=info.spec.output_model,
        output_model_version_id=job.output_model_version_id,
        replicas=tuple(_row(r) for r in ordered),
        stamp=_stamp(job),
    )
    return JobState(snapshot, info, {r.id: _info(r) for r in ordered})


async def _current_replicas(session: AsyncSession, jobs: Sequence[Job]) -> dict[int, list[Replica]]:
    """The current attempt's replica rows of each job, in one query."""
    attempt = {j.id: j.restart_count for j in jobs}
    out: dict[int, list[Replica]] = {i: [] for i in attempt}
    if not attempt:
        return out
    for r in (await session.scalars(select(Replica).where(Replica.job_id.in_(attempt)))).all():
        if r.attempt == attempt[r.job_id]:
            out[r.job_id].append(r)
    return out


async def load_jobs(session: AsyncSession, tokens: Mapping[int, str]) -> dict[int, JobState]:
    """The jobs of ``tokens`` (id -> lease token) that are still leased with that token, as ``JobState``s.

    Three queries for any number of jobs: the jobs, their current replicas, the replicas' nodes. A job whose
    spec no longer parses is left out (logged): nothing could be decided for it.
    """
    jobs = [
        j for j in (await session.scalars(select(Job).where(Job.id.in_(tokens)))).all() if j.lock_token == tokens[j.id]
    ]
    rows = await _current_replicas(session, jobs)
    names = {r.node_name for rs in rows.values() for r in rs if r.node_name}
    nodes = {
        n.name: NodeRef(n.address or "", n.executor)
        for n in (await session.scalars(select(Node).where(Node.name.in_(names)))).all()
    }
    out: dict[int, JobState] = {}
    for job in jobs:
        try:
            spec = parse_job_spec(job.spec)
        except ValueError:
            log.exception("job %s: its stored spec does not parse; it is left as it is", job.id)
            continue
        info = JobInfo(
            id=job.id,
            name=job.name,
            user_id=job.user_id,
            workspace_id=job.workspace_id,
            spec=spec,
            image_version_id=job.image_version_id,
            algorithm_version_id=job.algorithm_version_id,
            dataset_version_ids=tuple(int(v) for v in job.dataset_version_ids or []),
            nodes={r.node_name: nodes[r.node_name] for r in rows[job.id] if r.node_name in nodes},
            model_version_id=job.model_version_id,
        )
        out[job.id] = _state(job, rows[job.id], info)
    return out


# -- writing ----------------------------------------------------------------------------------------------------


def _change_rows(job: Job, rows: Mapping[int, Replica], changes: Sequence[ReplicaChange], now: datetime) -> None:
    for change in changes:
        row = rows.get(change.id)
        if row is None:
            continue
        try:
            change_replica(row, change, now=now)
        except InvalidTransition as exc:  # the row moved on meanwhile (a request_stop); the next pass sees it
            log.warning("job %s: replica %s/%s not changed: %s", job.id, row.task, row.index, exc.message)


def next_attempt_row(row: Replica, attempt: int) -> Replica:
    """The row of the next attempt of a replica: same resources, billing weight and price, not placed yet."""
    return Replica(
        job_id=row.job_id,
        task=row.task,
        index=row.index,
        attempt=attempt,
        status=ReplicaStatus.PENDING.value,
        cpu_milli=row.cpu_milli,
        memory_bytes=row.memory_bytes,
        gpu=row.gpu,
        gpu_type=row.gpu_type,
        gpu_share=row.gpu_share,
        spec_id=row.spec_id,
        billing_weight=row.billing_weight,
        price_per_hour=row.price_per_hour,
    )


def _allowed(job: Job, change: JobChange | None) -> bool:
    if change is None or change.to.value == job.status:
        return True
    if change.to in TRANSITIONS[JobStatus(job.status)]:
        return True
    log.error("job %s: the reconciler decided %s -> %s, which the table forbids", job.id, job.status, change.to)
    return False


def _grouped(change: JobChange) -> bool:
    """Whether the change can share one ``transition_many`` statement with others like it."""
    return change.failure_reason is None and change.exit_code is None and not change.to.is_finished()


async def apply_steps(session: AsyncSession, work: Sequence[Work], *, lease_ttl_s: float) -> dict[int, Applied]:
    """Write the steps decided for a batch of leased jobs, in the caller's write transaction.

    For every job whose lease is still ours (the others are left out of the result: their work is dropped),
    the facts are written; the decision (status change, intents, next attempt, ...) only when the job's stamp
    is the snapshot's. A job that changed meanwhile (a person's stop) gets its lease back undecided and is
    decided again by the next pass, never overwritten. Jobs with ``release`` give their lease back in the same
    transaction; the others' leases are renewed.

    Returns:
        Job id -> the job as written (for the next round of the pass) and the API token issued for it.
    """
    by_id = {w.state.info.id: w for w in work}
    held = await hold_rows(session, Job, {i: w.lease_token for i, w in by_id.items()}, ttl_s=lease_ttl_s)
    rows = await _current_replicas(session, held)
    now = utcnow()
    decided: dict[int, bool] = {}
    grouped: dict[tuple[str, JobStatus, str, str], list[Job]] = {}
    for job in held:
        w = by_id[job.id]
        current = {r.id: r for r in rows[job.id]}
        _change_rows(job, current, w.steps.facts, now)
        ok = _stamp(job) == w.state.snapshot.stamp and _allowed(job, w.steps.job)
        decided[job.id] = ok
        if not ok:  # changed meanwhile: given back below, decided again by the next pass (woken at commit)
            notify_after_commit(session)
            continue
        steps = w.steps
        _change_rows(job, current, steps.replicas, now)
        if steps.output_model_version_id is not None:
            job.output_model_version_id = steps.output_model_version_id
        if steps.undo_placement:
            for r in current.values():
                r.node_name, r.node_id, r.devices = None, None, []
        if steps.undo_placement or steps.clear_stop or steps.next_attempt:
            job.stop_requested_at = job.stop_requested_by = job.failure_reason = None
        if steps.next_attempt:
            job.exit_code = None
            job.restart_count += 1
            job.counted_restarts += 1 if steps.counted else 0
            ordered = sorted(current.values(), key=lambda r: (r.task, r.index))
            fresh = [next_attempt_row(r, job.restart_count) for r in ordered]
            session.add_all(fresh)
            rows[job.id] = fresh
        change = steps.job
        if change is not None and change.to.value != job.status:
            if change.to not in (JobStatus.STARTING, JobStatus.RUNNING):
                notify_after_commit(session)  # the scheduler (queue, freed resources) and the reconciler act
            if _grouped(change):
                grouped.setdefault((job.status, change.to, change.reason, change.message), []).append(job)
            else:
                await transition(
                    session,
                    job,
                    change.to,
                    actor=RECONCILER,
                    reason=change.reason,
                    message=change.message,
                    failure_reason=change.failure_reason,
                    exit_code=change.exit_code,
                )
    for (_from, to, reason, message), jobs in grouped.items():
        await transition_many(session, jobs, to, actor=RECONCILER, reason=reason, message=message)
    token_users = {j.user_id for j in held if decided[j.id] and by_id[j.id].steps.issue_token and j.user_id}
    if token_users:  # one read; issue_job_token's session.get then finds them in the identity map
        await session.scalars(select(User).where(User.id.in_(token_users)))
    tokens: dict[int, str] = {}
    for job in held:
        w = by_id[job.id]
        if decided[job.id] and w.steps.issue_token:
            # A new API token per launch, in the transaction that holds the lease (see _tokens.py).
            tokens[job.id] = await issue_job_token(session, job)
    release_held(j for j in held if by_id[j.id].release or not decided[j.id])
    await session.flush()  # the ids of new attempt rows
    return {
        j.id: Applied(_state(j, rows[j.id], by_id[j.id].state.info), tokens.get(j.id, ""), decided[j.id]) for j in held
    }


# -- plans ------------------------------------------------------------------------------------------------------


def publish_host(node: NodeRef | None) -> str:
    """The address a replica's published ports listen on: loopback on the server's own host (the ``local``
    executor: nothing beyond this host needs them), else the node's address, which the server reaches."""
    if node is None or node.executor == "local" or not node.address:
        return "127.0.0.1"
    return node.address


def replica_plans(
    state: JobState,
    replica_ids: Sequence[int],
    *,
    python: Path,
    jobs_path: Path,
    api_url: str,
    token: str,
    secret_key: str = "",
) -> dict[int, ReplicaPlan]:
    """The plans of the given replicas (which must have their intent recorded), from their rows.

    Every replica of the attempt takes part in the layout (ranks, the master's address), so a relaunch of one
    replica gets the same plan as the first launch: that is what lets it adopt a running process.

    ``secret_key`` derives a notebook's JupyterLab token (``notebook_token``) and a service replica's serve token
    (``serve_token``).
    """
    info = state.info
    replicas = sorted(state.replicas.values(), key=lambda r: (r.task, r.index))
    node_names = [r.node for r in replicas]
    planned = []
    for r in replicas:
        node = info.nodes.get(r.node)
        run_dir = (r.handle or {}).get("run_dir") or job_dirs(jobs_path, info.id).run_dir(r.attempt, r.task, r.index)
        planned.append(
            PlannedReplica(
                task=r.task,
                index=r.index,
                attempt=r.attempt,
                node=r.node,
                host=replica_host(node.address if node else "", r.node, node_names),
                ports=r.ports,
                devices=r.devices,
                cpus=r.cpus,
                cpu_milli=r.cpu_milli,
                memory_bytes=r.memory_bytes,
                run_dir=Path(run_dir),
            )
        )
    plans = build_plans(
        info.id,
        info.spec,
        planned,
        job_dirs(jobs_path, info.id),
        python=python,
        api_url=api_url,
        token=token,
        workspace_id=info.workspace_id,
        notebook_token=notebook_token(secret_key, info.id, replicas[0].attempt) if replicas and secret_key else "",
        serve_token=serve_token(secret_key, info.id, replicas[0].attempt) if replicas and secret_key else "",
        publish_host=publish_host(info.nodes.get(replicas[0].node) if replicas else None),
    )
    by_key = {(p.task, p.replica): p for p in plans}
    wanted = set(replica_ids)
    return {r.id: by_key[(r.task, r.index)] for r in replicas if r.id in wanted}
