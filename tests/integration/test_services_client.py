"""The services SDK against the real app served by uvicorn. No controllers and no model server run, so a service
stays ``deploying`` with its replica queued: enough for deploy / list / get by name / scale / keys / load / logs
(none yet) / stop / start, and for the refusals that depend on the state (a second rollout, promote with
nothing rolling out, a bad traffic split, delete while replicas stop). Plus the v2 tensor conversions."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from aicenter.client import ApiError, Client, CreatedServiceKey, Service
from aicenter.client.inference import v2_outputs, v2_tensor
from tests.support.servers import live_server
from tests.support.settings import ADMIN_PASSWORD


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Client]:
    home = tmp_path_factory.mktemp("services-sdk-home")
    with live_server(home) as url, Client(url) as client:
        client.login("admin", ADMIN_PASSWORD)
        client.create_node("n1", cpu=4, memory="8Gi")
        model = tmp_path_factory.mktemp("model")
        (model / "model.onnx").write_bytes(b"not loaded here")
        client.push("model", model, name="sdk-iris")
        client.push("model", model, name="sdk-iris")
        yield client


def test_deploy_get_by_name_scale_keys_stop_start(api: Client) -> None:
    svc = api.deploy_service(
        {"name": "sdk-iris", "model": "sdk-iris:1", "resources": {"cpu": 1, "memory": "256Mi"}, "env": {"A": "1"}}
    )
    assert isinstance(svc, Service)
    assert (svc.status, svc.model, svc.runtime, svc.replicas_total) == ("deploying", "sdk-iris:1", "onnx", 1)
    assert [(r.number, r.state, r.target_traffic) for r in svc.revisions] == [(1, "starting", 100)]
    assert svc.url.endswith("/sdk-iris")

    by_name = api.get_service("sdk-iris")
    assert by_name.id == svc.id
    assert by_name.revisions[0].spec["env"] == {"A": "1"}
    assert [s.id for s in api.list_services(name="sdk-iris")] == [svc.id]
    assert list(api.list_services(status="stopped")) == []
    with pytest.raises(ApiError) as missing:
        api.get_service("no-such")
    assert missing.value.code == "not_found"

    with pytest.raises(ApiError) as busy:  # revision 1 is still starting: one rollout at a time
        api.update_service(svc.id, {"model": "sdk-iris:2", "rollout": {"strategy": "canary", "canary_percent": 10}})
    assert busy.value.code == "conflict"
    with pytest.raises(ApiError) as nothing:
        api.promote_service(svc)
    assert nothing.value.code == "conflict"
    with pytest.raises(ApiError) as split:
        api.set_traffic(svc, {1: 60, 2: 30})
    assert split.value.code == "validation_failed"

    scaled = api.scale_service("sdk-iris", min_replicas=0, max_replicas=3, target_concurrency=4)
    spec = scaled.revisions[0].spec
    assert (spec["min_replicas"], spec["max_replicas"], spec["target_concurrency"]) == (0, 3, 4)

    created = api.create_service_key(svc, "app")
    assert isinstance(created, CreatedServiceKey)
    assert created.key.startswith(created.prefix)
    assert [(k.id, k.name) for k in api.list_service_keys(svc)] == [(created.id, "app")]
    api.revoke_service_key(svc, created.id)
    assert api.list_service_keys(svc) == []

    assert api.service_load(svc, minutes=5) == []
    assert list(api.service_logs(svc)) == []  # the replica has not launched: no log yet
    with pytest.raises(ApiError) as other:
        list(api.service_logs(svc, job_id=10**6))
    assert other.value.code == "not_found"

    assert api.stop_service(svc).status == "stopped"
    assert api.start_service("sdk-iris").status != "stopped"
    api.stop_service(svc)
    events = api.service_events("sdk-iris")
    assert [e.kind for e in events] == ["service.stopped", "service.started", "service.stopped", "service.deployed"]
    assert {e.service_id for e in events} == {svc.id}
    first = api.service_events_page(svc, limit=3)
    assert len(first.items) == 3
    assert [e.id for e in api.service_events_page(svc, cursor=first.next_cursor).items] == [events[-1].id]
    with pytest.raises(ApiError) as stopping:
        api.delete_service(svc)
    assert stopping.value.code == "conflict"


def test_bad_deploy_names_the_field(api: Client) -> None:
    with pytest.raises(ApiError) as bad:
        api.deploy_service({"name": "x", "model": "sdk-iris:1", "runtime": "nope"})
    assert bad.value.code == "validation_failed"
    assert "runtime" in str(bad.value.details.get("field"))
    with pytest.raises(ApiError) as unknown:
        api.deploy_service({"name": "x", "model": "nosuch:1", "resources": {"cpu": 1, "memory": "256Mi"}})
    assert unknown.value.status in (404, 422)


def test_infer_without_a_ready_replica_is_an_api_error(api: Client) -> None:
    svc = api.deploy_service({"name": "sdk-infer", "model": "sdk-iris:1", "resources": {"cpu": 1, "memory": "256Mi"}})
    with pytest.raises(ApiError) as refused:
        api.infer(svc, {"input": np.zeros((1, 4), dtype=np.float32)})
    assert refused.value.status >= 400
    assert refused.value.message


def test_v2_tensors_from_numpy_and_lists_and_back() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert v2_tensor("x", array) == {"name": "x", "shape": [2, 3], "datatype": "FP32", "data": [0, 1, 2, 3, 4, 5]}
    assert v2_tensor("i", [[1, 2], [3, 4]])["datatype"] == "INT64"
    assert v2_tensor("f", [[1, 2.5]]) == {"name": "f", "shape": [1, 2], "datatype": "FP32", "data": [1, 2.5]}
    assert v2_tensor("b", [True, False])["datatype"] == "BOOL"
    assert v2_tensor("s", ["a"])["datatype"] == "BYTES"
    answer = {"outputs": [{"name": "y", "shape": [2, 2], "datatype": "INT64", "data": [1, 2, 3, 4]}]}
    out = v2_outputs(answer)
    assert out["y"].dtype == np.int64
    assert out["y"].tolist() == [[1, 2], [3, 4]]
    assert v2_outputs(answer, as_numpy=False) == {"y": [1, 2, 3, 4]}
