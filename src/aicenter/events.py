"""The in-process event bus: wakes this process's controllers when jobs changed in a way they act on.

Below the services (which publish after their commits: a submit, a stop), the controllers (which subscribe and
publish their own decisions to each other) and the API. In-process only: controllers on other server replicas
notice the same changes on their next interval, which is what keeps this an optimization and never a
correctness concern.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession

log = logging.getLogger(__name__)

__all__ = ["EventBus", "alerts_outbox", "jobs_changed", "notify_after_commit", "routes_changed", "ssh_keys_changed"]


class EventBus:
    """Callbacks called on ``notify()``; a failing callback is logged and never reaches the publisher."""

    def __init__(self) -> None:
        self._listeners: list[Callable[[], None]] = []

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` on every ``notify()``; returns the function that unsubscribes it."""
        self._listeners.append(callback)
        return lambda: self._listeners.remove(callback) if callback in self._listeners else None

    def notify(self) -> None:
        """Call every subscriber now."""
        for callback in tuple(self._listeners):  # a callback may unsubscribe
            try:
                callback()
            except Exception:  # a listener's failure must not break the caller's request
                log.exception("event listener failed")

    def notify_after_commit(self, session: AsyncSession) -> None:
        """``notify()`` once ``session``'s transaction commits (not before: subscribers would not see the rows)."""
        event.listen(session.sync_session, "after_commit", lambda _session: self.notify(), once=True)


jobs_changed = EventBus()
"""Jobs were submitted, stopped, queued, placed or finished: the job controllers have work."""


alerts_outbox = EventBus()
"""Notifications were queued: the alert delivery loop has work."""


ssh_keys_changed = EventBus()
"""A user added or deleted an SSH key: running notebooks' authorized_keys files are due to be rewritten."""


routes_changed = EventBus()
"""Services, revisions, replicas or keys changed: this process's serving gateway reloads its route table now."""


def notify_after_commit(session: AsyncSession) -> None:
    """Wake the job controllers once ``session`` commits (``jobs_changed``)."""
    jobs_changed.notify_after_commit(session)
