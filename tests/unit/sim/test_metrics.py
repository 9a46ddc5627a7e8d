from __future__ import annotations

import numpy as np
import pytest

from aicenter.sim.metrics import (
    JobOutcome,
    Timeline,
    distribution,
    jain_index,
    job_metrics,
    max_min_share,
    normalized_service,
    time_average,
)


def test_distribution_hand_computed() -> None:
    d = distribution([10.0, 20.0, 30.0, 40.0])
    assert d["avg"] == 25.0
    assert d["median"] == 25.0
    # numpy linear interpolation: rank 0.95 * 3 = 2.85 -> 30 + 0.85 * 10
    assert d["p95"] == pytest.approx(38.5)
    assert d["p99"] == pytest.approx(39.7)
    assert distribution([]) == {"avg": None, "median": None, "p95": None, "p99": None}


def test_time_average_of_step_function() -> None:
    # 2 GPUs over [0, 10), 6 over [10, 20), 0 after: the average over [0, 20] is 4, over [5, 15] is 4.
    assert time_average([0, 10, 20], [2, 6, 0], 0, 20) == 4.0
    assert time_average([0, 10, 20], [2, 6, 0], 5, 15) == 4.0
    assert time_average([0, 10, 20], [2, 6, 0], 0, 40) == 2.0
    assert time_average([5], [4], 0, 10) == 2.0  # nothing before the first sample


def test_jain_index() -> None:
    assert jain_index([1, 1, 1, 1]) == 1.0
    assert jain_index([1, 0, 0, 0]) == 0.25
    assert jain_index([1, 2]) == pytest.approx(9 / 10)
    assert jain_index([]) is None


def test_max_min_share_water_fills() -> None:
    share = max_min_share(np.array([[1.0, 5.0, 10.0], [1.0, 1.0, 1.0], [0.0, 8.0, 8.0]]), 9.0)
    np.testing.assert_allclose(share[0], [1.0, 4.0, 4.0])  # level 4: 1 + 4 + 4 = 9
    np.testing.assert_allclose(share[1], [1.0, 1.0, 1.0])  # all demands fit
    np.testing.assert_allclose(share[2], [0.0, 4.5, 4.5])


def test_normalized_service() -> None:
    tl = Timeline()
    # capacity 8; tenant a wants 8, b wants 8: fair is 4 each; a holds 6, b 2 for 10 s, then both idle.
    tl.record(0.0, 8.0, 0, 2, np.array([6.0, 2.0]), np.array([8.0, 8.0]))
    tl.record(10.0, 0.0, 0, 0, np.array([0.0, 0.0]), np.array([0.0, 0.0]))
    service = normalized_service(tl, 8.0, 20.0)
    np.testing.assert_allclose(service, [1.5, 0.5])
    assert jain_index(service) == pytest.approx(4 / (2 * 2.5))


def test_job_metrics_hand_computed() -> None:
    outcomes = [
        JobOutcome("a", "w", submit=0.0, duration=10.0, gpus=1, first_start=0.0, finish=10.0, run_s=10.0),
        JobOutcome(
            "b", "w", submit=5.0, duration=10.0, gpus=1, first_start=10.0, finish=30.0, run_s=15.0, preemptions=1
        ),
        JobOutcome("c", "w", submit=6.0, duration=10.0, gpus=1),
    ]
    m = job_metrics(outcomes)
    assert (m["jobs"], m["finished"], m["unfinished"], m["preemptions"]) == (3, 2, 1, 1)
    assert m["jct_s"]["avg"] == 17.5  # type: ignore[index]
    assert m["queueing_delay_s"]["avg"] == 2.5  # type: ignore[index]
    assert m["pending_time_s"]["avg"] == 5.0  # type: ignore[index]  # (0 + (25 - 15)) / 2
    assert m["makespan_s"] == 30.0
