"""``decide``, the job reconciler's pure core, as a table: a job as stored and what was observed -> the steps to
write and the actions to take. Each row is one edge of the lifecycle; the ids say which."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from aicenter.controllers.jobs import decide, gang_failure
from aicenter.core.jobs import FailureReason, JobStatus, ReplicaStatus, RetryPolicy
from aicenter.core.jobs.reconcile import (
    Actions,
    Decision,
    Intent,
    JobChange,
    JobSnapshot,
    Launch,
    Observations,
    Outcome,
    ReplicaChange,
    ReplicaRow,
    Steps,
)

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
EARLIER = datetime(2026, 12, 3, 11, 0, tzinfo=UTC)
R = ReplicaStatus
F = FailureReason
S = JobStatus
RESTART_ON_ERROR = RetryPolicy(max_restarts=2, on=[F.ERROR])
INTENT = {"executor": "local", "node": "n1", "run_dir": "/runs/0/worker-0", "pid": 0, "start_time": 0.0}
HANDLE = {**INTENT, "pid": 4242, "start_time": 1.0}


def rep(i: int, status: R = R.PENDING, **kw: object) -> ReplicaRow:
    """Replica ``i`` of task ``worker``; a starting or running replica is launched unless told otherwise."""
    launched = status in (R.STARTING, R.RUNNING)
    fields: dict[str, object] = {"node": "n1", "intent": launched, "launched": launched, **kw}
    return ReplicaRow(id=i, task="worker", index=i, status=status, **fields)  # type: ignore[arg-type]


def job(status: S, *replicas: ReplicaRow, **kw: object) -> JobSnapshot:
    return JobSnapshot(id=7, status=status, replicas=replicas or (rep(0),), **kw)  # type: ignore[arg-type]


def ran(code: int) -> Outcome:
    return Outcome(R.SUCCEEDED if code == 0 else R.FAILED, None if code == 0 else F.ERROR, code, EARLIER, NOW)


def stopped(reason: F = F.STOPPED) -> Outcome:
    return Outcome(R.STOPPED, reason, -15, EARLIER, NOW)


@dataclass(frozen=True)
class Case:
    id: str
    job: JobSnapshot
    seen: Observations = field(default_factory=Observations)
    steps: Steps = field(default_factory=Steps)
    actions: Actions = field(default_factory=Actions)


CASES = [
    # -- scheduled ---------------------------------------------------------------------------------------------
    Case(
        "scheduled, prepared -> intents, starting, a token, launches",
        job(S.SCHEDULED, rep(0), rep(1)),
        Observations(intents={0: Intent((5000,), INTENT), 1: Intent((5001,), INTENT)}),
        Steps(
            replicas=(
                ReplicaChange(0, R.STARTING, handle=INTENT, ports=(5000,)),
                ReplicaChange(1, R.STARTING, handle=INTENT, ports=(5001,)),
            ),
            job=JobChange(S.STARTING, "starting"),
            issue_token=True,
        ),
        Actions(launch=(0, 1)),
    ),
    Case(
        "scheduled, not preparable -> failed with launch_failed, no launch",
        job(S.SCHEDULED),
        Observations(prepare_error="image cuda:1 is not built (build failed)"),
        Steps(
            replicas=(ReplicaChange(0, R.FAILED, F.LAUNCH_FAILED, finished_at=NOW),),
            job=JobChange(
                S.FAILED,
                failure_reason=F.LAUNCH_FAILED,
                message="could not prepare the job: image cuda:1 is not built (build failed)",
            ),
        ),
    ),
    Case("scheduled, not prepared in this round -> nothing", job(S.SCHEDULED)),
    Case(
        "preempted while scheduled -> placement undone, queued, nothing launched",
        job(S.SCHEDULED, stop=F.PREEMPTED),
        Observations(),
        Steps(undo_placement=True, job=JobChange(S.QUEUED, "placement_undone")),
    ),
    Case(
        "stopped while scheduled -> its replicas end without machine time, stopped",
        job(S.SCHEDULED, stop=F.STOPPED),
        Observations(),
        Steps(
            replicas=(ReplicaChange(0, R.STOPPED, F.STOPPED, finished_at=NOW),),
            job=JobChange(S.STOPPED, failure_reason=F.STOPPED, message="stopped by request"),
        ),
    ),
    # -- starting / running ---------------------------------------------------------------------------------
    Case(
        "launch results -> handles stored; the job waits for the replicas to run",
        job(S.STARTING, rep(0, R.STARTING, launched=False)),
        Observations(launches={0: Launch(HANDLE)}),
        Steps(facts=(ReplicaChange(0, handle=HANDLE),)),
    ),
    Case(
        "launch failed from starting, retry on error only -> peers stopped, then failed",
        job(S.STARTING, rep(0, R.STARTING, launched=False), rep(1, R.RUNNING), retry=RESTART_ON_ERROR),
        Observations(launches={0: Launch(None, "no such node")}),
        Steps(facts=(ReplicaChange(0, R.FAILED, F.LAUNCH_FAILED, finished_at=NOW),)),
        Actions(stop=(1,)),
    ),
    Case(
        "launch failed, nothing else live -> failed with launch_failed",
        job(S.STARTING, rep(0, R.STARTING, launched=False)),
        Observations(launches={0: Launch(None, "no such node")}),
        Steps(
            facts=(ReplicaChange(0, R.FAILED, F.LAUNCH_FAILED, finished_at=NOW),),
            job=JobChange(S.FAILED, failure_reason=F.LAUNCH_FAILED, message="worker/0 failed: launch_failed"),
        ),
    ),
    Case(
        "every replica running -> running",
        job(S.STARTING, rep(0, R.STARTING), rep(1, R.RUNNING, started_at=EARLIER)),
        Observations(outcomes={0: Outcome(R.RUNNING, started_at=EARLIER), 1: Outcome(R.RUNNING, started_at=EARLIER)}),
        Steps(facts=(ReplicaChange(0, R.RUNNING, started_at=EARLIER),), job=JobChange(S.RUNNING, "running")),
    ),
    Case(
        "an unchanged observation writes nothing",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER)),
        Observations(outcomes={0: Outcome(R.RUNNING, started_at=EARLIER)}),
    ),
    Case(
        "a replica failed, restarts left -> restarting at once, its peer stopped",
        job(
            S.RUNNING,
            rep(0, R.RUNNING, started_at=EARLIER),
            rep(1, R.RUNNING, started_at=EARLIER),
            retry=RESTART_ON_ERROR,
        ),
        Observations(outcomes={1: ran(3)}),
        Steps(
            facts=(ReplicaChange(1, R.FAILED, F.ERROR, exit_code=3, finished_at=NOW),),
            job=JobChange(S.RESTARTING, failure_reason=F.ERROR, exit_code=3, message="worker/1 exited with code 3"),
        ),
        Actions(stop=(0,)),
    ),
    Case(
        "a replica failed, no retry -> the peer is stopped BEFORE the job fails",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER), rep(1, R.RUNNING, started_at=EARLIER)),
        Observations(outcomes={1: ran(3)}),
        Steps(facts=(ReplicaChange(1, R.FAILED, F.ERROR, exit_code=3, finished_at=NOW),)),
        Actions(stop=(0,)),
    ),
    Case(
        "node lost -> node_lost explains the gang (its peer's error is a consequence), restarts",
        job(
            S.RUNNING,
            rep(0, R.RUNNING, started_at=EARLIER),
            rep(1, R.RUNNING, started_at=EARLIER),
            retry=RetryPolicy(max_restarts=1, on=[F.NODE_LOST]),
        ),
        Observations(outcomes={0: Outcome(R.LOST, F.NODE_LOST, None, EARLIER, NOW), 1: ran(1)}),
        Steps(
            facts=(
                ReplicaChange(0, R.LOST, F.NODE_LOST, finished_at=NOW),
                ReplicaChange(1, R.FAILED, F.ERROR, exit_code=1, finished_at=NOW),
            ),
            job=JobChange(S.RESTARTING, failure_reason=F.NODE_LOST, message="worker/0 was lost (node n1)"),
        ),
    ),
    Case(
        "every replica exited 0, an output model -> save it first",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER), output_model="tiny"),
        Observations(outcomes={0: ran(0)}),
        Steps(facts=(ReplicaChange(0, R.SUCCEEDED, exit_code=0, finished_at=NOW),)),
        Actions(save_output=True),
    ),
    Case(
        "the output model saved -> succeeded with its version",
        job(S.RUNNING, rep(0, R.SUCCEEDED), output_model="tiny"),
        Observations(saved_version_id=17, saved_as="tiny:2"),
        Steps(job=JobChange(S.SUCCEEDED, "succeeded", "saved model tiny:2"), output_model_version_id=17),
    ),
    Case(
        "the output model could not be saved -> succeeded all the same, saying why",
        job(S.RUNNING, rep(0, R.SUCCEEDED), output_model="tiny"),
        Observations(save_error="over the storage quota"),
        Steps(
            job=JobChange(
                S.SUCCEEDED, "succeeded", "succeeded, but the output model was not saved: over the storage quota"
            )
        ),
    ),
    Case(
        "saved before a crash -> succeeded without saving twice",
        job(S.RUNNING, rep(0, R.SUCCEEDED), output_model="tiny", output_model_version_id=17),
        Observations(),
        Steps(job=JobChange(S.SUCCEEDED, "succeeded", "saved model tiny")),
    ),
    Case(
        "a command that ended before it was seen running -> succeeded from starting",
        job(S.STARTING, rep(0, R.STARTING)),
        Observations(outcomes={0: ran(0)}),
        Steps(
            facts=(ReplicaChange(0, R.SUCCEEDED, exit_code=0, started_at=EARLIER, finished_at=NOW),),
            job=JobChange(S.SUCCEEDED, "succeeded", "all replicas exited 0"),
        ),
    ),
    Case(
        "lease lost mid start (intent without a launch result) -> launched again, which adopts, with a token",
        job(S.STARTING, rep(0, R.STARTING, launched=False), rep(1, R.STARTING)),
        Observations(),
        Steps(issue_token=True),
        Actions(launch=(0,)),
    ),
    Case(
        "a replica stopped by something outside aicenter -> the gang failed with error",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER)),
        Observations(outcomes={0: stopped()}),
        Steps(
            facts=(ReplicaChange(0, R.STOPPED, F.STOPPED, exit_code=-15, finished_at=NOW),),
            job=JobChange(
                S.FAILED, failure_reason=F.ERROR, exit_code=-15, message="worker/0 was stopped outside aicenter"
            ),
        ),
    ),
    # -- stop requests ----------------------------------------------------------------------------------------
    Case(
        "a person's stop of a running job -> stop its replicas",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER), stop=F.STOPPED),
        Observations(),
        Steps(),
        Actions(stop=(0,)),
    ),
    Case(
        "the replicas stopped -> stopped",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER), stop=F.STOPPED_BY_ADMIN),
        Observations(outcomes={0: stopped(F.STOPPED_BY_ADMIN)}),
        Steps(
            facts=(ReplicaChange(0, R.STOPPED, F.STOPPED_BY_ADMIN, exit_code=-15, finished_at=NOW),),
            job=JobChange(S.STOPPED, failure_reason=F.STOPPED_BY_ADMIN, message="stopped by a platform admin"),
        ),
    ),
    Case(
        "a stop of an intent without a launch result -> launched first (adopted), never left running",
        job(S.STARTING, rep(0, R.STARTING, launched=False), stop=F.STOPPED),
        Observations(),
        Steps(),
        Actions(launch=(0,)),
    ),
    Case(
        "preempted while running -> preempted at once, replicas stopped with reason preempted",
        job(S.RUNNING, rep(0, R.RUNNING, started_at=EARLIER), stop=F.PREEMPTED),
        Observations(),
        Steps(job=JobChange(S.PREEMPTED, failure_reason=F.PREEMPTED)),
        Actions(stop=(0,), stop_reason=F.PREEMPTED),
    ),
    Case(
        "the preempted replicas stopped -> the next attempt is queued (preemption costs no restart)",
        job(S.PREEMPTED, rep(0, R.RUNNING, started_at=EARLIER), stop=F.PREEMPTED, failure_reason=F.PREEMPTED),
        Observations(outcomes={0: stopped(F.PREEMPTED)}),
        Steps(
            facts=(ReplicaChange(0, R.STOPPED, F.PREEMPTED, exit_code=-15, finished_at=NOW),),
            job=JobChange(S.QUEUED, "restart", "restart 1 after preempted"),
            next_attempt=True,
            counted=False,
        ),
    ),
    Case(
        "preempted, a policy that does not restart on preemption -> failed",
        job(
            S.PREEMPTED,
            rep(0, R.STOPPED),
            stop=F.PREEMPTED,
            failure_reason=F.PREEMPTED,
            retry=RetryPolicy(max_restarts=0, on=[]),
        ),
        Observations(),
        Steps(
            job=JobChange(
                S.FAILED,
                failure_reason=F.PREEMPTED,
                message="preempted; its retry policy does not restart on preemption",
            )
        ),
    ),
    Case(
        "a person's stop during a preemption -> stopped, never requeued (the stop is not lost)",
        job(S.PREEMPTED, rep(0, R.STOPPED), stop=F.STOPPED, failure_reason=F.STOPPED),
        Observations(),
        Steps(job=JobChange(S.STOPPED, failure_reason=F.STOPPED, message="stopped by request")),
    ),
    Case(
        "a person's stop racing a preemption whose replicas are still stopping -> stop them, then stopped",
        job(S.PREEMPTED, rep(0, R.RUNNING, started_at=EARLIER), stop=F.STOPPED, failure_reason=F.STOPPED),
        Observations(),
        Steps(),
        Actions(stop=(0,)),
    ),
    # -- restarting ------------------------------------------------------------------------------------------
    Case(
        "restarting, its peers stopped -> the next attempt is queued, counted",
        job(
            S.RESTARTING,
            rep(0, R.RUNNING, started_at=EARLIER),
            rep(1, R.FAILED),
            failure_reason=F.ERROR,
            retry=RESTART_ON_ERROR,
        ),
        Observations(outcomes={0: stopped()}),
        Steps(
            facts=(ReplicaChange(0, R.STOPPED, F.STOPPED, exit_code=-15, finished_at=NOW),),
            job=JobChange(S.QUEUED, "restart", "restart 1 after error"),
            next_attempt=True,
            counted=True,
        ),
    ),
    Case(
        "restarting with a replica never launched -> it ends without machine time, the job is requeued",
        job(S.RESTARTING, rep(0, R.PENDING), rep(1, R.FAILED), failure_reason=F.ERROR, restart_count=1),
        Observations(),
        Steps(
            replicas=(ReplicaChange(0, R.STOPPED, F.STOPPED, finished_at=NOW),),
            job=JobChange(S.QUEUED, "restart", "restart 2 after error"),
            next_attempt=True,
            counted=True,
        ),
    ),
    # -- queued ----------------------------------------------------------------------------------------------
    Case(
        "a preemption marker on a queued job -> cleared, nothing to preempt",
        job(S.QUEUED, stop=F.PREEMPTED),
        Observations(),
        Steps(clear_stop=True),
    ),
    Case(
        "a balance exhausted on a queued job -> stopped",
        job(S.QUEUED, stop=F.ARREARS),
        Observations(),
        Steps(
            replicas=(ReplicaChange(0, R.STOPPED, F.ARREARS, finished_at=NOW),),
            job=JobChange(S.STOPPED, failure_reason=F.ARREARS, message="stopped: balance exhausted"),
        ),
    ),
    Case("a finished job -> nothing", job(S.SUCCEEDED, rep(0, R.SUCCEEDED)), Observations(outcomes={0: ran(1)})),
]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_decide(case: Case) -> None:
    assert decide(case.job, case.seen, now=NOW) == Decision(case.steps, case.actions)


def test_decide_is_pure_the_same_inputs_give_the_same_decision() -> None:
    for case in CASES:
        assert decide(case.job, case.seen, now=NOW) == decide(case.job, case.seen, now=NOW)


def test_the_dominant_reason_explains_a_gang() -> None:
    rows = [rep(0, R.FAILED, reason=F.ERROR, exit_code=1), rep(1, R.LOST, reason=F.NODE_LOST)]
    failure = gang_failure(rows)
    assert failure is not None
    assert (failure.reason, failure.exit_code, failure.message) == (F.NODE_LOST, None, "worker/1 was lost (node n1)")
    assert gang_failure([rep(0, R.RUNNING), rep(1, R.SUCCEEDED)]) is None
