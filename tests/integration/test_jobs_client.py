"""The jobs SDK against the real app served by uvicorn (no controllers: jobs stay queued, which is what the
round trip of submit / list / get / events / replicas / stop / resubmit / delete / templates needs)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aicenter.client import ApiError, Client, Job
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD

SPEC_YAML = """\
name: sdk-job
tasks:
  - name: worker
    replicas: 1
    resources: {cpu: 500m, memory: 128Mi}
    command: echo hi
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with live_server(tmp_path_factory.mktemp("jobs-sdk-home")) as url, Client(url) as client:
        client.login("admin", ADMIN_PASSWORD)
        client.create_node("n1", cpu=4, memory="8Gi")
        yield client


def test_submit_get_list_events_replicas(api: Client, tmp_path: Path) -> None:
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(SPEC_YAML)
    job = api.submit_job(spec_file, ["tasks[0].replicas=2", "name=from-file"])
    assert isinstance(job, Job)
    assert (job.name, job.status, job.kind) == ("from-file", "queued", "train")
    assert job.spec["tasks"][0]["replicas"] == 2

    as_text = api.submit_job(SPEC_YAML)
    as_mapping = api.submit_job(
        {"name": "mapped", "tasks": [{"resources": {"cpu": 1, "memory": "1Gi"}, "command": "x"}]}
    )
    assert [as_text.name, as_mapping.name] == ["sdk-job", "mapped"]

    detail = api.get_job(job.id)
    assert [(r.task, r.index, r.attempt, r.status) for r in detail.replicas] == [
        ("worker", 0, 0, "pending"),
        ("worker", 1, 0, "pending"),
    ]
    assert [e.to_status for e in detail.events] == ["pending", "queued"]
    assert [e.to_status for e in api.job_events(job.id)] == ["pending", "queued"]
    assert len(api.job_replicas(job.id)) == 2

    ids = [j.id for j in api.list_jobs()]
    assert ids[:3] == [as_mapping.id, as_text.id, job.id]  # newest first
    page = api.list_jobs_page(limit=1)
    assert len(page.items) == 1
    assert page.next_cursor
    assert {j.id for j in api.list_jobs(status=["queued", "running"])} >= {job.id}
    assert list(api.list_jobs(status="succeeded")) == []
    assert {j.id for j in api.list_jobs(user="admin", kind="train")} >= {job.id}


def test_stop_resubmit_delete(api: Client) -> None:
    job = api.submit_job(SPEC_YAML)
    with pytest.raises(ApiError) as not_launched:
        list(api.job_logs(job.id))
    assert not_launched.value.code == "conflict"  # queued: no output yet

    stopped = api.stop_job(job.id)
    assert (stopped.status, stopped.failure_reason) == ("stopped", "stopped")
    with pytest.raises(ApiError) as again:
        api.stop_job(job.id)
    assert (again.value.status, again.value.code) == (409, "invalid_transition")

    copy = api.resubmit_job(job.id, ["tasks[0].command=echo again"])
    assert copy.id != job.id
    assert copy.spec["tasks"][0]["command"] == "echo again"

    api.delete_job(job.id)
    with pytest.raises(ApiError) as gone:
        api.get_job(job.id)
    assert gone.value.code == "not_found"
    forced = api.force_stop_job(copy.id)
    assert forced.failure_reason == "stopped_by_admin"


def test_bad_spec_names_the_field_and_creates_nothing(api: Client) -> None:
    before = [j.id for j in api.list_jobs()]
    with pytest.raises(ApiError) as bad:
        api.submit_job(SPEC_YAML, ["tasks[0].resources.memory=8Gx"])
    assert (bad.value.status, bad.value.code, bad.value.field) == (
        422,
        "validation_failed",
        "tasks[0].resources.memory",
    )
    with pytest.raises(ApiError) as past:
        api.submit_job(SPEC_YAML, ["tasks[5].replicas=2"])
    assert past.value.field == "--set tasks[5].replicas"
    assert [j.id for j in api.list_jobs()] == before


def test_templates(api: Client) -> None:
    template = api.create_template("nightly", SPEC_YAML, description="every night")
    assert (template.name, template.description) == ("nightly", "every night")
    assert template.id in [t.id for t in api.list_templates()]
    assert api.get_template(template.id).spec["name"] == "sdk-job"
    renamed = api.update_template(template.id, description="weekly")
    assert renamed.description == "weekly"
    job = api.submit_template(template.id, ["name=from-template"])
    assert job.name == "from-template"
    saved = api.save_job_as_template(job.id, "copied")
    assert saved.spec["name"] == "from-template"
    with pytest.raises(ApiError) as duplicate:
        api.create_template("nightly", SPEC_YAML)
    assert duplicate.value.code == "conflict"
    api.delete_template(template.id)
    assert template.id not in [t.id for t in api.list_templates()]
