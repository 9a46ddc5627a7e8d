"""The two mechanisms push and pull share: the bounded parallel map and the retry policy."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest
import stamina

from aicenter.client.errors import ApiError, ConnectionFailed
from aicenter.client.transfer import TransferError
from aicenter.client.transfer._parallel import bounded_map
from aicenter.client.transfer._retry import ATTEMPTS, retrying

# -- bounded_map ---------------------------------------------------------------------------------------------------


def test_results_come_back_in_the_order_of_the_items_not_of_completion() -> None:
    # Later items finish first.
    assert bounded_map(lambda n: time.sleep((5 - n) / 200) or n * n, range(5), workers=5) == [0, 1, 4, 9, 16]


def test_no_more_than_workers_calls_run_at_once() -> None:
    lock = threading.Lock()
    running = peak = 0

    def work(_: int) -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        time.sleep(0.01)
        with lock:
            running -= 1

    bounded_map(work, range(30), workers=3)
    assert peak == 3


def test_the_first_error_is_raised_and_no_further_item_starts() -> None:
    taken: list[int] = []

    def items() -> Iterator[int]:
        for n in range(100):
            taken.append(n)
            yield n

    def work(n: int) -> int:
        if n == 2:
            raise ValueError("item 2 failed")
        time.sleep(0.005)
        return n

    with pytest.raises(ValueError, match="item 2 failed"):
        bounded_map(work, items(), workers=2)
    assert len(taken) < 10  # items are taken as workers free up, and none after the failure


def test_on_result_sees_each_item_with_its_result_in_the_calling_thread() -> None:
    seen: list[tuple[str, int, str]] = []
    caller = threading.current_thread().name
    bounded_map(
        len, ["a", "bb", "ccc"], workers=2, on_result=lambda s, n: seen.append((s, n, threading.current_thread().name))
    )
    assert sorted(seen) == [("a", 1, caller), ("bb", 2, caller), ("ccc", 3, caller)]


def test_no_items_no_calls_and_workers_must_be_positive() -> None:
    assert bounded_map(lambda n: n, [], workers=4) == []
    with pytest.raises(ValueError, match="at least 1"):
        bounded_map(lambda n: n, [1], workers=0)


# -- the retry policy ----------------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def no_waits() -> Iterator[None]:
    """stamina's test mode: the policy's attempts as configured (cap), without sleeping between them."""
    with stamina.set_testing(True, attempts=100, cap=True):
        yield


def _failing(errors: list[Exception]) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def call() -> str:
        calls.append(1)
        if errors:
            raise errors.pop(0)
        return "done"

    return calls, call


def test_a_dropped_connection_is_tried_again_until_it_works() -> None:
    calls, call = _failing([ConnectionFailed("http://x", "reset"), ConnectionFailed("http://x", "reset")])
    assert retrying(call) == "done"
    assert len(calls) == 3


def test_a_gateway_error_is_tried_attempts_times_then_raised() -> None:
    calls, call = _failing([ApiError(503, "unavailable", "restarting")] * 10)
    with pytest.raises(ApiError) as info:
        retrying(call)
    assert info.value.status == 503
    assert len(calls) == ATTEMPTS


@pytest.mark.parametrize(
    "error",
    [
        ApiError(400, "validation_failed", "bad manifest"),
        ApiError(500, "internal", "a bug is not transient"),
        TransferError("hash_mismatch", "bad bytes"),
    ],
)
def test_answers_and_local_failures_are_final(error: Exception) -> None:
    calls, call = _failing([error])
    with pytest.raises(type(error)):
        retrying(call)
    assert len(calls) == 1


def test_a_retry_prints_nothing_where_no_logging_is_configured() -> None:
    """The CLI configures no logging: a retried request must not leave a bare log line on its stderr."""
    script = (
        "from aicenter.client.errors import ConnectionFailed\n"
        "from aicenter.client.transfer._retry import retrying\n"
        "errors = [ConnectionFailed('http://x', 'reset')]\n"
        "def call():\n"
        "    if errors:\n"
        "        raise errors.pop()\n"
        "    return 'done'\n"
        "print(retrying(call))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True)
    assert (done.stdout, done.stderr) == ("done\n", "")
