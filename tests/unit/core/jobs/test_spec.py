"""The job spec: a full example spec, normalization, and every kind of bad input with its exact field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.core.jobs import (
    FailureReason,
    Framework,
    JobKind,
    Priority,
    ResourceRequest,
    parse_job_spec,
    priority_value,
    ref_name,
)

EXAMPLE = """\
kind: train
name: resnet-ddp
workspace: vision
image: pytorch-cpu:1          # catalog image version (a venv image, or "host" for the server's own Python)
algorithm: resnet:3           # code version, materialized read-only at $AICENTER_CODE_DIR
datasets: [cifar-mini:2]      # read-only under $AICENTER_DATA_DIR/<name>
framework: pytorch            # pytorch | tensorflow | paddle | mindspore | mpi | none
tasks:
  - name: worker
    replicas: 2
    resources: {spec: cpu-4}  # or explicit: {cpu: 4, memory: 8Gi, gpu: 1, gpu_type: nvidia-a100, gpu_share: 0.5}
    command: python train.py --epochs 3
priority: normal
retry: {max_restarts: 3, on: [node_lost, error, preempted]}
output_model: resnet          # files in $AICENTER_OUTPUT_DIR become a version of this model on success
"""

GI = 2**30


def base(**changes: Any) -> dict[str, Any]:
    """A valid minimal document; ``changes`` replace top-level keys."""
    doc: dict[str, Any] = {
        "name": "job",
        "tasks": [{"name": "worker", "resources": {"cpu": 1, "memory": "1Gi"}, "command": "python t.py"}],
    }
    doc.update(changes)
    return doc


def task(**changes: Any) -> dict[str, Any]:
    t: dict[str, Any] = {"name": "worker", "resources": {"cpu": 1, "memory": "1Gi"}, "command": "python t.py"}
    t.update(changes)
    return t


def test_example_parses_and_normalizes() -> None:
    spec = parse_job_spec(EXAMPLE)
    assert spec.kind is JobKind.TRAIN
    assert spec.name == "resnet-ddp"
    assert spec.workspace == "vision"
    assert spec.image == "pytorch-cpu:1"
    assert spec.algorithm == "resnet:3"
    assert spec.datasets == ["cifar-mini:2"]
    assert spec.framework is Framework.PYTORCH
    (worker,) = spec.tasks
    assert (worker.name, worker.replicas, worker.command) == ("worker", 2, "python train.py --epochs 3")
    assert worker.resources.spec == "cpu-4"
    assert worker.resources.cpu_milli is None
    assert spec.priority is Priority.NORMAL
    assert spec.priority_value == priority_value(Priority.NORMAL) == 20
    # "on:" is a key here, not YAML 1.1's boolean true.
    assert spec.retry.max_restarts == 3
    assert spec.retry.on == [FailureReason.NODE_LOST, FailureReason.ERROR, FailureReason.PREEMPTED]
    assert spec.output_model == "resnet"
    assert spec.replica_count == 2
    assert [(t.name, i) for t, i in spec.ranks()] == [("worker", 0), ("worker", 1)]
    normalized = spec.normalized()
    assert normalized["tasks"][0]["resources"] == {"spec": "cpu-4", "gpu": 0}
    assert parse_job_spec(normalized) == spec
    assert parse_job_spec(json.dumps(normalized)) == spec  # JSON text is YAML too


def test_explicit_resources_normalize_to_milli_and_bytes() -> None:
    res = {"cpu": "500m", "memory": "8Gi", "gpu": 1, "gpu_type": "nvidia-a100", "gpu_share": 0.5}
    spec = parse_job_spec(base(tasks=[task(resources=res)]))
    r = spec.tasks[0].resources
    assert (r.cpu_milli, r.memory_bytes, r.gpu, r.gpu_type, r.gpu_share) == (500, 8 * GI, 1, "nvidia-a100", 0.5)
    assert r.accelerator_milli == 500
    assert r.memory_mib == 8192
    # The JSON form uses the input keys, so it parses back and overrides of "cpu" replace it.
    assert spec.normalized()["tasks"][0]["resources"] == {
        "cpu": "500m",
        "memory": 8 * GI,
        "gpu": 1,
        "gpu_type": "nvidia-a100",
        "gpu_share": 0.5,
    }


def test_defaults() -> None:
    spec = parse_job_spec({"name": "j", "tasks": [{"resources": {"spec": "cpu-1"}, "command": "true"}]})
    assert spec.kind is JobKind.TRAIN
    assert spec.image == "host"
    assert spec.framework is Framework.NONE
    assert spec.tasks[0].name == "worker"
    assert spec.tasks[0].replicas == 1
    assert spec.retry.max_restarts == 0
    assert spec.retry.on == [FailureReason.NODE_LOST, FailureReason.PREEMPTED]
    assert spec.priority is Priority.NORMAL


def test_env_values_become_text_and_task_env_wins() -> None:
    spec = parse_job_spec(
        base(
            env={"EPOCHS": 3, "DEBUG": True, "LR": 0.1, "SHARED": "job"},
            tasks=[task(env={"SHARED": "task"})],
        )
    )
    assert spec.env == {"EPOCHS": "3", "DEBUG": "true", "LR": "0.1", "SHARED": "job"}
    assert spec.env_for(spec.tasks[0]) == {"EPOCHS": "3", "DEBUG": "true", "LR": "0.1", "SHARED": "task"}


def test_command_as_argument_list_is_quoted_into_one_line() -> None:
    spec = parse_job_spec(base(tasks=[task(command=["python", "-c", "print('hi there')"])]))
    assert spec.tasks[0].command == "python -c 'print('\"'\"'hi there'\"'\"')'"


@pytest.mark.parametrize(
    ("framework", "tasks"),
    [
        ("mpi", [task(name="launcher"), task(name="worker", replicas=4)]),
        ("tensorflow", [task(name="chief"), task(name="worker", replicas=2), task(name="ps", replicas=2)]),
        ("pytorch", [task(name="master"), task(name="worker", replicas=3)]),
        ("paddle", [task(name="trainer", replicas=2)]),
        ("mindspore", [task(name="worker", replicas=2)]),
    ],
)
def test_framework_layouts_that_are_allowed(framework: str, tasks: list[dict[str, Any]]) -> None:
    assert parse_job_spec(base(framework=framework, tasks=tasks)).framework == framework


def test_resource_request_built_by_field_name() -> None:
    """Code (the jobs service resolving a spec) builds requests by field name; that is accepted too."""
    r = ResourceRequest(cpu_milli=2000, memory_bytes=GI)
    assert (r.cpu_milli, r.memory_bytes) == (2000, GI)


def test_ref_name() -> None:
    assert ref_name("alice/resnet:3") == "resnet"
    assert ref_name("preset/cifar") == "cifar"
    assert ref_name("#42") is None
    assert ref_name("bad@ref") is None


def _with(path: list[str | int], value: Any, doc: dict[str, Any] | None = None) -> dict[str, Any]:
    doc = copy.deepcopy(doc or base())
    node: Any = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value
    return doc


def _without(path: list[str | int]) -> dict[str, Any]:
    doc = base()
    node: Any = doc
    for step in path[:-1]:
        node = node[step]
    del node[path[-1]]
    return doc


BAD: list[tuple[str, Any, str, str | None]] = [
    # (case, document, field, message)
    (
        "bad memory quantity",
        _with(["tasks", 0, "resources", "memory"], "8Gx"),
        "tasks[0].resources.memory",
        '"8Gx" is not a quantity (examples: 512Mi, 16Gi, 1T)',
    ),
    (
        "bad cpu quantity",
        _with(["tasks", 0, "resources", "cpu"], "two"),
        "tasks[0].resources.cpu",
        '"two" is not a CPU quantity (examples: 500m, 2, 0.5)',
    ),
    ("zero cpu", _with(["tasks", 0, "resources", "cpu"], 0), "tasks[0].resources.cpu", "must be greater than 0"),
    (
        "memory without a unit",
        _with(["tasks", 0, "resources", "memory"], 8),
        "tasks[0].resources.memory",
        "8 bytes is less than 1Mi; write a unit, e.g. 8Gi",
    ),
    (
        "memory with a unit, too small",
        _with(["tasks", 0, "resources", "memory"], "100K"),
        "tasks[0].resources.memory",
        "100000 bytes is less than 1Mi",
    ),
    ("missing command", _without(["tasks", 0, "command"]), "tasks[0].command", "is required"),
    ("empty command", _with(["tasks", 0, "command"], "   "), "tasks[0].command", "must not be empty"),
    (
        "command of the wrong type",
        _with(["tasks", 0, "command"], {"run": 1}),
        "tasks[0].command",
        'must be a string (got {"run": 1})',
    ),
    (
        "duplicate task",
        base(tasks=[task(), task()]),
        "tasks[1].name",
        'duplicate task name "worker" (also tasks[0])',
    ),
    (
        "unknown field with a suggestion",
        _with(["tasks", 0, "replica"], 2),
        "tasks[0].replica",
        'unknown field "replica" (did you mean "replicas"?)',
    ),
    (
        "unknown top-level field",
        base(nmae="x"),
        "nmae",
        'unknown field "nmae" (did you mean "name"?)',
    ),
    (
        "unknown field without a close match lists the known ones",
        base(retry={"attempts": 3}),
        "retry.attempts",
        'unknown field "attempts" (known fields: max_restarts, on)',
    ),
    (
        "unknown resource key suggests the input name",
        _with(["tasks", 0, "resources", "cpus"], 2),
        "tasks[0].resources.cpus",
        'unknown field "cpus" (did you mean "cpu"?)',
    ),
    (
        "bad kind",
        base(kind="sweep"),
        "kind",
        '"sweep" is not one of train, notebook, trial, service',
    ),
    (
        "bad framework",
        base(framework="jax"),
        "framework",
        '"jax" is not one of pytorch, tensorflow, paddle, mindspore, mpi, none',
    ),
    (
        "mpi without launcher",
        base(framework="mpi", tasks=[task(replicas=2)]),
        "tasks",
        'an mpi job needs a task named "launcher" (1 replica, runs mpirun) and worker tasks',
    ),
    (
        "mpi launcher with 2 replicas",
        base(framework="mpi", tasks=[task(name="launcher", replicas=2), task()]),
        "tasks[0].replicas",
        "the mpi launcher runs as 1 replica",
    ),
    (
        "mpi launcher alone",
        base(framework="mpi", tasks=[task(name="launcher")]),
        "tasks",
        'an mpi job needs worker tasks besides the "launcher"',
    ),
    (
        "tensorflow task name",
        base(framework="tensorflow", tasks=[task(name="trainer")]),
        "tasks[0].name",
        '"trainer" is not a tensorflow task; use chief, worker, ps, evaluator',
    ),
    (
        "tensorflow chief with 2 replicas",
        base(framework="tensorflow", tasks=[task(name="chief", replicas=2)]),
        "tasks[0].replicas",
        'a tensorflow "chief" runs as 1 replica',
    ),
    (
        "pytorch master not first",
        base(framework="pytorch", tasks=[task(), task(name="master")]),
        "tasks[1]",
        'a pytorch "master" task is the first task, with 1 replica (it is rank 0)',
    ),
    ("replicas 0", _with(["tasks", 0, "replicas"], 0), "tasks[0].replicas", "must be at least 1"),
    ("replicas too many", _with(["tasks", 0, "replicas"], 5000), "tasks[0].replicas", "must be at most 1024"),
    (
        "replicas not a number",
        _with(["tasks", 0, "replicas"], "two"),
        "tasks[0].replicas",
        'must be a whole number (got "two")',
    ),
    (
        "replicas a boolean",
        _with(["tasks", 0, "replicas"], True),
        "tasks[0].replicas",
        "must be a whole number (got true)",
    ),
    (
        "gpu_share without gpu",
        _with(["tasks", 0, "resources", "gpu_share"], 0.5),
        "tasks[0].resources.gpu_share",
        "needs gpu: 1 (a share is a fraction of one device)",
    ),
    (
        "gpu_share out of range",
        _with(["tasks", 0, "resources"], {"cpu": 1, "memory": "1Gi", "gpu": 1, "gpu_share": 1.5}),
        "tasks[0].resources.gpu_share",
        "must be greater than 0 and less than 1, e.g. 0.25 (got 1.5)",
    ),
    (
        "gpu_share too fine",
        _with(["tasks", 0, "resources"], {"cpu": 1, "memory": "1Gi", "gpu": 1, "gpu_share": 0.0001}),
        "tasks[0].resources.gpu_share",
        "is finer than the thousandths of a device the scheduler counts",
    ),
    (
        "gpu_type without gpu",
        _with(["tasks", 0, "resources", "gpu_type"], "nvidia-a100"),
        "tasks[0].resources.gpu_type",
        "needs gpu: 1 or more",
    ),
    ("negative gpu", _with(["tasks", 0, "resources", "gpu"], -1), "tasks[0].resources.gpu", "must be at least 0"),
    (
        "spec and cpu both",
        _with(["tasks", 0, "resources"], {"spec": "cpu-4", "cpu": 2}),
        "tasks[0].resources.cpu",
        "give either spec or explicit amounts (cpu, memory, gpu), not both",
    ),
    (
        "cpu without memory",
        _with(["tasks", 0, "resources"], {"cpu": 2}),
        "tasks[0].resources.memory",
        "is required (or give spec: the name of a resource spec)",
    ),
    (
        "cpu and cpu_milli both",
        _with(["tasks", 0, "resources"], {"cpu": 2, "cpu_milli": 2000, "memory": "1Gi"}),
        "tasks[0].resources.cpu",
        "give cpu or cpu_milli, not both",
    ),
    (
        "bad spec name",
        _with(["tasks", 0, "resources"], {"spec": "CPU 4"}),
        "tasks[0].resources.spec",
        '"CPU 4" is not a valid name: use lower-case letters, digits, ".", "_" and "-", '
        "starting and ending with a letter or digit",
    ),
    (
        "resources not a mapping",
        _with(["tasks", 0, "resources"], "cpu-4"),
        "tasks[0].resources",
        'must be a mapping of keys to values (got "cpu-4")',
    ),
    ("missing resources", _without(["tasks", 0, "resources"]), "tasks[0].resources", "is required"),
    (
        "bad retry reason",
        base(retry={"on": ["crash"]}),
        "retry.on[0]",
        '"crash" is not one of error, oom, node_lost, preempted, launch_failed',
    ),
    (
        "stopped is never retried",
        base(retry={"on": ["error", "stopped"]}),
        "retry.on[1]",
        '"stopped" never restarts a job; allowed: error, oom, node_lost, preempted, launch_failed',
    ),
    ("retry budget too large", base(retry={"max_restarts": 101}), "retry.max_restarts", "must be at most 100"),
    (
        "bad priority",
        base(priority="critical"),
        "priority",
        '"critical" is not one of low, normal, high, urgent',
    ),
    ("numeric priority", base(priority=5), "priority", "5 is not one of low, normal, high, urgent"),
    ("missing name", _without(["name"]), "name", "is required"),
    ("numeric name", base(name=2024), "name", 'must be a string (got 2024; quote it: "2024")'),
    ("no tasks", base(tasks=[]), "tasks", "must have at least 1 item"),
    ("too many tasks", base(tasks=[task(name=f"t{i}") for i in range(17)]), "tasks", "has 17 items; the limit is 16"),
    ("tasks not a list", base(tasks={"name": "worker"}), "tasks", 'must be a list (got {"name": "worker"})'),
    (
        "bad image reference",
        base(image="pytorch@1"),
        "image",
        '"pytorch@1" is not a catalog reference (examples: resnet:3, resnet, alice/resnet:3, preset/resnet:3, #42)',
    ),
    (
        "bad dataset reference",
        base(datasets=["cifar:1", "cifar:x"]),
        "datasets[1]",
        '"cifar:x" is not a catalog reference (examples: resnet:3, resnet, alice/resnet:3, preset/resnet:3, #42)',
    ),
    (
        "same dataset twice",
        base(datasets=["cifar:1", "alice/cifar:2"]),
        "datasets[1]",
        'dataset "cifar" is already mounted by datasets[0]',
    ),
    (
        "reserved env name",
        base(env={"AICENTER_JOB_ID": "1"}),
        "env.AICENTER_JOB_ID",
        "names starting with AICENTER_ are set by aicenter",
    ),
    (
        "bad env name",
        _with(["tasks", 0, "env"], {"MY VAR": "1"}),
        "tasks[0].env.MY VAR",
        '"MY VAR" is not a variable name (letters, digits and _, not starting with a digit)',
    ),
    ("env value a list", base(env={"X": [1]}), "env.X", "must be a string, a number or true/false (got [1])"),
    ("bad output model", base(output_model="Res Net"), "output_model", None),
]


@pytest.mark.parametrize(("doc", "field", "message"), [c[1:] for c in BAD], ids=[c[0] for c in BAD])
def test_bad_spec_names_field_and_says_why(doc: Any, field: str, message: str | None) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec(doc)
    err = info.value
    assert err.code == "validation_failed"
    assert err.details["field"] == field
    if message is not None:
        assert err.message == f"{field}: {message}"
    assert err.details["errors"][0] == {"field": field, "message": err.message.removeprefix(f"{field}: ")}


def test_every_problem_is_listed_in_details() -> None:
    doc = base(name="Bad Name", priority="critical", tasks=[task(replicas=0)])
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec(doc)
    fields = [e["field"] for e in info.value.details["errors"]]
    assert fields == ["name", "tasks[0].replicas", "priority"]


def test_input_document_is_not_modified() -> None:
    doc = base()
    before = copy.deepcopy(doc)
    parse_job_spec(doc)
    assert doc == before


@pytest.mark.parametrize(
    ("text", "message", "line", "column"),
    [
        (
            "name: x\ntasks:\n  - name: a\n   command: b\n",
            "the job spec is not valid YAML: expected <block end>, but found '<block mapping start>' "
            "(line 4, column 4)",
            4,
            4,
        ),
        ("name: x\nname: y\n", 'the job spec is not valid YAML: key "name" is written twice (line 2, column 1)', 2, 1),
        (
            "name: [x\n",
            "the job spec is not valid YAML: expected ',' or ']', but got '<stream end>' (line 2, column 1)",
            2,
            1,
        ),
    ],
)
def test_yaml_errors_say_line_and_column(text: str, message: str, line: int, column: int) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec(text)
    assert info.value.message == message
    assert (info.value.details["line"], info.value.details["column"]) == (line, column)
    assert "field" not in info.value.details


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "the job spec is empty"),
        ("# only a comment\n", "the job spec is empty"),
        ("- a\n- b\n", 'the job spec must be a mapping of fields (name: ..., tasks: ...), got ["a", "b"]'),
    ],
)
def test_documents_that_are_not_specs(text: str, message: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec(text)
    assert info.value.message == message


def test_yaml_merge_keys_may_override_what_they_merge() -> None:
    text = """\
name: x
tasks:
  - &w {name: a, resources: {cpu: 1, memory: 1Gi}, command: run}
  - <<: *w
    name: b
"""
    spec = parse_job_spec(text)
    assert [t.name for t in spec.tasks] == ["a", "b"]


def test_yaml_bomb_is_refused() -> None:
    levels = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    levels += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 7)]
    with pytest.raises(ValidationFailed) as info:
        parse_job_spec("\n".join(levels) + "\n")
    assert info.value.message == "the job spec holds more than 100000 values once its anchors are expanded"


def test_yes_no_on_off_are_text_in_values() -> None:
    spec = parse_job_spec(base(tasks=[task(command="yes")]))
    assert spec.tasks[0].command == "yes"
    spec = parse_job_spec("name: x\ntasks: [{resources: {spec: s}, command: no}]\n")
    assert spec.tasks[0].command == "no"
