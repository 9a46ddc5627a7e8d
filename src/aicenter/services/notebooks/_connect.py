"""Where a running notebook listens, for the data planes (the proxy and the SSH gateway), and the files its SSH
agent reads.

``endpoints`` is one query for any number of notebooks; the gateways cache what it returns for a second or two,
so no request they pass reads the database (DESIGN.md: no database access per request on data planes).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.errors import Conflict
from aicenter.core.jobs import JobKind, JobStatus, ReplicaStatus
from aicenter.db.engine import Database
from aicenter.db.models import Job, Node, Replica
from aicenter.runtime.sshfiles import public_host_key
from aicenter.services import jobs, ssh_keys
from aicenter.services.context import Actor
from aicenter.services.notebooks._lifecycle import require_owner
from aicenter.services.notebooks._views import load_notebook

__all__ = [
    "Endpoint",
    "endpoints",
    "notebook_host_key",
    "prepare_state",
    "refresh_authorized_keys",
    "write_authorized_keys",
]

HOST_KEY_FILE = "host_key"
AUTHORIZED_KEYS_FILE = "authorized_keys"
_OPEN = (JobStatus.STARTING.value, JobStatus.RUNNING.value)
_PLACED = (JobStatus.SCHEDULED.value,)


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A notebook that can be reached now.

    Attributes:
        job_id: The notebook.
        owner_id: The only user the gateways let in.
        workspace_id: Its workspace.
        host: The node address its ports are published on.
        jupyter_port: JupyterLab's port there.
        ssh_port: The SSH agent's port there.
        token: JupyterLab's token for this attempt (the proxy sends it; users never see it).
        attempt: The attempt (a restarted notebook has a new token and new ports).
    """

    job_id: int
    owner_id: int | None
    workspace_id: int
    host: str
    jupyter_port: int
    ssh_port: int
    token: str
    attempt: int


async def endpoints(session: AsyncSession, job_ids: Iterable[int], secret_key: str) -> dict[int, Endpoint]:
    """The endpoints of those of ``job_ids`` that are running notebooks (starting ones too: JupyterLab answers
    before the reconciler marks the job running), in one query."""
    ids = sorted(set(job_ids))
    if not ids:
        return {}
    rows = await session.execute(
        select(Job.id, Job.user_id, Job.workspace_id, Job.restart_count, Replica.ports, Node.address, Node.executor)
        .join(Replica, (Replica.job_id == Job.id) & (Replica.attempt == Job.restart_count))
        .outerjoin(Node, Node.id == Replica.node_id)
        .where(
            Job.id.in_(ids),
            Job.kind == JobKind.NOTEBOOK.value,
            Job.status.in_(_OPEN),
            Replica.status.in_((ReplicaStatus.STARTING.value, ReplicaStatus.RUNNING.value)),
        )
    )
    out = {}
    for job_id, owner, workspace, attempt, ports, address, executor in rows.all():
        if not ports or len(ports) < jobs.NOTEBOOK_PORTS:
            continue
        jupyter, ssh = (int(p) for p in ports[-jobs.NOTEBOOK_PORTS :])
        host = jobs.publish_host(None if executor is None else jobs.NodeRef(address or "", executor))
        token = jobs.notebook_token(secret_key, job_id, attempt)
        out[job_id] = Endpoint(job_id, owner, workspace, host, jupyter, ssh, token, attempt)
    return out


# -- the SSH agent's files --------------------------------------------------------------------------------------


def write_authorized_keys(state: Path, keys: Iterable[str]) -> None:
    """The owner's public keys, one per line, replaced atomically (the agent re-reads the file when it changes)."""
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    path = state / AUTHORIZED_KEYS_FILE
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text("".join(f"{k.strip()}\n" for k in keys))
    tmp.chmod(0o644)
    if path.exists():  # keep the owner the sandbox gave it (prepare_writable chowns the state dir)
        st = path.stat()
        os.chown(tmp, st.st_uid, st.st_gid)
    tmp.replace(path)


def _prepare_files(state: Path, keys: list[str]) -> None:
    state.mkdir(parents=True, exist_ok=True, mode=0o700)
    host_key = state / HOST_KEY_FILE
    if not host_key.exists():  # kept across starts: the client's known_hosts entry stays valid
        import asyncssh

        tmp = host_key.with_name(f".{host_key.name}.tmp")
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(tmp))
        tmp.chmod(0o600)
        tmp.replace(host_key)
    write_authorized_keys(state, keys)
    (state / jobs.ACTIVITY_FILE).touch(exist_ok=True)


async def prepare_state(db: Database, state: Path, user_id: int | None) -> None:
    """Make the notebook's state dir before a launch: the agent's host key (once), the owner's public keys and
    the activity file. The sandbox binds the dir read-write and gives it to the notebook's uid."""
    keys = await _owner_keys(db, user_id)
    await asyncio.to_thread(_prepare_files, state, keys)


async def _owner_keys(db: Database, user_id: int | None) -> list[str]:
    if user_id is None:
        return []
    async with db.read() as session:
        return await ssh_keys.authorized_keys(session, user_id)


async def refresh_authorized_keys(db: Database, jobs_path: Path) -> int:
    """Rewrite the authorized keys of every notebook that runs (or starts) from its owner's keys now: a key
    added while a notebook runs works at once, a deleted one stops working. Returns how many were written."""
    async with db.read() as session:
        owners = (
            await session.execute(
                select(Job.id, Job.user_id).where(Job.kind == JobKind.NOTEBOOK.value, Job.status.in_(_OPEN + _PLACED))
            )
        ).all()
        keys = {user: await ssh_keys.authorized_keys(session, user) for user in {u for _, u in owners if u}}
    for job_id, user in owners:
        state = jobs.job_dirs(jobs_path, job_id).notebook
        if state.exists():
            await asyncio.to_thread(write_authorized_keys, state, keys.get(user, []) if user else [])
    return len(owners)


async def notebook_host_key(session: AsyncSession, actor: Actor, job_id: int, jobs_path: Path) -> str:
    """The public line of the notebook's SSH host key, for its owner's ``known_hosts``.

    Raises:
        NotFound: No such notebook for the actor.
        Forbidden: Not its owner.
        Conflict: It never started (its host key is made at its first start).
    """
    job = await load_notebook(session, actor, job_id)
    require_owner(actor, job, "connect to")
    path = jobs.job_dirs(jobs_path, job_id).notebook / HOST_KEY_FILE
    if not path.exists():
        raise Conflict(f"notebook {job_id} has not started yet: its SSH host key is made when it first starts")
    return await asyncio.to_thread(public_host_key, path)
