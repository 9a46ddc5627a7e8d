"""The notebook idle culler: stops notebooks nobody used for their idle timeout, after warning their owners.

One server replica at a time holds the ``notebook-culler`` lease; each tick it

1. **loads** every running notebook with its timeout and endpoint (``services.notebooks.load_running``);
2. **observes** what a person did, without counting as activity itself:
   - JupyterLab's kernels and whether one is busy, read with ``?no_track_activity=1`` (JupyterLab counts a
     listing of its kernels as activity otherwise; ``/api/status`` would not say whether a kernel is busy);
   - the SSH agent's activity file (its modification time is the last input of an SSH session);
   - the platform proxy's last request from a browser (pages, writes, terminal and kernel messages; not the
     background polls of an open tab), flushed by every server replica;
   - the utilization of the notebook's GPUs from the sampler's newest points, where NVML reports them;
3. **decides** with ``core.jobs.notebooks.decide_idle`` (pure): keep, warn, or cull;
4. **applies** the decisions in one transaction: the idle state the console shows, a warning event, and a cull
   as a stop by the platform (audited; the work dir stays; the owner starts it again).

A notebook whose JupyterLab does not answer is never culled on that tick: unknown is not idle.
"""

from __future__ import annotations

import asyncio
import logging
import os
from datetime import UTC, datetime

import httpx
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.config import Settings
from aicenter.context import AppContext
from aicenter.controllers.base import Controller, replica_name
from aicenter.core.clock import utcnow
from aicenter.core.jobs.notebooks import IdleDecision, NotebookActivity, decide_idle
from aicenter.db import leases
from aicenter.db.engine import Database
from aicenter.services import jobs, monitoring, notebooks

__all__ = ["NotebookCuller", "build", "parse_jupyter_time"]

log = logging.getLogger(__name__)

LEASE_NAME = "notebook-culler"
STATUS_TIMEOUT_S = 5.0


def parse_jupyter_time(text: str | None) -> datetime | None:
    """JupyterLab's ISO-8601 times (``2026-12-05T12:14:02.536408Z``) as aware datetimes."""
    if not text:
        return None
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def _mtime(path: str | os.PathLike[str] | None) -> datetime | None:
    """When the SSH agent last wrote its activity file; None when it never did (the file is made empty)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return datetime.fromtimestamp(st.st_mtime, UTC) if st.st_size > 0 else None


class NotebookCuller(Controller):
    """Culls idle notebooks every ``notebook_cull_interval_s`` on one replica."""

    name = "notebook-culler"

    def __init__(self, db: Database, settings: Settings, secret_key: str, *, owner: str | None = None) -> None:
        super().__init__()
        self.db = db
        self.settings = settings
        self.secret_key = secret_key
        self.interval_s = settings.notebook_cull_interval_s
        self.owner = owner or replica_name()
        self.last: list[tuple[notebooks.RunningNotebook, IdleDecision]] = []
        self._client: httpx.AsyncClient | None = None

    async def tick(self) -> None:
        lease = await leases.acquire(self.db, LEASE_NAME, self.owner, ttl_s=self.interval_s * 3)
        if lease is None:
            return
        await self.run_once()

    async def run_once(self, now: datetime | None = None) -> list[int]:
        """One pass over every running notebook; the ids culled."""
        async with self.db.read() as session:
            running = await notebooks.load_running(
                session, self.secret_key, self.settings.notebook_idle_timeout_s, self.settings.jobs_path
            )
            gpu = await self._gpu_activity(session, running)
        if not running:
            self.last = []
            return []
        observed = await asyncio.gather(*(self._jupyter(n) for n in running))
        now = now or utcnow()
        decisions = []
        for nb, (readable, busy, jupyter_last) in zip(running, observed, strict=True):
            activity = NotebookActivity(
                running_since=nb.running_since,
                jupyter_readable=readable,
                kernel_busy=busy,
                jupyter=jupyter_last,
                ssh=_mtime(nb.activity_file),
                proxy=nb.proxy_activity,
                gpu=gpu.get(nb.job_id),
            )
            decision = decide_idle(
                activity,
                now=now,
                timeout_s=nb.timeout_s,
                warning_s=self.settings.notebook_idle_warning_s,
                warned_at=nb.warned_at,
            )
            decisions.append((nb, decision))
        async with self.db.write() as session:
            culled = await notebooks.apply_idle(session, decisions, now=now)
        self.last = decisions
        for job_id in culled:
            log.info("notebook %s culled after its idle timeout", job_id)
        return culled

    async def _jupyter(self, nb: notebooks.RunningNotebook) -> tuple[bool, bool, datetime | None]:
        """(readable, a kernel busy, the kernels' newest activity) from JupyterLab, counted as nobody's activity."""
        if nb.endpoint is None:
            return False, False, None
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=STATUS_TIMEOUT_S, trust_env=False)
        e = nb.endpoint
        url = f"http://{e.host}:{e.jupyter_port}{jobs.notebook_base_url(e.job_id)}api/kernels"
        try:
            response = await self._client.get(
                url, params={"no_track_activity": "1"}, headers={"Authorization": f"token {e.token}"}
            )
            response.raise_for_status()
            kernels = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.info("notebook %s: JupyterLab's kernels unreadable (%s); not judged this time", nb.job_id, exc)
            return False, False, None
        busy = any(k.get("execution_state") == "busy" for k in kernels)
        times = [t for k in kernels if (t := parse_jupyter_time(k.get("last_activity"))) is not None]
        return True, busy, max(times, default=None)

    async def _gpu_activity(
        self, session: AsyncSession, running: list[notebooks.RunningNotebook]
    ) -> dict[int, datetime]:
        """The newest sample in which one of each notebook's GPUs was busy, where the sampler reports any."""
        wanted = [n for n in running if n.devices and n.node_id is not None]
        out: dict[int, datetime] = {}
        for nb in wanted:
            values = await monitoring.latest_values(
                session,
                None,
                names=["accelerator.utilization"],
                node_id=nb.node_id,
                max_age_s=max(60.0, self.interval_s * 2),
            )
            busy = [v.at for v in values if v.labels.get("device") in {str(d) for d in nb.devices} and v.value > 0]
            if busy:
                out[nb.job_id] = max(busy)
        return out

    async def stop(self) -> None:
        await super().stop()
        if self._client is not None:
            await self._client.aclose()
            self._client = None


def build(ctx: AppContext) -> NotebookCuller:
    """The factory registered in ``aicenter.app.CONTROLLER_FACTORIES``."""
    return NotebookCuller(ctx.db, ctx.settings, ctx.secret_key)
