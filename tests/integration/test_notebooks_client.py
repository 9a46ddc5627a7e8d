"""The notebooks SDK against the real app served by uvicorn. No controllers run, so a notebook stays queued: enough
for create / list / get / update / stop / start (of a stopped one) / delete / train-spec, and for the refusals
that depend on the status (start of a queued notebook, save of one that is not running)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from aicenter.client import ApiError, Client, Notebook
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD

NOTEBOOK_YAML = """\
name: {name}
resources: {{cpu: 500m, memory: 128Mi}}
env: {{EPOCHS: "3"}}
idle_timeout_s: 3600
"""


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    with live_server(tmp_path_factory.mktemp("notebooks-sdk-home")) as url, Client(url) as client:
        client.login("admin", ADMIN_PASSWORD)
        client.create_node("n1", cpu=4, memory="8Gi")
        yield client


def _create(api: Client, name: str) -> Notebook:
    return api.create_notebook(NOTEBOOK_YAML.format(name=name))


def test_create_get_list_by_name(api: Client, tmp_path: Path) -> None:
    nb = _create(api, "sdk-nb")
    assert isinstance(nb, Notebook)
    assert (nb.name, nb.status, nb.username, nb.is_owner) == ("sdk-nb", "queued", "admin", True)
    assert (nb.idle_timeout_s, nb.own_idle_timeout_s) == (3600, 3600)
    assert nb.lab_url == f"/notebooks/{nb.id}/lab"
    assert nb.ssh_host == f"notebook-{nb.id}"
    assert [e.to_status for e in nb.events] == ["pending", "queued"]
    assert [(r.task, r.attempt, r.status) for r in nb.replicas] == [("notebook", 0, "pending")]

    path = tmp_path / "nb.yaml"
    path.write_text(NOTEBOOK_YAML.format(name="from-file"))
    from_file = api.create_notebook(path)
    mapped = api.create_notebook({"name": "mapped", "resources": {"cpu": 1, "memory": "256Mi"}, "idle_timeout_s": 0})
    assert (from_file.name, mapped.name, mapped.idle_timeout_s) == ("from-file", "mapped", 0)

    assert api.get_notebook(nb.id).id == nb.id
    ids = [n.id for n in api.list_notebooks()]
    assert ids[:3] == [mapped.id, from_file.id, nb.id]  # newest first
    page = api.list_notebooks_page(limit=1)
    assert len(page.items) == 1
    assert page.next_cursor
    assert [n.id for n in api.list_notebooks(name="sdk-nb", user="admin")] == [nb.id]
    assert {n.id for n in api.list_notebooks(status=["queued", "running"])} >= {nb.id, mapped.id}
    assert list(api.list_notebooks(status="running")) == []
    assert list(api.list_notebooks(workspace_id=nb.workspace_id, name="no-such")) == []

    by_name = api.notebook_by_name("sdk-nb")
    assert by_name.id == nb.id
    assert by_name.events  # the detail
    assert api.notebook_by_name("sdk-nb", workspace_id=nb.workspace_id).id == nb.id
    with pytest.raises(ApiError) as missing:
        api.notebook_by_name("no-such-notebook")
    assert (missing.value.status, missing.value.code) == (404, "not_found")
    with pytest.raises(ApiError) as not_found:
        api.get_notebook(10**6)
    assert not_found.value.code == "not_found"


def test_create_refusals(api: Client) -> None:
    _create(api, "twice")
    with pytest.raises(ApiError) as again:
        _create(api, "twice")
    assert (again.value.status, again.value.code) == (409, "conflict")
    with pytest.raises(ApiError) as bad_timeout:
        api.create_notebook({"name": "bad", "resources": {"cpu": 1, "memory": "1Gi"}, "idle_timeout_s": 5})
    assert bad_timeout.value.code == "validation_failed"
    assert bad_timeout.value.field == "idle_timeout_s"
    with pytest.raises(ApiError) as bad_memory:
        api.create_notebook({"name": "bad", "resources": {"cpu": 1, "memory": "lots"}})
    assert (bad_memory.value.code, bad_memory.value.field) == ("validation_failed", "resources.memory")
    assert [n.name for n in api.list_notebooks(name="bad")] == []  # nothing written


def test_idle_timeout(api: Client) -> None:
    nb = _create(api, "idle")
    assert api.update_notebook(nb.id, 600).own_idle_timeout_s == 600
    never = api.update_notebook(nb.id, 0)
    assert (never.own_idle_timeout_s, never.idle_timeout_s) == (0, 0)
    default = api.update_notebook(nb.id, None)
    assert default.own_idle_timeout_s is None
    assert default.idle_timeout_s > 0  # the platform's default
    with pytest.raises(ApiError) as bad:
        api.update_notebook(nb.id, 5)
    assert (bad.value.status, bad.value.code) == (422, "validation_failed")
    assert api.get_notebook(nb.id).own_idle_timeout_s is None  # unchanged


def test_stop_start_save_delete(api: Client) -> None:
    nb = _create(api, "lifecycle")
    with pytest.raises(ApiError) as queued_start:
        api.start_notebook(nb.id)
    assert (queued_start.value.status, queued_start.value.code) == (409, "invalid_transition")
    with pytest.raises(ApiError) as queued_save:
        api.save_notebook(nb.id, algorithm="my-code")
    assert (queued_save.value.status, queued_save.value.code) == (409, "invalid_transition")
    with pytest.raises(ApiError) as active_delete:
        api.delete_notebook(nb.id)
    assert active_delete.value.status == 409

    stopped = api.stop_notebook(nb.id)
    assert stopped.status == "stopped"
    with pytest.raises(ApiError) as again:
        api.stop_notebook(nb.id)
    assert (again.value.status, again.value.code) == (409, "invalid_transition")

    started = api.start_notebook(nb.id)
    assert (started.status, started.restart_count) == ("queued", 1)
    assert [r.attempt for r in started.replicas] == [0, 1]

    api.stop_notebook(nb.id)
    api.delete_notebook(nb.id)
    with pytest.raises(ApiError) as gone:
        api.get_notebook(nb.id)
    assert gone.value.code == "not_found"


def test_train_spec(api: Client) -> None:
    nb = _create(api, "trainer")
    spec = api.notebook_train_spec(nb.id)
    assert (spec["kind"], spec["name"]) == ("train", "trainer-train")
    assert spec["env"] == {"EPOCHS": "3"}
    assert spec["tasks"][0]["command"]
    job = api.submit_job(spec)
    assert (job.kind, job.status) == ("train", "queued")
    api.stop_job(job.id)


def test_train_spec_keeps_the_notebooks_workspace(api: Client) -> None:
    """A notebook created in a workspace given by id (not named in its spec) trains in that workspace too, not in
    the caller's default one."""
    other = api.create_workspace("nb-other")  # its creator, a platform admin, is its admin
    nb = api.create_notebook(NOTEBOOK_YAML.format(name="elsewhere"), workspace_id=other.id)
    assert nb.workspace_id == other.id
    spec = api.notebook_train_spec(nb.id)
    assert spec["workspace"] == "nb-other"
    job = api.submit_job(spec)
    assert job.workspace_id == other.id
    api.stop_job(job.id)

    # the same name in two workspaces: a name alone does not pick one
    default = _create(api, "elsewhere")
    assert default.workspace_id != other.id
    with pytest.raises(ApiError) as ambiguous:
        api.notebook_by_name("elsewhere")
    assert (ambiguous.value.status, ambiguous.value.code) == (409, "conflict")
    assert sorted(ambiguous.value.details["notebook_ids"]) == sorted([nb.id, default.id])
    assert api.notebook_by_name("elsewhere", workspace_id=other.id).id == nb.id
    assert api.notebook_by_name("elsewhere", workspace_id=default.workspace_id).id == default.id


def test_a_train_job_is_not_a_notebook(api: Client) -> None:
    job = api.submit_job(
        {"name": "plain", "tasks": [{"resources": {"cpu": 1, "memory": "128Mi"}, "command": "echo hi"}]}
    )
    with pytest.raises(ApiError) as wrong_kind:
        api.get_notebook(job.id)
    assert wrong_kind.value.code == "not_found"
    api.stop_job(job.id)
