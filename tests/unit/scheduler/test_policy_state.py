"""Policy documents (good and bad) and the state's bookkeeping."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicenter.core.errors import Conflict, NotFound, ValidationFailed
from aicenter.scheduler import BUILTIN_POLICIES, PolicyConfig, ReplicaPlacement, ReplicaRequest

from .factories import cluster, job, node


@pytest.mark.parametrize("name", sorted(BUILTIN_POLICIES))
def test_builtin_policies_load(name: str) -> None:
    assert PolicyConfig.load(name).name == name


def test_default_policy_is_the_full_stack() -> None:
    p = PolicyConfig.load("default")
    assert (p.queue_order, p.placement, p.fractional_placement, p.backfill) == ("fair-share", "binpack", "fgd", "easy")
    assert p.gang
    assert p.topology
    assert p.preemption
    assert p.cache_affinity


@pytest.mark.parametrize(
    ("doc", "field"),
    [
        ({"queue_order": "lottery"}, "queue_order"),
        ({"las_thresholds": [5, 1]}, "las_thresholds"),
        ({"fgd_task_classes": [{"accelerator_milli": 500, "weight": -1}]}, "fgd_task_classes[0].weight"),
        ({"fgd_task_classes": [{"accelerator_milli": 1500, "weight": 1}]}, "fgd_task_classes[0].accelerator_milli"),
        ({"max_jobs_per_cycle": 0}, "max_jobs_per_cycle"),
        ({"bogus": 1}, "bogus"),
        ({"base": "nope"}, "base"),
        ({"backfill": True}, "backfill"),
    ],
)
def test_bad_documents_name_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationFailed) as e:
        PolicyConfig.load(doc)
    assert e.value.details["field"] == field


def test_unknown_name_and_bad_text() -> None:
    with pytest.raises(ValidationFailed) as e:
        PolicyConfig.load("no-such-policy")
    assert e.value.details["field"] == "policy"
    with pytest.raises(ValidationFailed) as e:
        PolicyConfig.from_text("queue_order: [unclosed")
    assert e.value.details["field"] == "policy"


def test_yaml_and_json_files(tmp_path: Path) -> None:
    y = tmp_path / "p.yaml"
    y.write_text("base: tiresias\nlas_thresholds: [100, 1000]\nplacement: spread\n")
    p = PolicyConfig.load(y)
    assert (p.queue_order, p.las_thresholds, p.placement) == ("las", (100.0, 1000.0), "spread")
    j = tmp_path / "p.json"
    j.write_text(json.dumps({"queue_order": "sjf"}))
    assert PolicyConfig.load(str(j)).queue_order == "sjf"
    j.write_text("{")
    with pytest.raises(ValidationFailed):
        PolicyConfig.load(j)
    with pytest.raises(ValidationFailed):
        PolicyConfig.load(tmp_path / "missing.yaml")


def test_replica_request_validation() -> None:
    with pytest.raises(ValidationFailed) as e:
        ReplicaRequest(1000, 10, accelerators=1, accelerator_milli=500)
    assert e.value.details["field"] == "accelerator_milli"
    with pytest.raises(ValidationFailed):
        ReplicaRequest(-1, 10)
    with pytest.raises(ValidationFailed):
        ReplicaRequest(1, 10, accelerator_milli=1000)


def test_allocate_refuses_oversubscription_and_release_restores() -> None:
    state = cluster(1, gpus=2)
    a = job("a", 2)
    state.allocate(a, [ReplicaPlacement("worker", 0, "n0", (0, 1), 2000)], 0.0)
    with pytest.raises(Conflict):
        state.allocate(job("b", 1), [ReplicaPlacement("worker", 0, "n0", (0,), 1000)], 0.0)
    with pytest.raises(Conflict):
        state.allocate(a, [], 0.0)
    with pytest.raises(NotFound):
        state.allocate(job("c", 1), [ReplicaPlacement("worker", 0, "nx", (0,), 1000)], 0.0)
    rj = state.release("a")
    assert int(state.full_free_all.sum()) == 2
    state.restore(rj)
    assert int(state.full_free_all.sum()) == 0
    with pytest.raises(NotFound):
        state.release("zzz")
    state.check_invariants()


def test_add_and_remove_nodes_keep_running_jobs() -> None:
    state = cluster(2, gpus=2)
    state.allocate(job("a", 1), [ReplicaPlacement("worker", 0, "n1", (0,), 1000)], 0.0)
    state.add_node(node("n9", 4, leaf="l9"))
    assert state.running["a"].placements[0].node == "n1"
    assert int(state.full_free_all.sum()) == 2 + 1 + 4
    with pytest.raises(Conflict):
        state.remove_node("n1")
    with pytest.raises(Conflict):
        state.add_node(node("n9", 1))
    state.remove_node("n0")
    assert "n0" not in state.index
    assert state.usage[("ws", "default")]["accelerators"] == 1
    state.check_invariants()
