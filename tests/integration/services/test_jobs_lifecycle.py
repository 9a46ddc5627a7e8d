"""The one transition function (table, time columns, events, the stale-status guard), stop / force stop,
delete, list filters and isolation, templates and resubmit."""

from __future__ import annotations

from pathlib import Path

import pytest
from sqlalchemy import select, update

from aicenter.core.errors import Conflict, Forbidden, InvalidTransition, NotFound
from aicenter.core.jobs import TRANSITIONS, FailureReason, JobStatus, stop_reason
from aicenter.db.engine import Database
from aicenter.db.models import Job, JobEvent, Replica
from aicenter.services import jobs
from aicenter.services.context import Actor
from aicenter.services.jobs._lifecycle import transition_many
from tests.integration.services.jobs_helpers import counts, job_world, move, spec, submit

S = JobStatus


async def test_transition_walks_the_table_and_records_events(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    job = await move(db, view.job.id, S.SCHEDULED, S.STARTING, S.RUNNING)
    assert job.scheduled_at is not None
    assert job.started_at is not None
    assert job.finished_at is None
    job = await move(db, view.job.id, S.FAILED, failure_reason=FailureReason.ERROR, exit_code=3, message="exit 3")
    assert (job.status, job.failure_reason, job.exit_code, job.message) == ("failed", "error", 3, "exit 3")
    assert job.finished_at is not None
    async with db.read() as session:
        events = (await session.scalars(select(JobEvent).where(JobEvent.job_id == job.id).order_by(JobEvent.id))).all()
    assert [(e.from_status, e.to_status) for e in events][2:] == [
        ("queued", "scheduled"),
        ("scheduled", "starting"),
        ("starting", "running"),
        ("running", "failed"),
    ]
    assert events[-1].actor_name == "system"
    assert events[-1].actor_id is None
    assert events[-1].reason == "error"


@pytest.mark.parametrize("current", list(S), ids=str)
async def test_every_edge_outside_the_table_is_refused_and_changes_nothing(
    db: Database, tmp_path: Path, current: JobStatus
) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    # Reach ``current`` along allowed edges.
    paths = {
        S.PENDING: None,
        S.QUEUED: [],
        S.SCHEDULED: [S.SCHEDULED],
        S.STARTING: [S.SCHEDULED, S.STARTING],
        S.RUNNING: [S.SCHEDULED, S.STARTING, S.RUNNING],
        S.RESTARTING: [S.SCHEDULED, S.STARTING, S.RESTARTING],
        S.PREEMPTED: [S.SCHEDULED, S.STARTING, S.PREEMPTED],
        S.SUCCEEDED: [S.SCHEDULED, S.STARTING, S.SUCCEEDED],
        S.FAILED: [S.FAILED],
        S.STOPPED: [S.STOPPED],
    }
    path = paths[current]
    if path is None:
        return  # a submitted job is never pending after submit (covered by the submit test)
    await move(db, view.job.id, *path)
    before = await counts(db)
    for target in S:
        if target in TRANSITIONS[current] or target == current:
            continue
        with pytest.raises(InvalidTransition) as caught:
            await move(db, view.job.id, target)
        assert caught.value.status == 409
        assert caught.value.details["from"] == current.value
    assert await counts(db) == before
    async with db.read() as session:
        assert (await session.get(Job, view.job.id)).status == current.value  # type: ignore[union-attr]


async def test_same_status_is_a_no_op_without_an_event(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    before = await counts(db)
    async with db.write() as session:
        job = await session.get(Job, view.job.id)
        assert job is not None
        assert await jobs.transition(session, job, S.QUEUED, actor=None) is None
    assert await counts(db) == before


async def test_a_stale_status_is_not_overwritten(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())

    async def behind_its_back() -> None:
        async with db.write() as session:
            job = await session.get(Job, view.job.id)
            assert job is not None
            # Another writer (a user's stop) changes the row behind this session's object.
            await session.execute(
                update(Job)
                .where(Job.id == job.id)
                .values(status="stopped")
                .execution_options(synchronize_session=False)
            )
            await jobs.transition(session, job, S.SCHEDULED, actor=None)

    with pytest.raises(InvalidTransition) as caught:
        await behind_its_back()
    assert caught.value.details["current"] == "stopped"


async def test_stop_of_a_queued_job_ends_it_at_once(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    async with db.write() as session:
        stopped = await jobs.stop_job(session, w.p.alice, view.job.id)
    assert (stopped.job.status, stopped.job.failure_reason) == ("stopped", "stopped")
    assert stopped.job.stop_requested_by == w.p.alice.user_id
    async with db.read() as session:
        statuses = (await session.scalars(select(Replica.status).where(Replica.job_id == view.job.id))).all()
        last = await session.scalar(select(JobEvent).order_by(JobEvent.id.desc()).limit(1))
    assert set(statuses) == {"stopped"}
    assert last is not None
    assert (last.to_status, last.actor_name, last.reason) == ("stopped", "alice", "stopped")
    with pytest.raises(InvalidTransition):
        async with db.write() as session:
            await jobs.stop_job(session, w.p.alice, view.job.id)


def why(job: Job) -> FailureReason | None:
    """The reason the reconciler ends a job with, from its stop-request fields."""
    return stop_reason(job.stop_requested_at is not None, job.stop_requested_by, job.failure_reason)


async def test_stop_of_a_running_job_is_a_request_for_the_reconciler(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    await move(db, view.job.id, S.SCHEDULED, S.STARTING, S.RUNNING)
    async with db.write() as session:
        stopped = await jobs.stop_job(session, w.p.alice, view.job.id)
    assert stopped.job.status == "running"
    assert why(stopped.job) is FailureReason.STOPPED
    async with db.write() as session:
        forced = await jobs.force_stop(session, w.p.root, view.job.id)
    assert forced.job.status == "running"
    assert why(forced.job) is FailureReason.STOPPED_BY_ADMIN
    assert forced.job.stop_requested_by == w.p.root.user_id


async def test_who_may_stop_and_delete(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    view = await submit(db, w.p.alice, spec())
    job_id = view.job.id
    with pytest.raises(Forbidden):  # bob is a plain member of the workspace, not the owner
        async with db.write() as session:
            await jobs.stop_job(session, w.p.bob, job_id)
    with pytest.raises(NotFound):  # carol is not in the workspace
        async with db.write() as session:
            await jobs.stop_job(session, w.p.carol, job_id)
    with pytest.raises(Forbidden):  # force stop is for platform admins
        async with db.write() as session:
            await jobs.force_stop(session, w.p.alice, job_id)
    with pytest.raises(Forbidden, match="force-stop"):  # a platform admin outside the workspace
        async with db.write() as session:
            await jobs.stop_job(session, w.p.root, job_id)
    with pytest.raises(Conflict):
        async with db.write() as session:
            await jobs.delete_job(session, w.p.alice, job_id)
    async with db.write() as session:
        forced = await jobs.force_stop(session, w.p.root, job_id)
    assert (forced.job.status, forced.job.failure_reason) == ("stopped", "stopped_by_admin")
    async with db.write() as session:
        await jobs.delete_job(session, w.p.alice, job_id)
    assert await counts(db) == (0, 0, 0)


async def test_list_filters_and_isolation(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    a = await submit(db, w.p.alice, spec(name="a"))
    b = await submit(db, w.p.bob, spec(name="b", workspace="alice"))
    c = await submit(db, w.p.carol, spec(name="c"))
    await move(db, a.job.id, S.STOPPED)

    async def names(actor: Actor, **filters: object) -> list[str]:
        async with db.read() as session:
            page = await jobs.list_jobs(session, actor, **filters)  # type: ignore[arg-type]
        return [v.job.name for v in page.items]

    assert await names(w.p.alice) == ["b", "a"]  # newest first, only ws's
    assert await names(w.p.carol) == ["c"]
    assert await names(w.p.root) == ["c", "b", "a"]
    assert await names(w.p.alice, status="queued") == ["b"]
    assert await names(w.p.alice, status="stopped,queued") == ["b", "a"]
    assert await names(w.p.alice, user="alice") == ["a"]
    assert await names(w.p.alice, kind="notebook") == []
    assert await names(w.p.root, workspace_id=w.p.carol_ws) == ["c"]
    with pytest.raises(NotFound):
        await names(w.p.alice, workspace_id=w.p.carol_ws)
    with pytest.raises(NotFound):
        async with db.read() as session:
            await jobs.get_job(session, w.p.carol, b.job.id)
    async with db.read() as session:
        detail = await jobs.get_job(session, w.p.root, b.job.id)  # admins see every job, with replicas
    assert (len(detail.replicas), len(detail.events)) == (2, 2)
    assert c.job.workspace_id == w.p.carol_ws


async def test_templates_and_resubmit_with_overrides(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    async with db.write() as session:
        t = await jobs.create_template(session, w.p.alice, name="base", spec=spec(), description="two workers")
    with pytest.raises(Conflict):
        async with db.write() as session:
            await jobs.create_template(session, w.p.bob, name="base", spec=spec(), workspace_id=w.p.ws)
    async with db.write() as session:
        job = await jobs.submit_template(session, w.p.bob, t.template.id, ["tasks[0].replicas=4", "name=big"])
    assert (job.job.name, job.job.spec["tasks"][0]["replicas"], job.username) == ("big", 4, "bob")
    async with db.write() as session:
        again = await jobs.resubmit_job(session, w.p.alice, job.job.id, ["tasks[0].replicas=1"])
        saved = await jobs.create_template_from_job(session, w.p.alice, again.job.id, name="one")
    assert again.job.spec["tasks"][0]["replicas"] == 1
    assert saved.template.spec == again.job.spec
    with pytest.raises(Forbidden):  # bob neither wrote it nor administers the workspace
        async with db.write() as session:
            await jobs.update_template(session, w.p.bob, t.template.id, description="mine now")
    async with db.write() as session:
        updated = await jobs.update_template(session, w.p.alice, t.template.id, name="renamed")
    assert updated.template.name == "renamed"
    with pytest.raises(NotFound):
        async with db.read() as session:
            await jobs.get_template(session, w.p.carol, t.template.id)
    async with db.read() as session:
        listed = await jobs.list_templates(session, w.p.bob)
    assert [v.template.name for v in listed.items] == ["one", "renamed"]
    async with db.write() as session:
        await jobs.delete_template(session, w.p.alice, t.template.id)
    with pytest.raises(NotFound):
        async with db.write() as session:
            await jobs.submit_template(session, w.p.alice, t.template.id)


async def test_transition_many_moves_a_batch_with_one_event_each(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    ids = [(await submit(db, w.p.alice, spec())).job.id for _ in range(3)]
    for job_id in ids:
        await move(db, job_id, S.SCHEDULED)
    async with db.write() as session:
        batch = list((await session.scalars(select(Job).where(Job.id.in_(ids)))).all())
        events = await transition_many(session, batch, S.STARTING, actor=None, reason="launch")
    assert len(events) == 3
    async with db.read() as session:
        rows = (await session.scalars(select(Job).where(Job.id.in_(ids)))).all()
        last = (
            await session.scalars(select(JobEvent).where(JobEvent.job_id.in_(ids), JobEvent.to_status == "starting"))
        ).all()
    assert {r.status for r in rows} == {"starting"}
    assert sorted(e.job_id for e in last) == sorted(ids)
    assert {(e.from_status, e.reason) for e in last} == {("scheduled", "launch")}


async def test_transition_many_writes_nothing_when_one_job_changed(db: Database, tmp_path: Path) -> None:
    w = await job_world(db, tmp_path)
    ids = [(await submit(db, w.p.alice, spec())).job.id for _ in range(3)]
    for job_id in ids:
        await move(db, job_id, S.SCHEDULED)
    before = await counts(db)

    async def behind_its_back() -> None:
        async with db.write() as session:
            batch = list((await session.scalars(select(Job).where(Job.id.in_(ids)))).all())
            # A user's stop lands on one job of the batch after the batch was read.
            await session.execute(
                update(Job)
                .where(Job.id == ids[1])
                .values(status="stopped")
                .execution_options(synchronize_session=False)
            )
            await transition_many(session, batch, S.STARTING, actor=None)

    with pytest.raises(InvalidTransition):
        await behind_its_back()
    async with db.read() as session:
        statuses = {r.id: r.status for r in (await session.scalars(select(Job).where(Job.id.in_(ids)))).all()}
    assert statuses == dict.fromkeys(ids, "scheduled")  # rolled back as a whole, the stop included
    assert await counts(db) == before
