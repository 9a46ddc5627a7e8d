"""The pure step from two reads of a node to its usage (``aicenter.core.telemetry``)."""

from __future__ import annotations

import pytest

from aicenter.core.telemetry import AcceleratorReading, NodeCounters, ReplicaCounters, rate, usage


def read(at: float, **changes: object) -> NodeCounters:
    base: dict[str, object] = {
        "cpu_busy_seconds": 100.0,
        "cpu_total_seconds": 400.0,
        "memory_used_bytes": 3 * 2**30,
        "memory_total_bytes": 16 * 2**30,
        "disk_used_bytes": 10**11,
        "disk_total_bytes": 10**12,
        "network_receive_bytes": 1_000_000,
        "network_transmit_bytes": 2_000_000,
    }
    return NodeCounters(node="n1", at=at, **{**base, **changes})  # type: ignore[arg-type]


def test_rate_is_the_counter_delta_per_second_and_none_when_it_fell_or_no_time_passed() -> None:
    assert rate(10.0, 40.0, 15.0) == 2.0
    assert rate(40.0, 10.0, 15.0) is None  # a reset counter: no spike, no negative
    assert rate(10.0, 40.0, 0.0) is None
    assert rate(None, 40.0, 15.0) is None
    assert rate(10.0, None, 15.0) is None


def test_first_read_has_levels_and_no_rates() -> None:
    first = usage(None, read(1000.0, replicas=(ReplicaCounters("/r/0", 5.0, 2**20),)))
    assert first.cpu_utilization is None
    assert first.network_receive_bytes_per_second is None
    assert (first.memory_used_bytes, first.memory_total_bytes) == (3 * 2**30, 16 * 2**30)
    assert (first.disk_used_bytes, first.disk_total_bytes) == (10**11, 10**12)
    assert [(r.run_dir, r.cpu_cores, r.memory_bytes) for r in first.replicas] == [("/r/0", None, 2**20)]


def test_second_read_gives_cpu_utilization_network_rates_and_replica_cores() -> None:
    before = read(1000.0, replicas=(ReplicaCounters("/r/0", 5.0, 2**20), ReplicaCounters("/r/gone", 1.0, 1)))
    after = read(
        1015.0,
        cpu_busy_seconds=130.0,  # 30 busy of 60 CPU-seconds (4 CPUs x 15 s)
        cpu_total_seconds=460.0,
        network_receive_bytes=1_000_000 + 15 * 1000,
        network_transmit_bytes=2_000_000 + 15 * 500,
        replicas=(ReplicaCounters("/r/0", 5.0 + 22.5, 2**21), ReplicaCounters("/r/new", 3.0, 7)),
    )
    used = usage(before, after)
    assert used.cpu_utilization == pytest.approx(0.5)
    assert used.network_receive_bytes_per_second == pytest.approx(1000.0)
    assert used.network_transmit_bytes_per_second == pytest.approx(500.0)
    by_dir = {r.run_dir: r for r in used.replicas}
    assert by_dir["/r/0"].cpu_cores == pytest.approx(1.5)  # 22.5 CPU-seconds in 15 s
    assert by_dir["/r/0"].memory_bytes == 2**21
    assert by_dir["/r/new"].cpu_cores is None  # new since the last read: no rate yet
    assert "/r/gone" not in by_dir


def test_a_reset_network_counter_or_a_shrunk_process_tree_gives_no_rate() -> None:
    before = read(0.0, replicas=(ReplicaCounters("/r/0", 50.0, 1),))
    after = read(15.0, network_receive_bytes=10, replicas=(ReplicaCounters("/r/0", 20.0, 1),))
    used = usage(before, after)
    assert used.network_receive_bytes_per_second is None
    assert used.replicas[0].cpu_cores is None


def test_a_replica_read_at_its_own_time_is_rated_over_its_own_interval() -> None:
    # Usage files written by the launcher every 15 s, read by the sampler whenever it ticks.
    before = read(100.0, replicas=(ReplicaCounters("/r/0", 10.0, 1, at=90.0),))
    after = read(115.0, replicas=(ReplicaCounters("/r/0", 40.0, 1, at=110.0),))
    assert usage(before, after).replicas[0].cpu_cores == pytest.approx(1.5)


def test_a_direct_utilization_wins_and_is_clamped() -> None:
    direct = NodeCounters(node="s1", at=1.0, cpu_utilization=1.7)
    assert usage(None, direct).cpu_utilization == 1.0


def test_accelerators_and_the_telemetry_flag_pass_through() -> None:
    gpu = AcceleratorReading(0, "nvidia-h100", 0.5, 10, 80, 61.0, 300.0)
    used = usage(None, NodeCounters(node="g", at=1.0, accelerators=(gpu,), accelerator_telemetry=True))
    assert used.accelerators == (gpu,)
    assert used.accelerator_telemetry
    assert not usage(None, NodeCounters(node="c", at=1.0)).accelerator_telemetry
