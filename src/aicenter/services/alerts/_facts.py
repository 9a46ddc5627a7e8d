"""The platform facts alert rules read besides the samplers' series (core.alerts.FACTS names them).

Each fact is an instant vector computed from the platform's own tables at evaluation time, only when an enabled
rule names it: a center with 10,000 finished jobs pays for ``job.failed`` only through its indexed
``status`` column.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import datetime, timedelta

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.alerts import Element
from aicenter.core.jobs import JobStatus, ReplicaStatus
from aicenter.db.models import Job, Node, Pool, Quota, Replica, Workspace
from aicenter.services.quotas import quota_usage

# Reads the latest value of each named series (the samplers'); the alert controller plugs in
# services.monitoring.latest_values. None: no series (facts only).
SeriesReader = Callable[[AsyncSession, Sequence[str]], Awaitable[list[tuple[str, Element]]]]

# Facts a later area contributes: name -> async function of (session, now) giving its elements. Billing adds
# ``billing.balance_ratio`` here when it lands; until then the built-in balance-low rule evaluates to nothing.
FactSource = Callable[[AsyncSession, datetime], Awaitable[list[Element]]]
EXTRA_FACTS: dict[str, FactSource] = {}

JOB_FAILED_WINDOW_S = 3600  # a failed job's alert shows for an hour, then resolves (the job stays failed)
IDLE_SERIES = "accelerator.utilization"


async def _workspace_names(session: AsyncSession, ids: Iterable[int]) -> dict[int, str]:
    wanted = set(ids)
    if not wanted:
        return {}
    rows = await session.execute(select(Workspace.id, Workspace.name).where(Workspace.id.in_(wanted)))
    return {row[0]: row[1] for row in rows}


async def _nodes(session: AsyncSession, now: datetime, names: set[str], out: dict[str, list[Element]]) -> None:
    for node in (await session.scalars(select(Node))).all():
        labels = {"node": node.name}
        extra = {"node_id": node.id}
        if "node.up" in names:
            out["node.up"].append(Element(labels, 1.0 if node.state == "ready" else 0.0, None, extra))
        if "node.heartbeat_age_seconds" in names and node.last_heartbeat_at is not None:
            age = (now - node.last_heartbeat_at).total_seconds()
            out["node.heartbeat_age_seconds"].append(Element(labels, age, None, extra))


async def _jobs(session: AsyncSession, now: datetime, names: set[str], out: dict[str, list[Element]]) -> None:
    jobs: list[Job] = []
    if "job.failed" in names:
        since = now - timedelta(seconds=JOB_FAILED_WINDOW_S)
        stmt = select(Job).where(Job.status == JobStatus.FAILED.value, Job.finished_at >= since)
        jobs += list((await session.scalars(stmt)).all())
    if "job.pending_seconds" in names:
        waiting = (JobStatus.PENDING.value, JobStatus.QUEUED.value)
        jobs += list((await session.scalars(select(Job).where(Job.status.in_(waiting)))).all())
    spaces = await _workspace_names(session, (j.workspace_id for j in jobs))
    for job in jobs:
        labels = {"job": str(job.id), "job_name": job.name, "workspace": spaces.get(job.workspace_id, "")}
        extra = {"job_id": job.id, "reason": job.failure_reason or "", "message": job.message[:500]}
        if job.status == JobStatus.FAILED.value:
            out["job.failed"].append(Element(labels, 1.0, job.workspace_id, extra))
        else:
            waited = (now - job.submitted_at).total_seconds()
            out["job.pending_seconds"].append(Element(labels, waited, job.workspace_id, extra))


async def _quotas(session: AsyncSession, out: dict[str, list[Element]]) -> None:
    rows = (await session.execute(select(Quota, Pool.name).join(Pool, Pool.id == Quota.pool_id))).all()
    spaces = await _workspace_names(session, (q.workspace_id for q, _ in rows))
    for quota, pool_name in rows:
        used = await quota_usage(session, quota.workspace_id, quota.pool_id)
        for resource, maximum in quota.maximum.items():
            if not maximum:
                continue
            labels = {"workspace": spaces.get(quota.workspace_id, ""), "pool": pool_name, "resource": resource}
            ratio = used.get(resource, 0) / float(maximum)
            out["quota.used_ratio"].append(Element(labels, ratio, quota.workspace_id))


async def _allocated_utilization(
    session: AsyncSession, utilization: list[Element], out: dict[str, list[Element]]
) -> None:
    """``accelerator.utilization`` of the devices running replicas hold, labelled with the job."""
    by_device = {(e.labels.get("node"), e.labels.get("device")): e for e in utilization}
    if not by_device:
        return
    stmt = (
        select(Replica.node_name, Replica.devices, Job.id, Job.workspace_id)
        .join(Job, Job.id == Replica.job_id)
        .where(Replica.status == ReplicaStatus.RUNNING.value)
    )
    for node_name, devices, job_id, workspace_id in (await session.execute(stmt)).all():
        for device in devices or []:
            sample = by_device.get((node_name, str(device)))
            if sample is not None:
                labels = {**sample.labels, "job": str(job_id)}
                out["accelerator.allocated_utilization"].append(
                    Element(labels, sample.value, workspace_id, {"job_id": job_id})
                )


async def gather_facts(
    session: AsyncSession, names: set[str], now: datetime, series: SeriesReader | None
) -> dict[str, list[Element]]:
    """The current elements of every name in ``names``: platform facts from the tables, the rest from series."""
    out: dict[str, list[Element]] = {name: [] for name in names}
    if names & {"node.up", "node.heartbeat_age_seconds"}:
        await _nodes(session, now, names, out)
    if names & {"job.failed", "job.pending_seconds"}:
        await _jobs(session, now, names, out)
    if "quota.used_ratio" in names:
        await _quotas(session, out)
    for name, source in EXTRA_FACTS.items():
        if name in names:
            out[name] = await source(session, now)
    computed = {
        "node.up",
        "node.heartbeat_age_seconds",
        "job.failed",
        "job.pending_seconds",
        "quota.used_ratio",
        "accelerator.allocated_utilization",
        *EXTRA_FACTS,
    }
    wanted = sorted(n for n in names if n not in computed)
    if "accelerator.allocated_utilization" in names:
        wanted.append(IDLE_SERIES)
    if series is not None and wanted:
        read: dict[str, list[Element]] = {n: [] for n in wanted}
        for name, element in await series(session, wanted):
            read.setdefault(name, []).append(element)
        for name in wanted:
            if name in names:
                out[name] = read.get(name, [])
        if "accelerator.allocated_utilization" in names:
            await _allocated_utilization(session, read.get(IDLE_SERIES, []), out)
    return out
