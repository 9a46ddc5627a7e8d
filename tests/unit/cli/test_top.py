"""``aicenter top``'s frame: node rows from sampled values, allocation for admins, readable units (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from aicenter.cli.top import JobRow, NodeRow, Top, _nodes, render
from aicenter.client import LatestValue

AT = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)
GIB = 2**30


def _v(name: str, value: float, **labels: str) -> LatestValue:
    return LatestValue(name=name, labels=labels, at=AT, value=value)


def test_sampled_values_become_node_rows_with_their_devices() -> None:
    rows = _nodes(
        [
            _v("node.cpu_utilization", 0.42, node="gpu1"),
            _v("node.memory_used_bytes", 3 * GIB, node="gpu1"),
            _v("node.memory_total_bytes", 16 * GIB, node="gpu1"),
            _v("node.accelerator_telemetry", 1, node="gpu1"),
            _v("accelerator.utilization", 0.5, node="gpu1", device="1", type="nvidia-h100"),
            _v("accelerator.utilization", 0.9, node="gpu1", device="0", type="nvidia-h100"),
            _v("accelerator.memory_used_bytes", 10 * GIB, node="gpu1", device="0", type="nvidia-h100"),
            _v("node.accelerator_telemetry", 0, node="cpu1"),
        ]
    )
    gpu1 = rows["gpu1"]
    assert (gpu1.cpu_utilization, gpu1.memory_used, gpu1.accelerator_telemetry) == (0.42, 3 * GIB, True)
    assert [a[0] for a in gpu1.accelerators] == ["0:nvidia-h100", "1:nvidia-h100"]
    assert gpu1.accelerators[0][1:3] == (0.9, 10 * GIB)
    assert rows["cpu1"].accelerator_telemetry is False


def test_a_frame_has_counts_nodes_devices_and_top_jobs_in_readable_units() -> None:
    gpu1 = NodeRow(
        "gpu1",
        cpu_utilization=0.42,
        memory_used=3 * GIB,
        memory_total=16 * GIB,
        accelerator_telemetry=True,
        accelerators=[("0:nvidia-h100", 0.9, 10 * GIB, 80 * GIB), ("1:nvidia-h100", 0.5, 0, 80 * GIB)],
        cpu_capacity_milli=8000,
        cpu_allocated_milli=2500,
        memory_allocated=4 * GIB,
        accelerators_allocated=1,
        accelerator_count=2,
        state="ready",
    )
    cpu1 = NodeRow("cpu1", cpu_utilization=0.05, memory_used=GIB, memory_total=8 * GIB, accelerator_telemetry=False)
    top = Top(
        AT,
        [cpu1, gpu1],
        {"running": 1, "queued": 2, "failed (24h)": 0},
        [JobRow(7, "train", "running", 1.5, 2 * GIB, 10 * GIB)],
        admin=True,
    )
    frame = render(top)
    assert "jobs: running 1  queued 2  failed (24h) 0" in frame
    gpu_line = next(line for line in frame.splitlines() if line.startswith("gpu1 "))
    for part in ("42%", "2500m/8", "3Gi/16Gi", "4Gi/16Gi", "2 at 70%", "1/2 allocated"):
        assert part in gpu_line
    cpu_line = next(line for line in frame.splitlines() if line.startswith("cpu1 "))
    assert "no accelerator telemetry" in cpu_line
    assert any(line.split()[:4] == ["gpu1", "0:nvidia-h100", "90%", "10Gi/80Gi"] for line in frame.splitlines())
    assert any(line.split() == ["7", "train", "running", "1.50", "2Gi", "10Gi"] for line in frame.splitlines())
    assert "platform admins only" not in frame

    member = render(Top(AT, [cpu1], {"running": 0, "queued": 0, "failed (24h)": 0}, [], admin=False))
    assert "no running jobs" in member
    assert "(allocation columns: platform admins only)" in member
    assert render(Top(AT, [], {}, [], admin=False)).count("no node telemetry yet") == 1
