"""The job reconciler's decision core, pure: ``decide(snapshot, observations) -> Decision``.

No database, no executor, no clock but the ``now`` it is given: the same inputs always give the same steps and
actions, which is what the table tests in tests/unit/controllers/test_decide.py hold it to. The reconciler
calls it in rounds within one pass: a decision's steps are written, its actions taken, and what the actions
found (handles, stopped replicas, a saved model) is the next round's observations, until a decision has no
action left. A gang restart is then one read and two or three write transactions.

What it decides, by the job's status (the lifecycle is in ``core.jobs.lifecycle``):

- every round first records what was observed (``Steps.facts``): replica statuses, launch results;
- a stop request (a person's stop, a preemption, an exhausted balance) ends what is live, then the job;
- ``scheduled``: prepared -> intents + ``starting`` + launches; not preparable -> ``failed`` (launch_failed);
- ``starting``/``running``: a failed replica fails the gang -> ``restarting`` (retry policy) or ``failed``,
  after its live peers are stopped; every replica succeeded -> the output model is saved, then ``succeeded``;
  every replica running -> ``running``; an intent without a launch result is launched again (which adopts);
- ``restarting``/``preempted``: live replicas are stopped, then the next attempt is queued (or the job fails
  when its retry policy does not restart on preemption).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from aicenter.core.jobs import (
    FailureReason,
    JobStatus,
    ReplicaStatus,
    counts_against_budget,
    dominant_reason,
    should_restart,
    status_after_failure,
)
from aicenter.core.jobs.reconcile import (
    Actions,
    Decision,
    JobChange,
    JobSnapshot,
    Observations,
    ReplicaChange,
    ReplicaRow,
    Steps,
)

__all__ = ["GangFailure", "decide", "gang_failure"]

_MESSAGE_LIMIT = 4000


@dataclass(frozen=True, slots=True)
class GangFailure:
    """Why a gang failed: its dominant reason, the exit code behind it, and a sentence for people."""

    reason: FailureReason
    exit_code: int | None
    message: str


def gang_failure(replicas: Sequence[ReplicaRow]) -> GangFailure | None:
    """The gang's failure from its replicas; ``None`` while no replica failed.

    Only replicas that failed on their own count (``failed``, ``lost``): peers stopped by the reconciler after
    the first failure are consequences. A replica ``stopped`` by something outside aicenter (nobody asked) is
    a failure too, reported as ``error``.
    """
    primary = [r for r in replicas if r.status in (ReplicaStatus.FAILED, ReplicaStatus.LOST)]
    if not primary:
        outside = [r for r in replicas if r.status is ReplicaStatus.STOPPED]
        if outside and not any(r.live for r in replicas):
            first = outside[0]
            return GangFailure(FailureReason.ERROR, first.exit_code, f"{first.name} was stopped outside aicenter")
        return None
    reason = dominant_reason(r.reason or FailureReason.ERROR for r in primary)
    assert reason is not None
    first = next(r for r in primary if (r.reason or FailureReason.ERROR) is reason)
    if reason is FailureReason.ERROR:
        message = f"{first.name} exited with code {first.exit_code}"
    elif reason is FailureReason.OOM:
        message = f"{first.name} exceeded its memory limit"
    elif reason is FailureReason.NODE_LOST:
        message = f"{first.name} was lost (node {first.node})"
    else:
        message = f"{first.name} failed: {reason.value}"
    return GangFailure(reason, first.exit_code if reason is FailureReason.ERROR else None, message)


def _stop_message(reason: FailureReason) -> str:
    if reason is FailureReason.ARREARS:
        return "stopped: balance exhausted"
    return "stopped by a platform admin" if reason is FailureReason.STOPPED_BY_ADMIN else "stopped by request"


def _record(job: JobSnapshot, seen: Observations, now: datetime) -> tuple[list[ReplicaChange], list[ReplicaRow]]:
    """The facts of ``seen`` as replica changes, and the replicas with them applied."""
    facts: list[ReplicaChange] = []
    rows: list[ReplicaRow] = []
    for r in job.replicas:
        launch = seen.launches.get(r.id)
        if launch is not None and r.status is ReplicaStatus.STARTING:
            if launch.handle is not None:
                facts.append(ReplicaChange(r.id, handle=launch.handle))
                r = replace(r, launched=True)
            else:
                facts.append(ReplicaChange(r.id, ReplicaStatus.FAILED, FailureReason.LAUNCH_FAILED, finished_at=now))
                r = replace(r, status=ReplicaStatus.FAILED, reason=FailureReason.LAUNCH_FAILED)
        out = seen.outcomes.get(r.id)
        if out is not None and r.live:
            started = out.started_at if r.started_at is None else None
            if out.status is not r.status or started is not None:
                finished = out.status.is_finished()
                facts.append(
                    ReplicaChange(
                        r.id,
                        out.status,
                        reason=out.reason if finished else None,
                        exit_code=out.exit_code if finished else None,
                        started_at=started,
                        finished_at=(out.finished_at or now) if finished else None,
                    )
                )
                r = replace(
                    r,
                    status=out.status,
                    reason=out.reason if finished else r.reason,
                    exit_code=out.exit_code if finished else r.exit_code,
                    started_at=r.started_at or out.started_at,
                )
        rows.append(r)
    return facts, rows


@dataclass(frozen=True, slots=True)
class _Ending:
    """How to end the live replicas of a gang: the rows that end without a process, and what to launch first
    (an intent without a launch result: launching adopts it, so a stop never leaves a process behind) or stop."""

    changes: tuple[ReplicaChange, ...]
    launch: tuple[int, ...]
    stop: tuple[int, ...]

    @property
    def done(self) -> bool:
        """Nothing of the gang is left running once ``changes`` are written."""
        return not self.launch and not self.stop


def _end_live(rows: Sequence[ReplicaRow], reason: FailureReason, now: datetime) -> _Ending:
    changes: list[ReplicaChange] = []
    launch: list[int] = []
    stop: list[int] = []
    for r in rows:
        if not r.live:
            continue
        if r.launched:
            stop.append(r.id)
        elif r.intent:
            launch.append(r.id)
        else:  # never launched: it ends with no machine time
            changes.append(ReplicaChange(r.id, ReplicaStatus.STOPPED, reason, finished_at=now))
    return _Ending(tuple(changes), tuple(launch), tuple(stop))


def _ending(facts: list[ReplicaChange], ending: _Ending, reason: FailureReason, then: Steps | None) -> Decision:
    """End the live replicas; once nothing is left running, write ``then`` with the last of them."""
    if ending.done and then is not None:
        return Decision(replace(then, facts=tuple(facts), replicas=ending.changes + then.replicas))
    actions = Actions(launch=ending.launch, stop=ending.stop, stop_reason=reason)
    return Decision(Steps(facts=tuple(facts), replicas=ending.changes), actions)


def decide(job: JobSnapshot, seen: Observations, *, now: datetime) -> Decision:
    """The next steps and actions for ``job`` given what was observed of it since its snapshot.

    Args:
        job: The job as stored (its lease is held).
        seen: What executors reported, and the results of the previous round's actions.
        now: The time recorded for replicas that end without an executor's timestamp.

    Returns:
        The steps to write in one guarded transaction and the actions to take after it commits. A decision
        without actions ends the pass.
    """
    if job.status.is_finished():
        return Decision()
    facts, rows = _record(job, seen, now)
    status, stop = job.status, job.stop

    if status in (JobStatus.PENDING, JobStatus.QUEUED):
        if stop in (None, FailureReason.PREEMPTED):  # nothing placed, nothing to preempt
            return Decision(Steps(facts=tuple(facts), clear_stop=stop is not None))
        end = JobChange(status_after_failure(stop), failure_reason=stop, message=_stop_message(stop))
        return _ending(facts, _end_live(rows, stop, now), stop, Steps(job=end))

    if status is JobStatus.SCHEDULED:
        if stop is FailureReason.PREEMPTED:  # placed, not launched: straight back to the queue
            return Decision(
                Steps(facts=tuple(facts), undo_placement=True, job=JobChange(JobStatus.QUEUED, "placement_undone"))
            )
        if stop is not None:
            end = JobChange(status_after_failure(stop), failure_reason=stop, message=_stop_message(stop))
            return _ending(facts, _end_live(rows, stop, now), stop, Steps(job=end))
        return _start(job, seen, facts, rows, now)

    if status in (JobStatus.STARTING, JobStatus.RUNNING):
        if stop is FailureReason.PREEMPTED:
            # No message: the scheduler's ("preempted for job 12: ...") stays the job's latest word.
            preempted = JobChange(JobStatus.PREEMPTED, failure_reason=FailureReason.PREEMPTED)
            ending = _end_live(rows, FailureReason.PREEMPTED, now)
            actions = Actions(launch=ending.launch, stop=ending.stop, stop_reason=FailureReason.PREEMPTED)
            return Decision(Steps(facts=tuple(facts), replicas=ending.changes, job=preempted), actions)
        if stop is not None:
            end = JobChange(status_after_failure(stop), failure_reason=stop, message=_stop_message(stop))
            return _ending(facts, _end_live(rows, stop, now), stop, Steps(job=end))
        return _watch(job, seen, facts, rows, now)

    # restarting / preempted: end what is live, then queue the next attempt.
    if stop is not None and stop is not FailureReason.PREEMPTED:  # a person's stop wins over the requeue
        end = JobChange(status_after_failure(stop), failure_reason=stop, message=_stop_message(stop))
        return _ending(facts, _end_live(rows, stop, now), stop, Steps(job=end))
    why = job.failure_reason or FailureReason.ERROR
    stop_for = FailureReason.PREEMPTED if why is FailureReason.PREEMPTED else FailureReason.STOPPED
    if status is JobStatus.PREEMPTED and not should_restart(job.retry, why, job.counted_restarts):
        message = "preempted; its retry policy does not restart on preemption"
        then = Steps(job=JobChange(JobStatus.FAILED, failure_reason=FailureReason.PREEMPTED, message=message))
    else:
        message = f"restart {job.restart_count + 1} after {why.value}"
        then = Steps(
            job=JobChange(JobStatus.QUEUED, "restart", message),
            next_attempt=True,
            counted=counts_against_budget(why),
        )
    return _ending(facts, _end_live(rows, stop_for, now), stop_for, then)


def _start(
    job: JobSnapshot, seen: Observations, facts: list[ReplicaChange], rows: list[ReplicaRow], now: datetime
) -> Decision:
    """A scheduled job: record the intents and launch, or fail it when it could not be prepared."""
    if seen.prepare_error:
        failed = tuple(
            ReplicaChange(r.id, ReplicaStatus.FAILED, FailureReason.LAUNCH_FAILED, finished_at=now)
            for r in rows
            if r.live
        )
        message = f"could not prepare the job: {seen.prepare_error}"[:_MESSAGE_LIMIT]
        change = JobChange(JobStatus.FAILED, failure_reason=FailureReason.LAUNCH_FAILED, message=message)
        return Decision(Steps(facts=tuple(facts), replicas=failed, job=change))
    if seen.intents is None:  # not prepared in this round: the next pass prepares it
        return Decision(Steps(facts=tuple(facts)))
    intents = tuple(
        ReplicaChange(r.id, ReplicaStatus.STARTING, handle=seen.intents[r.id].handle, ports=seen.intents[r.id].ports)
        for r in rows
        if r.id in seen.intents
    )
    steps = Steps(facts=tuple(facts), replicas=intents, job=JobChange(JobStatus.STARTING, "starting"), issue_token=True)
    return Decision(steps, Actions(launch=tuple(c.id for c in intents)))


def _watch(
    job: JobSnapshot, seen: Observations, facts: list[ReplicaChange], rows: list[ReplicaRow], now: datetime
) -> Decision:
    """A starting or running job: fail, succeed, or note that it runs; relaunch intents without a result."""
    failure = gang_failure(rows)
    if failure is not None:
        if should_restart(job.retry, failure.reason, job.counted_restarts):
            # restarting first (people see it at once), then the peers are stopped and the next attempt queued
            # by the restarting branch of the next round.
            restarting = JobChange(
                JobStatus.RESTARTING,
                failure_reason=failure.reason,
                exit_code=failure.exit_code,
                message=failure.message[:_MESSAGE_LIMIT],
            )
            ending = _end_live(rows, FailureReason.STOPPED, now)
            actions = Actions(launch=ending.launch, stop=ending.stop)
            return Decision(Steps(facts=tuple(facts), replicas=ending.changes, job=restarting), actions)
        # The peers are stopped BEFORE the job becomes final: a finished job is never claimed again, so a peer
        # left running then would run forever.
        failed = JobChange(
            JobStatus.FAILED,
            failure_reason=failure.reason,
            exit_code=failure.exit_code,
            message=failure.message[:_MESSAGE_LIMIT],
        )
        return _ending(facts, _end_live(rows, FailureReason.STOPPED, now), FailureReason.STOPPED, Steps(job=failed))
    relaunch = tuple(r.id for r in rows if r.status is ReplicaStatus.STARTING and r.intent and not r.launched)
    if relaunch:  # a launch whose result was never stored (a crash, a lost lease): launching again adopts it
        return Decision(Steps(facts=tuple(facts), issue_token=True), Actions(launch=relaunch))
    if rows and all(r.status is ReplicaStatus.SUCCEEDED for r in rows):
        return _succeed(job, seen, facts)
    if (
        job.status is JobStatus.STARTING
        and rows
        and all(r.status in (ReplicaStatus.RUNNING, ReplicaStatus.SUCCEEDED) for r in rows)
    ):
        return Decision(Steps(facts=tuple(facts), job=JobChange(JobStatus.RUNNING, "running")))
    return Decision(Steps(facts=tuple(facts)))


def _succeed(job: JobSnapshot, seen: Observations, facts: list[ReplicaChange]) -> Decision:
    """Every replica exited 0: save the output model (once), then succeeded."""
    version = job.output_model_version_id or seen.saved_version_id
    if job.output_model and version is None and not seen.save_error:
        return Decision(Steps(facts=tuple(facts)), Actions(save_output=True))
    if seen.save_error:  # the job did its work; the model could not be kept
        message = f"succeeded, but the output model was not saved: {seen.save_error}"[:_MESSAGE_LIMIT]
    elif job.output_model and version is not None:
        message = f"saved model {seen.saved_as or job.output_model}"
    else:
        message = "all replicas exited 0"
    steps = Steps(
        facts=tuple(facts),
        job=JobChange(JobStatus.SUCCEEDED, "succeeded", message),
        output_model_version_id=seen.saved_version_id,
    )
    return Decision(steps)
