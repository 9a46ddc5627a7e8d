"""The one retry policy of push and pull: which failures are worth another try, how often and how far apart.

Built on ``stamina`` rather than bare ``tenacity`` (which it wraps): its defaults are the ones a transfer wants
(exponential backoff with jitter, a bounded number of attempts, only the errors named are retried), it is typed,
it logs each scheduled retry on the ``stamina`` logger, and ``stamina.set_testing`` turns the waits off, so the
policy is tested without sleeping. With tenacity each of those is a setting to get right at every call site.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import TypeVar

import stamina

from aicenter.client.errors import ApiError, ConnectionFailed

__all__ = ["ATTEMPTS", "RETRY_STATUS", "attempts", "is_transient", "retrying"]

T = TypeVar("T")

# stamina logs every scheduled retry on its logger. Where the program configured no logging at all (the CLI, a
# plain script), Python's last-resort handler would print a bare "stamina.retry_scheduled" on stderr; a
# NullHandler keeps that quiet, as it was before, while an application's own logging still gets the records.
logging.getLogger("stamina").addHandler(logging.NullHandler())

ATTEMPTS = 3  # tries in all: a dropped connection or a restarting proxy, not an outage, is what we ride out
RETRY_STATUS = frozenset({502, 503, 504})  # a gateway or a replica that is restarting; any other answer is final
# Waits of ~0.5 s then ~1 s (plus up to 0.25 s of jitter, so parallel workers do not retry in step): a restarted
# API replica answers again within about a second here.
WAIT_INITIAL = 0.5
WAIT_MAX = 4.0
WAIT_JITTER = 0.25


def is_transient(exc: Exception) -> bool:
    """True for failures another try may fix: no answer (connection refused, reset, timed out) or a gateway error."""
    return isinstance(exc, ConnectionFailed) or (isinstance(exc, ApiError) and exc.status in RETRY_STATUS)


def attempts() -> Iterator[stamina.Attempt]:
    """The policy's attempts, for a block that resets its own state on each try (``with attempt: ...``)."""
    return iter(
        stamina.retry_context(
            on=is_transient,
            attempts=ATTEMPTS,
            timeout=None,  # a part of a big file may take minutes: the number of tries bounds the retrying
            wait_initial=WAIT_INITIAL,
            wait_max=WAIT_MAX,
            wait_jitter=WAIT_JITTER,
            wait_exp_base=2,
        )
    )


def retrying(call: Callable[[], T]) -> T:
    """``call()`` under the policy: transient failures are tried again, the last one (or any other) is raised."""
    for attempt in attempts():
        with attempt:
            return call()
    raise AssertionError("unreachable: the last attempt returns or raises")
