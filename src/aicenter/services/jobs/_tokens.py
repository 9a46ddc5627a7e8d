"""The API token a job's replicas get as ``AICENTER_TOKEN``: a ``job`` token of its user, valid while the job runs.

It acts as the job's user but may only read its own job (the operations declared ``access(..., job_token=True)``,
checked where the API authenticates a request, aicenter/api/deps.py): a replica's code is user code, and what
leaks from it (a log line, a compromised dependency) must not be a key to the user's whole account.

The reconciler issues one token per launch (``issue_job_token``), in a transaction that holds the job's lease,
just before it builds the plans. Only its hash is stored, like every token; the secret exists in the replicas'
plans and environments, never in a log or an API answer. ``transition`` revokes every token of the job when it
enters a finished status, so a token outlives its job by at most the verification cache
(``AICENTER_TOKEN_CACHE_S``, default 2 s).

A token per launch rather than per job: the secret cannot be read back from the database, and a reconciler that
took over a job after a crash must be able to launch its remaining replicas. Replicas it adopts keep the token
they were started with; the extra tokens are revoked with the others when the job ends.
"""

from __future__ import annotations

from sqlalchemy import update
from sqlalchemy.ext.asyncio import AsyncSession

from aicenter.core.clock import utcnow
from aicenter.core.jobs import JobStatus
from aicenter.core.roles import TokenKind, UserState
from aicenter.db.models import ApiToken, Job, User
from aicenter.services.auth import issue_token


def job_token_name(job_id: int) -> str:
    """The name of a job's tokens (shown in the user's token list)."""
    return f"aicenter job {job_id}"


async def issue_job_token(session: AsyncSession, job: Job) -> str:
    """A new job token of the job's user for the replicas about to be launched, or ``""`` when the job has no
    active user (deleted or frozen: the job runs, its API calls are refused) or has already finished.

    Call it in the caller's write transaction on the job's row (the reconciler's lease-guarded one), so that
    it cannot interleave with the transition that ends the job and revokes its tokens.
    """
    if job.user_id is None or JobStatus(job.status).is_finished():
        return ""
    user = await session.get(User, job.user_id)
    if user is None or user.state != UserState.ACTIVE:
        return ""
    issued = await issue_token(
        session, user, name=job_token_name(job.id), kind=TokenKind.JOB, ttl_s=None, job_id=job.id
    )
    return issued.secret


async def revoke_job_tokens(session: AsyncSession, job: Job) -> None:
    """Revoke every token issued for ``job`` (in the caller's transaction)."""
    if job.user_id is None:
        return
    await session.execute(
        update(ApiToken)
        .where(
            ApiToken.user_id == job.user_id,
            ApiToken.job_id == job.id,
            ApiToken.revoked_at.is_(None),
        )
        .values(revoked_at=utcnow())
        .execution_options(synchronize_session=False)
    )
