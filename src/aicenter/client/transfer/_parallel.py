"""One bounded parallel map, for everything push and pull do at once (hashes, bundles, parts, archive batches)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import TypeVar

__all__ = ["bounded_map"]

A = TypeVar("A")
R = TypeVar("R")


def bounded_map(
    fn: Callable[[A], R],
    items: Iterable[A],
    *,
    workers: int,
    on_result: Callable[[A, R], None] | None = None,
    name: str = "aicenter-transfer",
) -> list[R]:
    """``[fn(item) for item in items]`` on ``workers`` threads, with at most ``workers`` calls in flight.

    Threads suit this work: hashlib, file I/O and sockets release the GIL. Items are taken from ``items`` only as a
    worker frees up, so a lazy iterable is never read far ahead.

    Args:
        fn: Called once per item, in a worker thread.
        items: The inputs.
        workers: The most calls in flight at once (at least 1).
        on_result: ``on_result(item, result)``, called in the calling thread as each call completes (in completion
            order), e.g. to advance a progress meter.
        name: Prefix of the worker threads' names.

    Returns:
        The results in the order of ``items``.

    Raises:
        The first exception a call raises (the first seen to complete): no further item is started, the calls in
        flight are waited for, and their results are dropped.
    """
    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    results: dict[int, R] = {}
    pending: dict[Future[R], tuple[int, A]] = {}
    todo = iter(enumerate(items))
    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        while True:
            while len(pending) < workers and (task := next(todo, None)) is not None:
                pending[pool.submit(fn, task[1])] = task
            if not pending:
                break
            finished, _ = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                index, item = pending.pop(future)
                result = future.result()
                results[index] = result
                if on_result is not None:
                    on_result(item, result)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return [results[i] for i in range(len(results))]
