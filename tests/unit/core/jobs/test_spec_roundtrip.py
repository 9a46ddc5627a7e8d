"""Any valid spec survives its normalized JSON form: parse(dump(parse(x))) == parse(x)."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aicenter.core.jobs import parse_job_spec

# Any text but NUL, which no process can take in its command line or environment.
texts = st.text(alphabet=st.characters(blacklist_characters="\x00"), max_size=30)
names = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
versions = st.integers(min_value=1, max_value=999)
refs = st.one_of(
    names,
    st.builds(lambda n, v: f"{n}:{v}", names, versions),
    st.builds(lambda n, v: f"preset/{n}:{v}", names, versions),
    st.builds(lambda v: f"#{v}", versions),
)
cpus = st.one_of(
    st.integers(min_value=1, max_value=128),
    st.builds(lambda m: f"{m}m", st.integers(min_value=1, max_value=128_000)),
    st.sampled_from(["0.5", "2", "1.25", 0.5, 2.5]),
)
memories = st.one_of(
    st.builds(lambda n, u: f"{n}{u}", st.integers(min_value=1, max_value=512), st.sampled_from(["Mi", "Gi", "G"])),
    # A spec asks for at least 1Mi; 1M (10^6 bytes) is less, so decimal megabytes start at 2M.
    st.builds(lambda n: f"{n}M", st.integers(min_value=2, max_value=512)),
    st.integers(min_value=2**20, max_value=2**40),
)


@st.composite
def resources(draw: st.DrawFn) -> dict[str, Any]:
    if draw(st.booleans()):
        return {"spec": draw(names)}
    out: dict[str, Any] = {"cpu": draw(cpus), "memory": draw(memories)}
    gpu = draw(st.integers(min_value=0, max_value=8))
    if gpu:
        out["gpu"] = gpu
        if draw(st.booleans()):
            out["gpu_type"] = draw(st.sampled_from(["nvidia-a100", "ascend-910b", "cambricon-mlu370"]))
        if gpu == 1 and draw(st.booleans()):
            out["gpu_share"] = draw(st.floats(min_value=0.001, max_value=0.999, allow_nan=False))
    return out


envs = st.dictionaries(
    st.from_regex(r"[A-Z_][A-Z0-9_]{0,8}", fullmatch=True).filter(lambda k: not k.startswith("AICENTER_")),
    st.one_of(texts, st.integers(), st.booleans()),
    max_size=3,
)


@st.composite
def documents(draw: st.DrawFn) -> dict[str, Any]:
    framework = draw(st.sampled_from(["none", "pytorch", "tensorflow", "paddle", "mindspore", "mpi"]))
    if framework == "tensorflow":
        task_names = draw(st.lists(st.sampled_from(["worker", "ps"]), min_size=1, max_size=2, unique=True))
    elif framework == "mpi":
        task_names = ["launcher", "worker"]
    else:
        task_names = draw(st.lists(names.filter(lambda n: n != "master"), min_size=1, max_size=3, unique=True))
    tasks = [
        {
            "name": name,
            "replicas": 1 if name == "launcher" else draw(st.integers(min_value=1, max_value=8)),
            "resources": draw(resources()),
            "command": draw(texts.filter(str.strip)),
            "env": draw(envs),
        }
        for name in task_names
    ]
    datasets = draw(
        st.lists(st.builds(lambda n, v: f"{n}:{v}", names, versions), max_size=3, unique_by=lambda r: r.split(":")[0])
    )
    doc: dict[str, Any] = {
        "kind": draw(st.sampled_from(["train", "trial"])),
        "name": draw(names),
        "image": draw(st.one_of(st.just("host"), refs)),
        "datasets": datasets,
        "framework": framework,
        "tasks": tasks,
        "priority": draw(st.sampled_from(["low", "normal", "high", "urgent"])),
        "retry": {
            "max_restarts": draw(st.integers(min_value=0, max_value=100)),
            "on": draw(st.lists(st.sampled_from(["error", "oom", "node_lost", "preempted", "launch_failed"]))),
        },
        "env": draw(envs),
    }
    for key, strategy in (("workspace", names), ("algorithm", refs), ("output_model", names)):
        if draw(st.booleans()):
            doc[key] = draw(strategy)
    return doc


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(documents())
def test_normalized_json_parses_back_to_the_same_spec(doc: dict[str, Any]) -> None:
    spec = parse_job_spec(doc)
    text = json.dumps(spec.normalized())
    again = parse_job_spec(json.loads(text))
    assert again == spec
    assert again.normalized() == spec.normalized()
    assert parse_job_spec(text) == spec  # and as JSON text through the YAML reader
