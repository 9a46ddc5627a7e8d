"""The idle culler's reads and writes (``controllers.notebook_culler`` decides with ``core.jobs.notebooks``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import FailureReason, JobKind, JobStatus
from aicenter.core.jobs.notebooks import IdleDecision, IdleVerdict
from aicenter.db.models import Job, Notebook, Replica, Workspace
from aicenter.services import alerts, audit, jobs
from aicenter.services.context import Actor
from aicenter.services.notebooks._connect import Endpoint, endpoints

__all__ = ["RunningNotebook", "apply_idle", "load_running", "record_proxy_activity"]


@dataclass(frozen=True, slots=True)
class RunningNotebook:
    """A running notebook as the culler sees it.

    Attributes:
        job_id: The notebook.
        workspace_id: Its workspace.
        name: Its name (for messages).
        running_since: When its current attempt started running.
        timeout_s: The idle timeout in force (0: never culled).
        proxy_activity: The last request the proxy passed (flushed by every server replica).
        warned_at: When it was last warned.
        endpoint: Where JupyterLab listens (None: not reachable now).
        node_id: The node its replica runs on; devices: the accelerators it was given there (GPU activity).
        activity_file: The SSH agent's activity file (its modification time is the last SSH input).
    """

    job_id: int
    workspace_id: int
    name: str
    running_since: datetime
    timeout_s: int
    proxy_activity: datetime | None
    warned_at: datetime | None
    endpoint: Endpoint | None
    node_id: int | None = None
    devices: tuple[int, ...] = ()
    activity_file: Path | None = None


async def load_running(
    session: AsyncSession, secret_key: str, default_timeout_s: int, jobs_path: Path
) -> list[RunningNotebook]:
    """Every running notebook with its timeout, endpoint, node and devices, in three queries."""
    rows = (
        await session.execute(
            select(Job, Notebook, Workspace.notebook_idle_timeout_s)
            .join(Notebook, Notebook.job_id == Job.id)
            .join(Workspace, Workspace.id == Job.workspace_id)
            .where(Job.kind == JobKind.NOTEBOOK.value, Job.status == JobStatus.RUNNING.value)
        )
    ).all()
    found = list(rows)
    ids = [job.id for job, _, _ in found]
    reach = await endpoints(session, ids, secret_key)
    placed = {
        job_id: (node_id, tuple(int(d) for d in devices or ()))
        for job_id, node_id, devices in (
            await session.execute(
                select(Replica.job_id, Replica.node_id, Replica.devices)
                .join(Job, (Job.id == Replica.job_id) & (Replica.attempt == Job.restart_count))
                .where(Replica.job_id.in_(ids))
            )
        ).all()
    }
    out = []
    for job, notebook, workspace_timeout in found:
        timeout = notebook.idle_timeout_s
        if timeout is None:
            timeout = workspace_timeout if workspace_timeout is not None else default_timeout_s
        out.append(
            RunningNotebook(
                job_id=job.id,
                workspace_id=job.workspace_id,
                name=job.name,
                running_since=job.started_at or job.updated_at,
                timeout_s=timeout,
                proxy_activity=notebook.proxy_activity_at,
                warned_at=notebook.warned_at,
                endpoint=reach.get(job.id),
                node_id=placed.get(job.id, (None, ()))[0],
                devices=placed.get(job.id, (None, ()))[1],
                activity_file=jobs.job_dirs(jobs_path, job.id).notebook / jobs.ACTIVITY_FILE,
            )
        )
    return out


async def record_proxy_activity(session: AsyncSession, latest: Mapping[int, datetime]) -> None:
    """What a server replica's proxy saw since its last flush: one statement per notebook, only moving forward."""
    for job_id, at in latest.items():
        await session.execute(
            update(Notebook)
            .where(
                Notebook.job_id == job_id,
                (Notebook.proxy_activity_at.is_(None)) | (Notebook.proxy_activity_at < at),
            )
            .values(proxy_activity_at=at)
        )


def _minutes(seconds: float) -> str:
    return f"{max(1, round(seconds / 60))} min"


async def apply_idle(
    session: AsyncSession, decisions: Sequence[tuple[RunningNotebook, IdleDecision]], *, now: datetime | None = None
) -> list[int]:
    """Record the culler's decisions: idle state on every row; a warning event; a cull as a stop by the platform
    (audited, with an event). Returns the culled notebooks. A notebook that stopped meanwhile is left alone."""
    now = now or utcnow()
    culled = []
    for notebook, decision in decisions:
        values: dict[str, object] = {"idle_since": decision.idle_since, "cull_at": decision.cull_at}
        if decision.verdict is IdleVerdict.WARN:
            values["warned_at"] = now
            assert decision.cull_at is not None
            alerts.record_event(
                session,
                "notebook.idle_warning",
                f'notebook "{notebook.name}" has been idle since {decision.idle_since:%H:%M} UTC and will be stopped '
                f"at {decision.cull_at:%H:%M} UTC (in {_minutes((decision.cull_at - now).total_seconds())}) "
                "unless it is used",
                job_id=notebook.job_id,
                workspace_id=notebook.workspace_id,
                details={"idle_since": decision.idle_since.isoformat(), "cull_at": decision.cull_at.isoformat()},
            )
        await session.execute(update(Notebook).where(Notebook.job_id == notebook.job_id).values(**values))
        if decision.verdict is not IdleVerdict.CULL:
            continue
        job = await session.get(Job, notebook.job_id, with_for_update=True)
        if job is None or job.status != JobStatus.RUNNING.value or job.stop_requested_at is not None:
            continue
        actor = Actor.system("idle-culler")
        idle = (now - decision.idle_since).total_seconds()
        await jobs.request_stop(session, job, actor, FailureReason.STOPPED)
        await session.execute(update(Notebook).where(Notebook.job_id == job.id).values(culled_at=now))
        audit.record(
            session,
            actor,
            "notebook.cull",
            "job",
            job.id,
            workspace_id=job.workspace_id,
            details={"idle_since": decision.idle_since.isoformat(), "timeout_s": notebook.timeout_s},
        )
        alerts.record_event(
            session,
            "notebook.culled",
            f'notebook "{notebook.name}" was stopped after {_minutes(idle)} idle; its work dir is kept, start it again',
            job_id=job.id,
            workspace_id=job.workspace_id,
        )
        culled.append(job.id)
    return culled
