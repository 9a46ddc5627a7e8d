"""Waiting on a real server in journeys: poll until an answer, fail naming what did not happen."""

from __future__ import annotations

import time
from typing import Any

import pytest

__all__ = ["DEADLINE_S", "wait"]

DEADLINE_S = 120.0


def wait(what: str, check: Any, deadline_s: float = DEADLINE_S, *, show: Any = None) -> Any:
    """``check()``'s first truthy answer; the test fails after ``deadline_s`` (saying what ``show()`` returns)."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.2)  # polling interval: the loop exits on what it reads
    pytest.fail(f"{what}: not within {deadline_s} s" + (f"; now: {show()}" if show is not None else ""))
