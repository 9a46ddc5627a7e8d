from __future__ import annotations

import json
from pathlib import Path

import pytest

from aicenter.core.errors import ValidationFailed
from aicenter.sim.traces import (
    detect_format,
    load_generic,
    load_openb_nodes,
    load_openb_pods,
    load_philly,
    load_trace,
    parse_time,
    split_replicas,
)

PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("gpus", "shape"), [(1, (1, 1)), (8, (1, 8)), (12, (2, 6)), (16, (2, 8)), (24, (3, 8)), (128, (16, 8))]
)
def test_split_replicas(gpus: int, shape: tuple[int, int]) -> None:
    assert split_replicas(gpus, 8) == shape


def test_philly_sorts_filters_and_splits(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly.csv",
        PHILLY_HEADER
        + "2017-10-02 00:00:10,100.0,16,1600.0,aa\n"
        + "2017-09-30 23:59:59,5.0,1,5.0,bb\n"
        + "2017-10-01 00:00:00,60.0,2,120.0,bb\n"
        + "2017-11-01 00:00:00,60.0,1,60.0,aa\n\n",
    )
    trace = load_philly(path, start=parse_time("2017-10-01"), end=parse_time("2017-11-01"))
    assert [j.id for j in trace.jobs] == ["philly-4", "philly-2"]
    first, second = trace.jobs
    assert (first.submit_time, first.replicas, first.gpus, first.workspace) == (0.0, 1, 2, "bb")
    assert (second.submit_time, second.replicas, second.gpus, second.duration) == (86410.0, 2, 8, 100.0)
    assert second.total_gpus == 16
    assert trace.window_s == (0.0, 31 * 86400.0)
    assert trace.origin is not None
    assert trace.origin.isoformat() == "2017-10-01T00:00:00+00:00"


@pytest.mark.parametrize(
    ("row", "line", "column"),
    [
        ("2017-13-01 00:00:00,60.0,1,60.0,aa", 3, "timestamp"),
        ("2017-10-01 00:00:00,abc,1,60.0,aa", 3, "duration"),
        ("2017-10-01 00:00:00,60.0,1.5,60.0,aa", 3, "num_gpus"),
        ("2017-10-01 00:00:00,60.0,0,60.0,aa", 3, "num_gpus"),
        ("2017-10-01 00:00:00,-1,1,60.0,aa", 3, "duration"),
        ("2017-10-01 00:00:00,60.0,1,60.0,", 3, "cluster"),
    ],
)
def test_philly_malformed_names_file_line_column(tmp_path: Path, row: str, line: int, column: str) -> None:
    path = write(tmp_path, "philly.csv", PHILLY_HEADER + "2017-10-01 00:00:00,60.0,1,60.0,aa\n" + row + "\n")
    with pytest.raises(ValidationFailed) as err:
        load_philly(path)
    assert err.value.message.startswith(f"philly.csv:{line}: column {column}:")
    assert err.value.details == {"file": str(path), "line": line, "column": column}


def test_philly_short_row_and_missing_column(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match=r"philly.csv:2: expected 5 fields, found 3"):
        load_philly(write(tmp_path, "philly.csv", PHILLY_HEADER + "2017-10-01,1,1\n"))
    with pytest.raises(ValidationFailed, match=r"philly.csv:1: column cluster: missing column"):
        load_philly(write(tmp_path, "philly.csv", "timestamp,duration,num_gpus\n"))


def test_missing_file_is_a_validation_error(tmp_path: Path) -> None:
    with pytest.raises(ValidationFailed, match="no such file"):
        load_trace(tmp_path / "nope.csv", fmt="philly")


def test_philly_slice(philly_slice: Path) -> None:
    trace = load_trace(philly_slice)
    assert trace.meta["format"] == "philly"
    assert len(trace.jobs) == 300
    assert trace.jobs[0].submit_time == 0.0
    assert all(a.submit_time <= b.submit_time for a, b in zip(trace.jobs, trace.jobs[1:], strict=False))
    assert all(j.gpus * j.replicas >= 1 and j.gpus <= 8 for j in trace.jobs)


OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
)


def test_openb_pods_requests(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        OPENB_HEADER
        + "p0,12000,16384,1,1000,,LS,Running,0,100,10\n"
        + "p1,6000,12288,1,460,V100M16|T4,LS,Running,5,50,\n"
        + "p2,4000,8192,0,0,,BE,Running,6,60,6\n"
        + "p3,32000,65536,8,1000,,LS,Running,7,70,8\n",
    )
    jobs = load_openb_pods(path).jobs
    assert [(j.gpus, j.gpu_milli) for j in jobs] == [(1, 0), (0, 460), (0, 0), (8, 0)]
    assert jobs[1].gpu_types == frozenset({"V100M16", "T4"})
    assert jobs[1].total_gpus == pytest.approx(0.46)
    assert [j.duration for j in jobs] == [90.0, 45.0, 54.0, 62.0]


def test_openb_malformed(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "pods.csv",
        OPENB_HEADER + "p0,12000,16384,1,1000,,LS,Running,0,100,10\n" + "p1,6000,12288,1,0,,LS,Running,5,50,\n",
    )
    with pytest.raises(ValidationFailed, match=r"pods.csv:3: column gpu_milli: must be in 1..1000"):
        load_openb_pods(path)
    path = write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,two,P100\n")
    with pytest.raises(ValidationFailed, match=r"nodes.csv:2: column gpu: expected an integer, got 'two'"):
        load_openb_nodes(path)


def test_openb_slices(openb_pods_slice: Path, openb_nodes_slice: Path) -> None:
    assert detect_format(openb_pods_slice) == "openb"
    trace = load_trace(openb_pods_slice)
    assert len(trace.jobs) == 400
    nodes = load_openb_nodes(openb_nodes_slice)
    assert len(nodes) == 60
    assert nodes[0].gpu_type == "P100"
    assert nodes[0].gpus == 2


def test_generic_csv_and_json_agree(tmp_path: Path) -> None:
    csv_path = write(
        tmp_path,
        "jobs.csv",
        "id,submit_time,duration,workspace,user,replicas,gpus,gpu_milli,gpu_types,priority\n"
        "b,20,100,vision,ann,2,8,,nvidia-a100|nvidia-h100,1\n"
        "a,10,50,nlp,,1,,500,,\n",
    )
    json_path = write(
        tmp_path,
        "jobs.json",
        json.dumps(
            {
                "jobs": [
                    {
                        "id": "b",
                        "submit_time": 20,
                        "duration": 100,
                        "workspace": "vision",
                        "user": "ann",
                        "replicas": 2,
                        "gpus": 8,
                        "gpu_types": ["nvidia-a100", "nvidia-h100"],
                        "priority": 1,
                    },
                    {"id": "a", "submit_time": 10, "duration": 50, "workspace": "nlp", "gpu_milli": 500},
                ]
            }
        ),
    )
    for path in (csv_path, json_path):
        jobs = load_generic(path).jobs
        assert [j.id for j in jobs] == ["a", "b"]
        assert jobs[0].submit_time == 0.0
        assert jobs[1].submit_time == 10.0
        assert (jobs[0].gpu_milli, jobs[0].user) == (500, "nlp")
        assert jobs[1].gpu_types == frozenset({"nvidia-a100", "nvidia-h100"})
        assert jobs[1].priority == 1


def test_generic_calendar_times_and_filter(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "submit_time,duration\n2024-01-01T00:00:00,5\n2024-01-02 00:00:00,5\n")
    trace = load_generic(path, start=parse_time("2024-01-02"))
    assert len(trace.jobs) == 1
    assert trace.jobs[0].submit_time == 0.0
    seconds = write(tmp_path, "s.csv", "submit_time,duration\n0,5\n")
    with pytest.raises(ValidationFailed, match="calendar"):
        load_generic(seconds, start=parse_time("2024-01-02"))


def test_generic_malformed(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.csv", "submit_time,duration,gpus\n0,5,1\n1,5,x\n")
    with pytest.raises(ValidationFailed, match=r"jobs.csv:3: column gpus: expected an integer"):
        load_generic(path)
    path = write(
        tmp_path, "jobs.json", json.dumps([{"submit_time": 0, "duration": 5}, {"submit_time": 1, "duration": 0}])
    )
    with pytest.raises(ValidationFailed, match=r"jobs.json: jobs\[1\].duration: must be >= "):
        load_generic(path)
    path = write(tmp_path, "bad.json", '{"jobs": [\n  {"submit_time": 0,}\n]}')
    with pytest.raises(ValidationFailed, match=r"bad.json:2: invalid JSON"):
        load_generic(path)


@pytest.mark.parametrize("column", ["num_gpus", "gpu"])
def test_generic_refuses_a_column_it_does_not_define(tmp_path: Path, column: str) -> None:
    # Ignored, the column would read as its default: every job simulated with 0 GPUs, without a word.
    path = write(tmp_path, "jobs.csv", f"submit_time,duration,{column}\n0,60,8\n")
    with pytest.raises(ValidationFailed) as exc:
        load_trace(path)
    assert exc.value.message.startswith(f"jobs.csv:1: column {column}: unknown column")
    assert 'did you mean "gpus"' in exc.value.message
    json_path = write(tmp_path, "jobs.json", json.dumps([{"submit_time": 0, "duration": 60, column: 8}]))
    with pytest.raises(ValidationFailed) as exc:
        load_trace(json_path)
    assert f"jobs[0].{column}: unknown column" in exc.value.message


def test_openb_pods_with_only_the_resource_columns(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "openb_pod_list_resources.csv",
        "\n".join(
            [
                "name,cpu_milli,memory_mib,num_gpu,gpu_milli",
                "p-1,8000,16384,1,500",
                "p-2,4000,8192,2,1000",
                "p-3,1000,1024,0,0",
            ]
        )
        + "\n",
    )
    assert detect_format(path) == "openb"
    trace = load_trace(path)
    assert [(j.id, j.gpus, j.gpu_milli) for j in trace.jobs] == [("p-1", 0, 500), ("p-2", 2, 0), ("p-3", 0, 0)]
    assert [j.submit_time for j in trace.jobs] == sorted(j.submit_time for j in trace.jobs)
